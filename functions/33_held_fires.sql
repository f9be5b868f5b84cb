-- Held fires: the overlap policies and debounce of the trigger layer, once
-- for routines and loops. A fire refused by an overlap rule (a routine's
-- cooldown or max_concurrent, a loop's live iteration) under buffer_one or
-- buffer_all, and every event or webhook fire of a target with debounce_secs,
-- becomes a row of held_fires, as does a loop's fire that comes sooner than
-- its min_interval_secs; fire_held starts the due ones through the one
-- firing path (_fire_schedules), so every guardrail and the global cap judge
-- them as any fire.
--
-- Called by: _fire_routines (42_routine_firing.sql) and _fire_loop
-- (56_loop_firing.sql) where they judge a fire (_hold_fire, _debounce_fire,
-- _fold_into_newest, _cancel_overlapping_runs, _supersede_iteration); listeners
-- (listener/daemon/scheduler.py: fire_held, and next_schedule_fire, whose
-- answer includes the earliest fire_at); the triggers below, when a blocker clears.
-- Guarantees:
-- - a held fire is a row until it starts or is refused for a reason no
--   policy holds (then recorded as skipped, as any refused fire): it
--   survives every listener's restart, and its owner reads it (row-level
--   security);
-- - a target's held fires start in order (seq), at most one per target per
--   call of fire_held, and one still refused stays held, keeping the ones
--   after it waiting;
-- - buffer_one keeps the newest refused fire (collapsed counts the ones it
--   replaced); buffer_all keeps every one, up to settings.overlap_buffer_max,
--   past which a refused fire is skipped and recorded;
-- - debounce: the fires of a target inside its window are one row, started
--   debounce_secs after the last of them and at the latest debounce_max_secs
--   after the first, with the last one's detail and context and the count;
-- - NOTIFY ceaseless_schedule {"table": "held_fires", "id": target} when a
--   fire is held anew (its fire_at may be the earliest) and when a run of a
--   target with held fires ends, so a listener calls fire_held (or sleeps
--   until the new fire_at) at once. A fire collapsing into a window only
--   moves its fire_at later, and says nothing.
-- Locks: nothing a fire waits for: a fire writes held rows by insert, or by
-- updating or deleting only rows it locks SKIP LOCKED; fire_held locks the
-- row it releases SKIP LOCKED, one release at a time (an advisory lock taken
-- without waiting), and then fires in the lock order of a fire of its kind
-- (41_fire_admission.sql, 56_loop_firing.sql).

-- Remember in transaction_state the held fire fire_held is releasing (NULL:
-- none), keeping what the transaction remembered otherwise: a fire refused
-- again then updates that row instead of holding another.
create or replace function _remember_held(p_held_id uuid)
returns void
language sql
as $$
    insert into transaction_state as s (backend_pid, xact, held_fire)
    values (pg_backend_pid(), pg_current_xact_id(), p_held_id)
    on conflict (backend_pid) do update
    set held_fire = excluded.held_fire,
        fire_mode = case when s.xact = excluded.xact then s.fire_mode end,
        fire_room = case when s.xact = excluded.xact then s.fire_room end,
        loop_fire = case when s.xact = excluded.xact then s.loop_fire end,
        xact = excluded.xact;
$$;

comment on function _remember_held(uuid) is
    'Record in transaction_state the held fire being released (NULL: none), keeping the rest.';

-- Hold a fire an overlap rule refused (p_blocked_by: cooldown, concurrency,
-- live_iteration) under a buffer policy, until p_fire_at (NULL: until a run
-- of the target ends). A fire fire_held is releasing stays its own row,
-- with the new blocker (under buffer_one, unless a newer fire was held
-- meanwhile: it folds into that one). buffer_one replaces the target's other buffered
-- fires (those not being released right now), counting them in collapsed.
-- p_slot is the cron slot a cron or backfill fire stands for, kept for its
-- run. Returns the held row's id, or NULL when buffer_all already holds
-- overlap_buffer_max fires: the caller records the fire as skipped.
create or replace function _hold_fire(
    p_kind text, p_target uuid, p_user_id text, p_policy text, p_blocked_by text,
    p_trigger text, p_detail text, p_context text, p_fire_at timestamptz, p_now timestamptz,
    p_slot timestamptz default null
)
returns uuid
language plpgsql
as $$
declare
    v_releasing constant uuid := (_transaction_state()).held_fire;
    v_id uuid;
    v_replaced integer := 0;
