-- What the listener's cron scheduler reads: routines waiting for a next slot,
-- routines due now, and when the next one is due.
--
-- Called by: listener/scheduler.py (through listener/queries), which runs
-- croniter — the one authority on cron times — on what these return and hands
-- the answers to set_next_fires and fire_cron_routines (41_routine_firing.sql).
-- Guarantees: read-only, except the row locks of due_cron_routines, which
-- last until the caller's transaction ends; so the caller must fire what it
-- was given in the same transaction, and two listeners never get the same
-- due routine (SKIP LOCKED).

set local search_path = ceaseless, pg_catalog, pg_temp;

-- Enabled cron routines with no next_fire_at yet (created, changed or
-- re-enabled since the listener last looked); p_ids limits it to the routines
-- a ceaseless_schedule NOTIFY named, NULL means all (startup, catch-up).
create or replace function unscheduled_cron_routines(p_ids uuid[] default null)
returns table (id uuid, schedule text, timezone text)
language sql stable
set search_path = pg_catalog, ceaseless, pg_temp
as $$
    select r.id, r.trigger_config ->> 'schedule', r.trigger_config ->> 'timezone'
    from routines r
    where r.enabled and r.trigger_type = 'cron' and r.next_fire_at is null
      and (p_ids is null or r.id = any (p_ids));
$$;

comment on function unscheduled_cron_routines(uuid[]) is
    'Enabled cron routines waiting for the listener to compute their next_fire_at '
    '(all of them, or those among p_ids).';

-- The routines due at p_now, oldest slot first, locked for the caller's
-- transaction. SKIP LOCKED: a routine another listener is firing right now
-- is its business, and waiting for it would only fire nothing twice.
--
-- Locks: the returned routines rows, FOR NO KEY UPDATE, until the caller
-- commits. Not FOR UPDATE: that would block the KEY SHARE a manual run's
-- foreign key takes on the same routine while it holds the fire lock, which
-- the caller is about to wait for — a deadlock.
create or replace function due_cron_routines(p_now timestamptz, p_limit integer)
returns table (id uuid, schedule text, timezone text, next_fire_at timestamptz)
language sql volatile
set search_path = pg_catalog, ceaseless, pg_temp
as $$
    -- idx_routines_next_fire: partial on enabled rows with a slot, so the
    -- scan reads only what is due, however many routines exist.
    select r.id, r.trigger_config ->> 'schedule', r.trigger_config ->> 'timezone', r.next_fire_at
    from routines r
    where r.enabled and r.next_fire_at is not null and r.next_fire_at <= p_now
    order by r.next_fire_at
    limit p_limit
    for no key update skip locked;
$$;

comment on function due_cron_routines(timestamptz, integer) is
    'Lock and return up to p_limit routines due at p_now (FOR NO KEY UPDATE SKIP LOCKED); fire '
    'them with fire_cron_routines in the same transaction.';

-- When the earliest scheduled routine is due, so the scheduler can sleep
-- exactly until then; NULL when nothing is scheduled.
create or replace function next_cron_fire()
returns timestamptz
language sql stable
set search_path = pg_catalog, ceaseless, pg_temp
as $$
    select min(r.next_fire_at) from routines r where r.enabled and r.next_fire_at is not null;
$$;

comment on function next_cron_fire() is
    'The earliest next_fire_at among enabled routines, or NULL.';
