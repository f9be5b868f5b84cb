-- Loops fire on events (triggers.event = {"pattern", "channel"}), matched by
-- the events trigger as event routines are: each event reads its user's
-- event loops, and only those.

set local search_path = ceaseless, pg_catalog, public;

create index loops_event_idx on loops (user_id) where triggers ? 'event';

comment on index loops_event_idx is
    'The event loops of a user: what INSERT INTO events reads, whatever else the user has.';

-- An iteration records what fired it: an event now too.
alter table topology_runs drop constraint topology_runs_trigger_type_check;
alter table topology_runs add constraint topology_runs_trigger_type_check
    check (trigger_type in ('cron', 'on_completion', 'webhook', 'manual', 'event'));