begin
    if v_releasing is not null then
        -- A fire held while this one was being released could not replace
        -- it (the row was locked, and waiting for it could deadlock with
        -- the release) and is newer: buffer_one keeps the newest, so this
        -- one folds into it, its count with it.
        if p_policy = 'buffer_one' then
            with newer as (
                select n.id from held_fires n
                where (n.routine_id = p_target or n.loop_id = p_target)
                  and n.reason = 'buffered' and n.id <> v_releasing
                order by n.seq desc
                limit 1
                for update skip locked
            ),
            folded as (
                delete from held_fires h
                where h.id = v_releasing and exists (select from newer)
                returning h.collapsed
            )
            update held_fires n
            set collapsed = n.collapsed + f.collapsed
            from folded f, newer w
            where n.id = w.id
            returning n.id into v_id;
            if v_id is not null then
                return v_id;
            end if;
        end if;
        update held_fires h
        set blocked_by = p_blocked_by, fire_at = p_fire_at
        where h.id = v_releasing
        returning h.id into v_id;
        if v_id is not null then
            return v_id;
        end if;
    end if;
    if p_policy = 'buffer_all'
       and (select count(*) from held_fires h
            where (h.routine_id = p_target or h.loop_id = p_target) and h.reason = 'buffered')
           >= _setting_int('overlap_buffer_max') then
        return null;
    end if;
    if p_policy = 'buffer_one' then
        with replaced as (
            delete from held_fires h
            where h.id in (select o.id from held_fires o
                           where (o.routine_id = p_target or o.loop_id = p_target)
                             and o.reason = 'buffered'
                           for update skip locked)
            returning h.collapsed
        )
        select coalesce(sum(r.collapsed), 0) into v_replaced from replaced r;
    end if;
    insert into held_fires (routine_id, loop_id, user_id, reason, blocked_by, policy,
                            trigger_type, trigger_detail, context, slot_at, first_at, last_at,
                            fire_at, collapsed, created_at)
    values (case when p_kind = 'routine' then p_target end,
            case when p_kind = 'loop' then p_target end,
            p_user_id, 'buffered', p_blocked_by, p_policy, p_trigger, left(p_detail, 200),
            p_context, p_slot, p_now, p_now, p_fire_at, 1 + v_replaced, p_now)
    returning id into v_id;
    return v_id;
end;
$$;

comment on function _hold_fire(text, uuid, text, text, text, text, text, text, timestamptz,
                               timestamptz, timestamptz) is
    'Hold a fire an overlap rule refused under buffer_one / buffer_all (the newest replacing the '
    'rest / in order up to overlap_buffer_max); returns the held_fires id, NULL when full.';

-- Fold a fire into its target's newest buffered fire that no one is
-- releasing (SKIP LOCKED): the row takes the fire's trigger, detail and
-- context and counts it. For a fire that must wait when buffer_all already
-- holds overlap_buffer_max fires (a loop's min_interval_secs): it waits with
-- the newest instead of being lost. Returns the row's id, or NULL when there
-- is none to fold into.
create or replace function _fold_into_newest(
    p_target uuid, p_trigger text, p_detail text, p_context text
)
returns uuid
language sql
as $$
    update held_fires h
    set trigger_type = p_trigger, trigger_detail = left(p_detail, 200), context = p_context,
        collapsed = h.collapsed + 1
    where h.id = (select o.id from held_fires o
                  where (o.routine_id = p_target or o.loop_id = p_target)
                    and o.reason = 'buffered'
                  order by o.seq desc
                  limit 1
                  for update skip locked)
    returning h.id;
$$;

comment on function _fold_into_newest(uuid, text, text, text) is
    'Fold a fire into its target''s newest buffered fire (SKIP LOCKED): its trigger, detail and '
    'context, collapsed + 1. Returns the held_fires id, NULL when none.';

-- Collapse an event or webhook fire into its target's open debounce window,
-- or open one: the row takes the fire's detail and context, counts it, and
-- fires debounce_secs after it but no later than debounce_max_secs after the
-- window's first fire. A window being released right now is left alone (a
-- new one opens). Returns the held row's id.
create or replace function _debounce_fire(
    p_kind text, p_target uuid, p_user_id text, p_policy text, p_secs integer,
    p_max_secs integer, p_trigger text, p_detail text, p_context text, p_now timestamptz
)
returns uuid
language plpgsql
as $$
declare
    v_id uuid;
