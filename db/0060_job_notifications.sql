-- Who hears of a lane's jobs that end for good. Before, only a blocked job
-- (a missing login, a forge question) was announced, and only on the default
-- sink: a plain job that used up its attempts told nobody. Each lane now says
-- which endings it announces and on which sink, as a routine does with its
-- notify_on_* columns; the rule is _tg_job_ended (functions/60_notifications.sql),
-- which replaces _tg_job_blocked.

set local search_path = ceaseless, pg_catalog, public;

alter table agents
    add column notify_on_failed boolean not null default true,
    add column notify_on_blocked boolean not null default true,
    add column notify_on_abandoned boolean not null default false,
    add column notify_channel text,
    -- An empty name is no sink: every notification of the lane would fail
    -- at delivery as "unknown notification sink ''".
    add constraint notify_channel_not_empty check (notify_channel is null or notify_channel <> '');

comment on column agents.notify_on_failed is
    'Queue a failure notification when a plain job of this lane (no routine, no topology run) '
    'fails for good, its attempts used up.';
comment on column agents.notify_on_blocked is
    'Queue an attention notification when a job of this lane is blocked on what only a person '
    'can fix: its agent could not authenticate, or a forge run asks for a human.';
comment on column agents.notify_on_abandoned is
    'Queue a failure notification when a plain job of this lane is abandoned: every attempt''s '
    'lease expired without an agent''s verdict. Off by default: a listener going away is the '
    'operator''s to see first.';
comment on column agents.notify_channel is
    'The notification sink (a key of the notification_sinks setting) of this lane''s job '
    'notifications; NULL: "default".';

-- The one rule of a job's end for good is _tg_job_ended, on trigger job_ended.
drop trigger if exists job_blocked on job;
drop function if exists _tg_job_blocked();

-- The sinks' description names the webhook formats.
update settings
set description = 'Notification sinks by name (notifications.channel and agents.notify_channel '
                  'name one; NULL means "default"). Types: {"type": "log"}, {"type": "pg", '
                  '"channel": "<listen channel>"}, {"type": "webhook", "url": "https://…", '
                  '"format": "generic" | "slack" | "discord", "headers": {…}, "timeout_secs": '
                  '10}. See docs/notifications.md.'
where key = 'notification_sinks';
