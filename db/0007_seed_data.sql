-- Data the schema starts with, inserted once: settings rows and the zone list.
--
-- functions/ used to insert these on every migrate (the notification settings
-- in 60_notifications.sql, the zone list at the end of 35_cron.sql), so a
-- settings row an operator deleted came back at the next `ceaseless up`, and
-- every start rewrote a table. Rows live here now, applied once; functions/
-- writes no data. A later default is a later migration, with ON CONFLICT DO
-- NOTHING so an operator's value is kept.

set local search_path = ceaseless, pg_catalog, public;

-- Before this file, functions/60_notifications.sql inserted these two along
-- with _notification_sinks(). Where that function exists they were seeded
-- already, and a missing one was deleted by an operator: it stays deleted.
-- ON CONFLICT keeps an operator's value all the same.
insert into settings (key, value, description)
select seed.key, seed.value::jsonb, seed.description
from (values
    ('notification_sinks', '{"default": {"type": "log"}}',
     'Notification sinks by name (notifications.channel names one; NULL means "default"). '
     'Types: {"type": "log"}, {"type": "pg", "channel": "<listen channel>"}, '
     '{"type": "webhook", "url": "https://…", "headers": {…}, "timeout_secs": 10}. '
     'See docs/notifications.md.'),
    ('notification_max_attempts', '5',
     'Delivery attempts per notification before it is marked failed. Retries back off as '
     'retry_base_secs * 2^(attempt-1), capped at retry_max_secs, plus up to 25% jitter.')
) as seed (key, value, description)
where to_regprocedure('ceaseless._notification_sinks()') is null
on conflict (key) do nothing;

-- New: no database has it yet. ON CONFLICT in case an operator added it first.
insert into settings (key, value, description) values
    ('webhook_max_body_bytes', '1048576',
     'Largest webhook request body the HTTP ingress accepts; larger requests get 413.')
on conflict (key) do nothing;

-- The zones the server knows today. Not refilled: _timezone_error
-- (functions/35_cron.sql) falls back to pg_timezone_names for a name missing
-- here, so a zone a later tzdata upgrade adds is still accepted. The posix/
-- and right/ copies are files, not IANA names, and another machine may lack
-- them.
insert into timezone_names (name)
select name from pg_timezone_names
where name !~ '^(posix/|right/|posixrules$)'
on conflict (name) do nothing;

comment on table timezone_names is
    'IANA zone names the server knew when migrated (no posix/ or right/ copies); a name missing '
    'here is looked up in pg_timezone_names.';