begin
    update held_fires h
    set trigger_type = p_trigger, trigger_detail = left(p_detail, 200), context = p_context,
        last_at = greatest(h.last_at, p_now), collapsed = h.collapsed + 1,
        fire_at = least(greatest(h.last_at, p_now) + make_interval(secs => p_secs),
                        h.first_at + make_interval(secs => coalesce(p_max_secs, 2147483647)))
    where h.id = (select o.id from held_fires o
                  where (o.routine_id = p_target or o.loop_id = p_target)
                    and o.reason = 'debounced' and o.blocked_by is null
                  order by o.seq desc
                  limit 1
                  for update skip locked)
    returning h.id into v_id;
    if v_id is null then
        insert into held_fires (routine_id, loop_id, user_id, reason, policy, trigger_type,
                                trigger_detail, context, first_at, last_at, fire_at, created_at)
        values (case when p_kind = 'routine' then p_target end,
                case when p_kind = 'loop' then p_target end,
                p_user_id, 'debounced', p_policy, p_trigger, left(p_detail, 200), p_context,
                p_now, p_now,
                p_now + make_interval(secs => least(p_secs, coalesce(p_max_secs, p_secs))),
                p_now)
        returning id into v_id;
    end if;
    return v_id;
end;
$$;

comment on function _debounce_fire(text, uuid, text, text, integer, integer, text, text, text,
                                   timestamptz) is
    'Collapse an event or webhook fire into its target''s debounce window (or open one): last '
    'detail and context, collapsed + 1, fire_at = least(last + debounce_secs, first + '
    'debounce_max_secs). Returns the held_fires id.';

-- Make room for a fire of cancel_other routines: cancel the oldest running
-- runs of each enabled one that is at its max_concurrent, as many as its
-- new run needs, through the one end-a-job path (_end_jobs), whose job
-- NOTIFY makes the listener running the agent stop it. A job another
-- statement holds (a listener finishing it) is skipped, never waited for:
-- that run ends by itself, and the fire is judged as usual. Returns the
-- routines whose runs it cancelled (their cooldown does not count that end).
--
-- Locks: as any statement that ends jobs (the job rows, SKIP LOCKED here,
-- then the routines of their runs; 41_fire_admission.sql, head): called
-- before the fire is admitted.
create or replace function _cancel_overlapping_runs(p_routine_ids uuid[], p_now timestamptz)
returns uuid[]
language plpgsql
-- Every fire calls it, and almost none has a cancel_other routine: the one
-- generic plan of each statement, never planned again per fire.
set plan_cache_mode = force_generic_plan
as $$
declare
    v_jobs uuid[];
    v_routines uuid[];
begin
    -- Each routine probed by key: most fires stop here.
    if not exists (select from unnest(p_routine_ids) as u(id)
                   cross join lateral (select from routines r
                                       where r.id = u.id and r.overlap_policy = 'cancel_other'
                                       offset 0) r) then
        return '{}';
    end if;
    select array_agg(x.job_id order by x.job_id), array_agg(distinct x.routine_id)
    into v_jobs, v_routines
    from unnest(p_routine_ids) as u(id)
    -- Each routine probed by key (OFFSET 0), only cancel_other ones go on.
    cross join lateral (
        select r.id, r.max_concurrent from routines r
        where r.id = u.id and r.overlap_policy = 'cancel_other' and r.enabled
        offset 0
    ) r
    cross join lateral (
        select rr.routine_id, rr.job_id,
               count(*) over () as running,
               row_number() over (order by rr.started_at, rr.id) as oldest
        from routine_runs rr
        where rr.routine_id = r.id and rr.status = 'running'
    ) x
    where x.oldest <= x.running - r.max_concurrent + 1;
    if v_jobs is null then
        return '{}';
    end if;
    perform _end_jobs(array(select j.id from job j
                            where j.id = any (v_jobs)
                              and j.state in ('pending', 'claimed', 'running', 'blocked')
                            order by j.id
                            for update skip locked),
                      'cancel', 'superseded by a newer fire (overlap_policy cancel_other)', p_now);
    return v_routines;
end;
$$;

comment on function _cancel_overlapping_runs(uuid[], timestamptz) is
    'For cancel_other routines at their max_concurrent: cancel the oldest running runs'' jobs '
    '(SKIP LOCKED, _end_jobs) to make room for a new fire; returns the routines it cancelled for.';

