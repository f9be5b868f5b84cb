-- Loops' cron: what the listener's scheduler reads and calls for loops, as
-- 42_cron_schedule.sql and 41_routine_firing.sql do for routines.
--
-- Called by: listener/scheduler.py (through listener/queries/schedule.py),
-- which runs croniter — the one authority on cron times — on what these
-- return and hands the answers to set_loop_next_fires and fire_cron_loops.
-- Guarantees: due_cron_loops locks what it returns (FOR NO KEY UPDATE SKIP
-- LOCKED) until the caller's transaction ends, so the caller fires them in
-- that transaction and two listeners never fire one slot; missed slots fire
-- once (their count is kept in the run's trigger_detail) and the next slot is
-- the listener's, computed from now; a loop changed, disabled or stopped
-- since it was read is left out; every fire goes through _fire_loop
-- (56_loop_firing.sql), so the lock order there holds.

set local search_path = ceaseless, pg_catalog, pg_temp;

-- Enabled cron loops with no next_fire_at yet (created, changed or
-- re-enabled since the listener last looked); p_ids limits it to the loops a
-- ceaseless_schedule NOTIFY named, NULL means all (startup, catch-up).
create or replace function unscheduled_cron_loops(p_ids uuid[] default null)
returns table (id uuid, schedule text, timezone text)
language sql stable
set search_path = pg_catalog, ceaseless, pg_temp
as $$
    select l.id, l.triggers ->> 'cron', l.triggers ->> 'timezone'
    from loops l
    where l.enabled and l.triggers ? 'cron' and l.next_fire_at is null
      and (p_ids is null or l.id = any (p_ids));
$$;

comment on function unscheduled_cron_loops(uuid[]) is
    'Enabled cron loops waiting for the listener to compute their next_fire_at (all of them, or '
    'those among p_ids).';

-- The loops due at p_now, oldest slot first, locked for the caller's
-- transaction. SKIP LOCKED: a loop another listener is firing, or whose
-- iteration is ending right now, is not waited for; its slot stays due and
-- the next pass takes it.
--
-- Locks: the returned loops rows, FOR NO KEY UPDATE, until the caller
-- commits (the lock _fire_loop takes, so firing them waits for nothing).
create or replace function due_cron_loops(p_now timestamptz, p_limit integer)
returns table (id uuid, schedule text, timezone text, next_fire_at timestamptz)
language sql volatile
set search_path = pg_catalog, ceaseless, pg_temp
as $$
    -- loops_next_fire_idx: partial on enabled loops with a slot.
    select l.id, l.triggers ->> 'cron', l.triggers ->> 'timezone', l.next_fire_at
    from loops l
    where l.enabled and l.next_fire_at is not null and l.next_fire_at <= p_now
    order by l.next_fire_at
    limit p_limit
    for no key update skip locked;
$$;

comment on function due_cron_loops(timestamptz, integer) is
    'Lock and return up to p_limit loops due at p_now (FOR NO KEY UPDATE SKIP LOCKED); fire them '
    'with fire_cron_loops in the same transaction.';

-- Fire the due cron loops the caller locked and scheduled: one fire per
-- loop, however many slots it missed (p_missed[i], recorded in the run's
-- trigger_detail), each moved to the next slot the listener computed from
-- now. A refused fire (an iteration still live, the loop disabled) is a
-- skipped run, and the loop still moves on: the slot is spent.
create or replace function fire_cron_loops(
    p_ids uuid[],
    p_next_fire_ats timestamptz[],
    p_missed integer[],
    p_now timestamptz default now()
)
returns table (loop_id uuid, run_id uuid, status text, skip_reason text,
               next_fire_at timestamptz)
language plpgsql
set search_path = pg_catalog, ceaseless, pg_temp
as $$
#variable_conflict use_column
declare
    v_input record;
    v_run uuid;
begin
    if cardinality(p_ids) is distinct from cardinality(p_next_fire_ats)
       or cardinality(p_ids) is distinct from cardinality(p_missed) then
        raise exception 'fire_cron_loops: the three arrays must have one entry per loop'
            using errcode = 'CE422';
    end if;
    for v_input in
        select l.id, l.triggers ->> 'cron' as schedule, i.next_at,
               greatest(coalesce(i.missed, 0), 0) as missed
        from unnest(p_ids, p_next_fire_ats, p_missed) with ordinality as i(id, next_at, missed, ord)
        join loops l on l.id = i.id
        where l.enabled and l.triggers ? 'cron'
          and l.next_fire_at is not null and l.next_fire_at <= p_now
        order by i.ord
    loop
        v_run := _fire_loop(v_input.id, 'cron',
                            v_input.schedule
                            || case when v_input.missed > 0
                                    then format(' (%s missed slots)', v_input.missed) else '' end,
                            null, p_now);
        -- The fire may have stopped nothing, but a loop disabled since it
        -- was read keeps no slot (loops_validate clears it).
        update loops l set next_fire_at = v_input.next_at
        where l.id = v_input.id and l.enabled;
        return query
        select v_input.id, r.id, r.status, r.skip_reason, l.next_fire_at
        from topology_runs r, loops l
        where r.id = v_run and l.id = v_input.id;
    end loop;
end;
$$;

comment on function fire_cron_loops(uuid[], timestamptz[], integer[], timestamptz) is
    'Fire a batch of due cron loops the caller locked, through _fire_loop (missed slots fire '
    'once), and move each to the next slot given.';

-- The listener's answer to ceaseless_schedule for loops: store freshly
-- computed next_fire_at values, but only where the schedule and timezone
-- they were computed from are still the loop's (an edit in between wins).
-- Returns how many were stored.
create or replace function set_loop_next_fires(
    p_ids uuid[], p_schedules text[], p_timezones text[], p_next_fire_ats timestamptz[]
)
returns integer
language sql
set search_path = pg_catalog, ceaseless, pg_temp
as $$
    with computed as (
        select * from unnest(p_ids, p_schedules, p_timezones, p_next_fire_ats)
            as c(id, schedule, timezone, next_fire_at)
    ),
    stored as (
        update loops l
        set next_fire_at = c.next_fire_at
        from computed c
        where l.id = c.id
          and l.enabled
          and l.triggers ->> 'cron' = c.schedule
          and l.triggers ->> 'timezone' = c.timezone
        returning l.id
    )
    select count(*)::integer from stored;
$$;

comment on function set_loop_next_fires(uuid[], text[], text[], timestamptz[]) is
    'Store listener-computed next_fire_at values where the loop still has that schedule and '
    'timezone; returns how many were stored.';

-- Disable a loop whose stored configuration the listener cannot use (a
-- schedule croniter rejects despite validation), recording why, so it stops
-- failing silently and never blocks the others.
create or replace function disable_loop(p_id uuid, p_error text)
returns void
language sql
set search_path = pg_catalog, ceaseless, pg_temp
as $$
    update loops set enabled = false, last_error = left(p_error, 2000) where id = p_id;
$$;

comment on function disable_loop(uuid, text) is
    'Disable a loop the engine cannot run, recording the error in last_error.';

-- When the earliest scheduled loop is due, so the scheduler can sleep
-- exactly until then; NULL when none is scheduled.
create or replace function next_cron_loop_fire()
returns timestamptz
language sql stable
set search_path = pg_catalog, ceaseless, pg_temp
as $$
    select min(l.next_fire_at) from loops l where l.enabled and l.next_fire_at is not null;
$$;

comment on function next_cron_loop_fire() is
    'The earliest next_fire_at among enabled loops, or NULL.';
