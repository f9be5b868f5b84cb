-- Backfill: cron slots the missed-schedule rule collapsed into one fire,
-- fired on request (backfill_routine, backfill_loop), each recorded with the
-- slot it stands for.

set local search_path = ceaseless, pg_catalog, public;

alter table routine_runs drop constraint routine_runs_trigger_type_check;
alter table routine_runs add constraint routine_runs_trigger_type_check
    -- backfill: a cron slot fired on request after it passed (slot_at).
    check (trigger_type in ('cron', 'event', 'webhook', 'manual', 'backfill'));

alter table topology_runs drop constraint topology_runs_trigger_type_check;
alter table topology_runs add constraint topology_runs_trigger_type_check
    check (trigger_type in ('cron', 'on_completion', 'webhook', 'manual', 'event', 'backfill'));

-- Written by the firing path only (_fire_routines, _fire_loop), for cron and
-- backfill fires: a user role has no grant on it.
alter table routine_runs add column slot_at timestamptz;
alter table topology_runs add column slot_at timestamptz;

comment on column routine_runs.slot_at is
    'The cron slot this run stands for: the slot a cron fire was due at, or the slot a backfill '
    'fired; NULL for other fires and for the row counting missed slots.';
comment on column topology_runs.slot_at is
    'The cron slot this iteration stands for: the slot a cron fire was due at, or the slot a '
    'backfill fired; NULL for other fires.';

-- Backfill's "already fired?" probe: one entry per slot that started a run,
-- so a backfill over a long range reads only the slots it asks about.
create index routine_runs_slot_idx on routine_runs (routine_id, slot_at)
    where slot_at is not null and status <> 'skipped';
create index topology_runs_slot_idx on topology_runs (loop_id, slot_at)
    where slot_at is not null and status <> 'skipped';
comment on index routine_runs_slot_idx is
    'The cron slots of a routine that started a run: what backfill_routine skips as fired.';
comment on index topology_runs_slot_idx is
    'The cron slots of a loop that started an iteration: what backfill_loop skips as fired.';

insert into settings (key, value, description) values
    ('backfill_max', '1000',
     'The most slots one backfill_routine or backfill_loop call may fire (its p_max): each slot '
     'is a run and a job, so a mistyped range cannot flood the queue. 1 to 100000; default 1000.')
on conflict (key) do nothing;

-- The firing path carries the slot each fire stands for (p_slots, p_slot).
drop function if exists _fire_schedules(text, uuid[], text, timestamptz, text[], text[],
                                        integer[], boolean);
drop function if exists _fire_routines(uuid[], text, timestamptz, text[], text[], integer[],
                                       boolean, uuid[]);
drop function if exists _fire_loop(uuid, text, text, text, timestamptz);