-- Cancel a loop's live iteration for a cancel_other fire of that loop,
-- without waiting: its row is locked SKIP LOCKED (a statement ending it
-- holds it and may be waiting for the loop, which the fire holds), then it
-- ends as a cancelled run does (_end_topology_run: nodes cancelled, jobs
-- cancelled SKIP LOCKED, agents stopped by their listeners). The loop's
-- outcome trigger neither stops nor chains for it: the fire starts the next
-- iteration. Returns whether the live iteration ended.
--
-- Locks: the caller holds the loop; the iteration row, SKIP LOCKED.
create or replace function _supersede_iteration(p_loop_id uuid, p_now timestamptz)
returns boolean
language plpgsql
as $$
declare
    v_run uuid;
begin
    select r.id into v_run
    from topology_runs r
    where r.loop_id = p_loop_id and r.status in ('pending', 'running', 'awaiting_approval')
    limit 1
    for no key update skip locked;
    if v_run is null then
        return false;
    end if;
    perform _end_topology_run(v_run, 'cancelled',
                              'superseded by a newer fire (overlap_policy cancel_other)', p_now);
    return true;
end;
$$;

comment on function _supersede_iteration(uuid, timestamptz) is
    'Cancel a loop''s live iteration for a cancel_other fire (row SKIP LOCKED; nodes and jobs '
    'cancelled, agents stopped); true when it ended.';

-- Start the held fires that are due at p_now: each target's first held fire
-- (in seq order) whose fire_at has come, or that waits for a run's end
-- (fire_at NULL) when its target is named in p_targets: the routines and
-- loops whose run ended, which the ceaseless_schedule NOTIFY of that end
-- names. A NULL p_targets tries every target's first held fire (a listener
-- that may have missed NOTIFYs: at its start and after a reconnect). Each
-- goes through _fire_schedules as the fire it was (trigger, last detail with
-- the count collapsed, context; a manual one still ignores a cooldown). One
-- that starts, or is refused for a reason no policy holds (recorded as
-- skipped), leaves held_fires; one refused again stays, with its new
-- blocker. Returns one row per fire tried: the held fire, its kind and
-- target, the run, and the status (running, pending, skipped, buffered,
-- debounced) with the skip reason.
--
-- Cost: with p_targets, the timed fires due (held_fires_fire_at_idx) and the
-- first held fire of each target named (by key), so a call after one run's
-- end reads a few index pages however many fires wait elsewhere
-- (tests/sql/test_held_fires.py, the plan test).
--
-- Locks: one caller at a time (an advisory lock taken without waiting;
-- another caller returns nothing), each held row SKIP LOCKED, then what a
-- fire of its kind takes.
create or replace function fire_held(p_now timestamptz default now(),
                                     p_limit integer default 1000,
                                     p_targets uuid[] default null)
returns table (held_id uuid, kind text, target_id uuid, run_id uuid, status text,
               skip_reason text)
language plpgsql
as $$
#variable_conflict use_column
declare
    v_held held_fires;
    v_kind text;
    v_fired record;
begin
    if not pg_try_advisory_xact_lock(hashtext('ceaseless'), hashtext('fire held')) then
        return;
    end if;
    for v_held in
        -- The targets to look at: every one (a sweep), or those named and
        -- those with a timed fire due, found through the fire_at index.
        with candidate as (
            select coalesce(h.routine_id, h.loop_id) as id
            from held_fires h
            where p_targets is null
            union
            select t.id from unnest(p_targets) t(id)
            union
            select coalesce(h.routine_id, h.loop_id)
            from held_fires h
            where h.fire_at <= p_now
        )
        -- Each target's first held fire, by key (a target is a routine or a
        -- loop, never both), when it may be tried now.
        select f.*
        from candidate c
        cross join lateral (
            (select h.* from held_fires h where h.routine_id = c.id order by h.seq limit 1)
            union all
            (select h.* from held_fires h where h.loop_id = c.id order by h.seq limit 1)
            limit 1
        ) f
        where (f.fire_at is null and f.blocked_by is not null) or f.fire_at <= p_now
        order by f.fire_at nulls last, f.seq
        limit p_limit
    loop
        -- Taken by a fire that collapses into it right now: tried next call.
        perform from held_fires h where h.id = v_held.id for update skip locked;
        continue when not found;
        v_kind := case when v_held.routine_id is not null then 'routine' else 'loop' end;
        perform _remember_held(v_held.id);
        select f.run_id, f.status, f.skip_reason into v_fired
        from _fire_schedules(v_kind, array[coalesce(v_held.routine_id, v_held.loop_id)],
                             v_held.trigger_type, p_now,
                             array[case when v_held.collapsed > 1
                                        then format('%s fires collapsed: ', v_held.collapsed)
                                        else '' end
                                   || coalesce(v_held.trigger_detail, v_held.trigger_type)],
                             array[v_held.context], null,
                             v_held.trigger_type = 'manual', array[v_held.slot_at]) f;
        perform _remember_held(null);
        if v_fired.status is null or v_fired.status not in ('buffered', 'debounced') then
            delete from held_fires h where h.id = v_held.id;
        end if;
        held_id := v_held.id;
        kind := v_kind;
        target_id := coalesce(v_held.routine_id, v_held.loop_id);
        run_id := v_fired.run_id;
        status := v_fired.status;
        skip_reason := v_fired.skip_reason;
        return next;
    end loop;
