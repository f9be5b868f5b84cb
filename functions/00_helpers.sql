-- Internal helpers every other functions/ file calls: settings, who is
-- acting, blank and bounded text, and the one way a bad value is refused.
--
-- Called by: the functions, triggers and views of the other files; a user
-- role reaches a few of them only through its rows' triggers and constraints
-- (99_access.sql).
-- Guarantees: pure or read-only, so calling one locks nothing beyond the rows
-- it reads; every refusal of a bad value raises CE422 through _invalid_value,
-- naming where the value is, the rule and the value (bounded), so clients
-- read one error shape whatever refused it.

-- Read a numeric setting, failing loudly when it is missing: a silent default
-- here would hide an operator's deleted row until a lease or a cap misbehaves.
create or replace function _setting_int(p_key text)
returns integer
language plpgsql stable
as $$
declare
    v_value jsonb;
begin
    select value into v_value from settings where key = p_key;
    if v_value is null then
        raise exception 'setting % is missing from ceaseless.settings', p_key
            using errcode = 'CE500',
                  hint = 'Insert the row again; the defaults are in db/0001_foundation.sql, '
                         'db/0002_routines_engine.sql and db/0007_seed_data.sql.';
    end if;
    return (v_value #>> '{}')::integer;
end;
$$;

comment on function _setting_int(text) is
    'Read an integer from ceaseless.settings; raises CE500 when the row is missing.';

-- Who is acting: the login role, for the audit log (its actor column
-- defaults to the same, db/0026) and for the messages that name who did
-- something. session_user, not current_user: inside a security definer
-- function current_user is the function's owner. Never a setting: any session
-- can `set ceaseless.actor`, so a listener's worker id is recorded beside the
-- role (audit_log.worker), never instead of it.
create or replace function _actor()
returns text
language sql stable
as $$
    select session_user::text;
$$;

comment on function _actor() is
    'The acting login role (session_user): the audit actor, whatever the session has SET.';

-- Does the session's login role act for every owner: an operator, a listener,
-- or the owner of schema ceaseless (the role that migrates, a superuser or, on
-- a managed server, the role the provider gives; it owns every table, so it
-- reads and writes every row anyway)? A superuser is a member of every role.
-- The owner is named because on PostgreSQL 16 and later a CREATEROLE role
-- that created the group roles holds only ADMIN on them, not their
-- privileges. session_user, not current_user: inside a security definer
-- function current_user is the function's owner, and session_user cannot be
-- SET.
create or replace function _acts_for_everyone()
returns boolean
language sql stable
as $$
    select pg_catalog.pg_has_role(session_user, 'ceaseless_operator', 'usage')
        or pg_catalog.pg_has_role(session_user, 'ceaseless_listener', 'usage')
        or pg_catalog.pg_has_role(session_user, (select n.nspowner from pg_catalog.pg_namespace n
                                                 where n.nspname = 'ceaseless'), 'usage');
$$;

comment on function _acts_for_everyone() is
    'True when the session''s login role is an operator, a listener, or the owner of schema '
    'ceaseless (a superuser, or a managed server''s migrating role).';

-- May the caller act on a row owned by p_owner? Its own rows, or any row for
-- operators and listeners. For security definer functions, where
-- current_user is the owner of the function and row-level security is off.
create or replace function _acts_for(p_owner text)
returns boolean
language sql stable
as $$
    select p_owner = session_user::text or _acts_for_everyone();
$$;

comment on function _acts_for(text) is
    'True when the session''s role owns p_owner''s rows or is an operator or a listener.';

-- Exponential backoff with jitter for the next retry of a job that has used
-- p_attempts attempts. Jitter keeps a burst of failures (a provider outage)
-- from coming back as a synchronised burst.
--
-- PL/pgSQL: a SQL function with a SET clause is planned afresh on every call,
-- and finish_runs calls this once per failed run of a batch.
create or replace function _retry_delay(p_attempts integer)
returns interval
language plpgsql volatile
as $$
begin
    return make_interval(secs =>
        least(_setting_int('retry_max_secs')::double precision,
              _setting_int('retry_base_secs') * power(2, greatest(p_attempts - 1, 0)))
        * (1 + random() * 0.25));
end;
$$;

comment on function _retry_delay(integer) is
    'Backoff before retry number p_attempts: base * 2^(attempts-1), capped, plus up to 25% jitter.';

-- What counts as whitespace where a text must not be blank, as the inside of
-- a regular expression's brackets: Unicode's White_Space set plus the
-- invisible zero-width characters, not just U+0020. btrim() trims only
-- spaces, so a prompt of tabs and newlines, or of U+00A0 / U+3000 pasted from
-- a document, would pass a "not blank" check built on it and reach an agent
-- as an empty task. Immutable and without arguments: its callers' plans hold
-- the patterns built from it as constants.
create or replace function _blank_characters()
returns text
language sql immutable
as $$
    select '\u0009-\u000d\u001c-\u0020\u0085\u00a0\u1680\u180e\u2000-\u200b\u2028\u2029\u202f\u205f\u2060\u3000\ufeff'::text;
$$;

comment on function _blank_characters() is
    'The whitespace _is_blank and _trim_blank skip, as regular expression bracket contents.';

-- Is a text made only of whitespace (_blank_characters), empty, or NULL?
create or replace function _is_blank(p_value text)
returns boolean
language plpgsql immutable
as $$
begin
    return coalesce(p_value !~ ('[^' || _blank_characters() || ']'), true);
end;
$$;

comment on function _is_blank(text) is
    'True for NULL, empty, or only Unicode whitespace (White_Space plus zero-width characters).';

-- The text without leading and trailing whitespace in the sense of
-- _is_blank, so that "ROUTINE_OK\n" is the reply ROUTINE_OK.
create or replace function _trim_blank(p_value text)
returns text
language plpgsql immutable
as $$
begin
    return regexp_replace(p_value,
                          '^[' || _blank_characters() || ']+|[' || _blank_characters() || ']+$',
                          '', 'g');
end;
$$;

comment on function _trim_blank(text) is
    'p_value without leading and trailing Unicode whitespace (the characters _is_blank counts).';

-- The caps on untrusted text, in one place (docs/routines.md lists them).
-- Each bounds work that someone other than the sender pays for: a pattern is
-- compiled and run against every event of its user, a schedule is expanded by
-- croniter on the listener's event loop, event content and prompts are copied
-- into jobs and piped to agents. Far above any real use, and constants rather
-- than settings: an operator has no reason to move them, and a cap read from a
-- table could be deleted or raised by whoever it is meant to stop.
-- The schedule caps are checked here only: the listener trusts a stored
-- schedule (db/0045 disabled those stored before the caps).
--
-- Immutable: a call with a constant name (a trigger's WHEN clause) is
-- evaluated once, when the expression is planned.
create or replace function _input_cap(p_name text)
returns integer
language plpgsql immutable
as $$
begin
    return case p_name
        -- trigger_config.pattern of an event routine, in characters.
        when 'pattern' then 2000
        -- trigger_config.schedule of a cron routine, in characters.
        when 'schedule' then 1000
        -- Items of one comma-separated cron field: no field has more than 60
        -- values (seconds, minutes), so a longer list only repeats them.
        when 'schedule_items' then 60
        -- A routine's action_config.prompt, title and description.
        when 'prompt' then 100000
        -- events.content.
        when 'event_content' then 1000000
        -- events.payload, in characters of its JSON text: stored with every
        -- event, and a megabyte of structure is already more than any
        -- subscriber reads.
        when 'event_payload' then 1000000
        -- job.prompt: a routine's prompt plus the event content or webhook
        -- body that fired it (webhook_max_body_bytes, 1 MiB by default).
        when 'job_prompt' then 2000000
        -- job.payload, in characters of its JSON text.
        when 'job_payload' then 1000000
        -- Nodes and edges of one topology graph: each node becomes a row and
        -- a job of every run, and the cycle check walks the edges.
        when 'graph_nodes' then 200
        when 'graph_edges' then 2000
        -- topology_runs.final_message: the outputs of a run's sink nodes
        -- (each at most an agent's 64 KiB reply), which a loop carries into
        -- its next iteration.
        when 'run_final_message' then 1000000
        -- Levels of nesting of a JSON column written from outside
        -- (02_bounded_json.sql): the listener decodes these
        -- documents, and a decoder recurses once per level, so a small
        -- document nested thousands deep would stop every part that reads it.
        -- Real configurations and payloads nest a dozen levels at most.
        when 'json_depth' then 64
    end;
end;
$$;

comment on function _input_cap(text) is
    'The cap on a kind of untrusted text (pattern, schedule, schedule_items, prompt, event_content, '
    'event_payload, '
    'job_prompt, job_payload, graph_nodes, graph_edges, run_final_message, json_depth): characters, '
    'items for schedule_items, graph_nodes and graph_edges, levels for json_depth; NULL for an '
    'unknown name.';

-- Refuse (CE422) a text longer than its cap, naming where it was found, the
-- cap and its length, and showing only its first 40 characters: the value is
-- untrusted and may be a megabyte, which would then be copied into the error,
-- the server log and whatever client prints it.
create or replace function _refuse_long(p_where text, p_value text, p_cap text)
returns void
language plpgsql immutable
as $$
declare
    v_cap constant integer := _input_cap(p_cap);
    v_length constant integer := char_length(p_value);
begin
    if v_cap is null then
        -- A typo in a cap name would otherwise let every length through.
        raise exception '_refuse_long: no cap named %', p_cap;
    end if;
    if v_length > v_cap then
        raise exception '%: must be at most % characters, this one has %; got %',
            p_where, v_cap, v_length, to_jsonb(left(p_value, 40) || '…')
            using errcode = 'CE422', table = split_part(p_where, '.', 1),
                  column = split_part(p_where, '.', 2);
    end if;
end;
$$;

comment on function _refuse_long(text, text, text) is
    'Raise CE422 when p_value is longer than the cap p_cap (_input_cap), naming p_where, the cap and '
    'the length and showing only the first 40 characters.';

-- Raise CE422 for a bad value of a validated column: where it is
-- (routines.trigger_config.pattern, loops.graph, …), the rule, and the value
-- shown up to 200 characters, because it is untrusted and may be a megabyte
-- (a pattern given as an array of a million numbers). The table and column
-- go into the error's fields, for clients that read them. Every validation
-- trigger raises through this one function.
create or replace function _invalid_value(p_where text, p_rule text, p_value jsonb)
returns void
language plpgsql
as $$
declare
    v_shown text := coalesce(p_value::text, 'nothing');
begin
    if char_length(v_shown) > 200 then
        v_shown := format('%s… (%s characters)', left(v_shown, 200), char_length(v_shown));
    end if;
    raise exception '%: %; got %', p_where, p_rule, v_shown
        using errcode = 'CE422', table = split_part(p_where, '.', 1),
              column = split_part(p_where, '.', 2);
end;
$$;

comment on function _invalid_value(text, text, jsonb) is
    'Raise CE422 naming where (table.column[.key…]), the rule and the bad value, shown up to 200 '
    'characters; the table and column go into the error''s fields.';

-- Is a value a JSON string with something other than whitespace in it? Any
-- Unicode whitespace counts as blank (_is_blank), not only spaces.
create or replace function _is_text(p_value jsonb)
returns boolean
language plpgsql immutable
as $$
begin
    -- coalesce: an absent key is NULL, and "not NULL" would let it through.
    return coalesce(jsonb_typeof(p_value) = 'string' and not _is_blank(p_value #>> '{}'), false);
end;
$$;

comment on function _is_text(jsonb) is 'True for a JSON string that is not blank (Unicode whitespace).';

-- The checks a validation trigger makes of one field, each written once so
-- that every table refuses a blank name, a non-text prompt or a bad count
-- with the same rule and the same error (_invalid_value). A failed check
-- raises; a passed one returns nothing.

-- Refuse a text column that is blank (_is_blank: NULL, empty or only
-- whitespace): a blank name cannot be told apart in a view or a
-- notification, and a blank owner is a row nobody can act for.
create or replace function _check_not_blank(p_where text, p_value text)
returns void
language plpgsql
as $$
begin
    if _is_blank(p_value) then
        perform _invalid_value(p_where, 'must not be blank', to_jsonb(p_value));
    end if;
end;
$$;

comment on function _check_not_blank(text, text) is
    'Raise CE422 naming p_where when p_value is NULL, empty or only Unicode whitespace.';

-- Refuse a JSON value that is not a string with something other than
-- whitespace in it (_is_text), with the caller's rule.
create or replace function _check_text(p_where text, p_value jsonb, p_rule text)
returns void
language plpgsql
as $$
begin
    if not _is_text(p_value) then
        perform _invalid_value(p_where, p_rule, p_value);
    end if;
end;
$$;

comment on function _check_text(text, jsonb, text) is
    'Raise CE422 naming p_where and the rule p_rule unless p_value is a JSON string that is not '
    'blank.';

-- Refuse a JSON value that is not a positive integer (1 to 2^31 - 1, written
-- without a fraction or an exponent, as the listener reads it). Absent or
-- JSON null passes, unless p_required.
create or replace function _check_positive_int(
    p_where text, p_value jsonb, p_rule text default 'must be a positive integer',
    p_required boolean default false
)
returns void
language plpgsql
as $$
begin
    if coalesce(jsonb_typeof(p_value), 'null') = 'null' then
        if p_required then
            perform _invalid_value(p_where, p_rule, p_value);
        end if;
    elsif jsonb_typeof(p_value) <> 'number' or (p_value #>> '{}') !~ '^[0-9]+$'
          or (p_value #>> '{}')::numeric not between 1 and 2147483647 then
        perform _invalid_value(p_where, p_rule, p_value);
    end if;
end;
$$;

comment on function _check_positive_int(text, jsonb, text, boolean) is
    'Raise CE422 naming p_where and p_rule unless p_value is a positive JSON integer (or absent '
    'or null, unless p_required).';

-- The first key of a JSON object (in key order) that is not one of p_known,
-- or NULL: a misspelt key ("on_complete") would be a setting that silently
-- does nothing. p_object must be an object.
--
-- PL/pgSQL for its cached plan: a graph's validation calls it for every node
-- and edge, and a SQL function with a SET clause is planned on every call.
create or replace function _unknown_key(p_object jsonb, p_known text[])
returns text
language plpgsql immutable
as $$
begin
    return (select k from jsonb_object_keys(p_object) k where k <> all (p_known)
            order by k limit 1);
end;
$$;

comment on function _unknown_key(jsonb, text[]) is
    'The first key (in key order) of the JSON object p_object that p_known does not list, or NULL.';

-- The columns of p_table other than p_bookkeeping, quoted and comma-separated:
-- the UPDATE OF list of a row trigger that judges or announces configuration,
-- so an UPDATE of runtime bookkeeping alone (a fire's next_fire_at, a finish's
-- counters), written at every fire and finish, pays no trigger call. Read
-- from the catalog when the trigger is created (migrate creates it again
-- after every migration), so a new column is judged unless it is named here.
create or replace function _update_of_all_but(p_table regclass, p_bookkeeping text[])
returns text
language plpgsql stable
as $$
begin
    return (select string_agg(quote_ident(a.attname), ', ' order by a.attnum)
            from pg_attribute a
            where a.attrelid = p_table and a.attnum > 0 and not a.attisdropped
              and a.attname <> all (p_bookkeeping));
end;
$$;

comment on function _update_of_all_but(regclass, text[]) is
    'The columns of p_table not in p_bookkeeping, quoted and comma-separated: an UPDATE OF list.';

-- Create (or replace) the statement-level AFTER trigger p_name on p_table
-- for p_event, calling _tg_<p_name>, with its transition tables named as
-- every statement trigger here reads them: new_rows for an INSERT, old_rows
-- and new_rows for an UPDATE, old_rows for a DELETE. PostgreSQL keeps a
-- table's transition rows once for all of its triggers, so an UPDATE
-- trigger that reads only new_rows costs nothing more for declaring
-- old_rows too.
-- CREATE OR REPLACE, never drop and create: DROP TRIGGER takes ACCESS
-- EXCLUSIVE on the table, stalling even its readers until migrate commits.
create or replace function _statement_trigger(p_name text, p_event text, p_table regclass)
returns void
language plpgsql
as $$
declare
    v_referencing constant text := case p_event
        when 'insert' then 'new table as new_rows'
        when 'update' then 'old table as old_rows new table as new_rows'
        when 'delete' then 'old table as old_rows' end;
begin
    if v_referencing is null then
        raise exception 'a statement trigger fires on insert, update or delete, not %', p_event;
    end if;
    execute format(
        'create or replace trigger %I after %s on %s referencing %s '
        'for each statement execute function %I()',
        p_name, p_event, p_table, v_referencing, format('_tg_%s', p_name));
end;
$$;

comment on function _statement_trigger(text, text, regclass) is
    'Create (or replace) the statement-level AFTER trigger p_name on p_table for p_event '
    '(insert, update or delete), calling _tg_<p_name> with transition tables old_rows and new_rows.';