end;
$$;

comment on function fire_held(timestamptz, integer, uuid[]) is
    'Start the due held fires (each target''s first, in order: timed ones due, and those waiting '
    'for a run''s end of the targets named, or of all when p_targets is NULL) through the one '
    'firing path; one refused again stays held. One caller at a time. Listeners call it when a '
    'held fire is due or a run ends.';

-- Wake the scheduler when routine runs end whose routines have held fires:
-- a buffered fire refused by max_concurrent (or a cooldown that starts with
-- that end) is judged again at once. Statement-level, one NOTIFY per routine.
create or replace function _tg_routine_runs_held_wake()
returns trigger
language plpgsql
as $$
begin
    -- Most statements find no held fire at all: one probe, and done.
    if not exists (select from held_fires h where h.routine_id is not null) then
        return null;
    end if;
    -- A closed run is one that ended (a run closes once, 44_routine_outcomes.sql);
    -- the few routines of a batch are each probed by key.
    perform _announce('ceaseless_schedule',
                      jsonb_build_object('table', 'held_fires', 'id', e.routine_id)::text)
    from (select distinct n.routine_id
          from new_rows n
          where n.status in ('ok', 'attention', 'failed')) e
    where exists (select from held_fires h where h.routine_id = e.routine_id);
    return null;
end;
$$;

comment on function _tg_routine_runs_held_wake() is
    'After routine runs end: NOTIFY ceaseless_schedule {table: held_fires, id: routine} for each '
    'of their routines that has held fires, so a listener calls fire_held.';

select _statement_trigger('routine_runs_held_wake', 'update', 'routine_runs');

-- Wake the scheduler when a loop's iteration ends and the loop has held
-- fires: the one live iteration was their blocker.
create or replace function _tg_topology_runs_held_wake()
returns trigger
language plpgsql
as $$
begin
    if exists (select from held_fires h where h.loop_id = new.loop_id) then
        perform _announce('ceaseless_schedule',
                          jsonb_build_object('table', 'held_fires', 'id', new.loop_id)::text);
    end if;
    return null;
end;
$$;

comment on function _tg_topology_runs_held_wake() is
    'After a loop iteration ends: NOTIFY ceaseless_schedule {table: held_fires, id: loop} when '
    'the loop has held fires, so a listener calls fire_held.';

create or replace trigger topology_runs_held_wake
    after update of status on topology_runs
    for each row
    when (new.loop_id is not null
          and old.status in ('pending', 'running', 'awaiting_approval')
          and new.status not in ('pending', 'running', 'awaiting_approval'))
    execute function _tg_topology_runs_held_wake();

-- Wake the scheduler when fires are held anew: a new row's fire_at may be
-- earlier than what the scheduler sleeps until. Statement-level, one NOTIFY
-- per target (PostgreSQL folds repeats within a transaction).
create or replace function _tg_held_fires_inserted()
returns trigger
language plpgsql
as $$
begin
    perform _announce('ceaseless_schedule',
                      jsonb_build_object('table', 'held_fires',
                                         'id', coalesce(n.routine_id, n.loop_id))::text)
    from (select distinct n.routine_id, n.loop_id from new_rows n) n;
    return null;
end;
$$;

comment on function _tg_held_fires_inserted() is
    'After fires are held anew: NOTIFY ceaseless_schedule {table: held_fires, id: routine or '
    'loop}, so a listener''s scheduler re-reads the earliest fire_at.';

select _statement_trigger('held_fires_inserted', 'insert', 'held_fires');
