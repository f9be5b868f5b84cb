-- Schedules: the one trigger layer of routines and loops.
--
-- A routine and a loop are both things a trigger fires: a cron slot, a signed
-- webhook request, a person. This file is that layer, once for both kinds:
-- the schedules view, the cron scheduler's calls, next-fire bookkeeping,
-- disabling what the engine cannot run, manual firing and backfill. Every
-- fire it makes goes through _fire_schedules, which dispatches at the very
-- end to "start a routine run" (_fire_routines, 42_routine_firing.sql) or
-- "start a loop iteration" (_fire_loop, 56_loop_firing.sql); what only one
-- kind has (a routine's cooldown, dedup and global cap, a loop's one live
-- iteration and on_completion chain) stays in its kind's file.
--
-- Called by: listeners (listener/daemon/scheduler.py through
-- listener/queries/schedule.py: unscheduled_schedules, set_next_fires,
-- due_schedules, fire_cron, disable_schedule, next_schedule_fire), users and
-- operators (run_routine, run_loop, backfill_routine, backfill_loop, the
-- schedules view), the webhook path
-- (_receive_webhook, 36_webhooks.sql), and the validation triggers of
-- routines and loops (_schedule_changed, _ask_for_next_fire).
-- Guarantees:
-- - next_fire_at is the listener's to compute (croniter): a row stores one
--   only while it is enabled with a schedule, it is cleared whenever the
--   answer may have changed (schedule, timezone, re-enabled), and then
--   NOTIFY ceaseless_schedule {"table": "routines" | "loops", "id"} asks for
--   a new one; set_next_fires stores an answer only where the row still waits
--   for one and the schedule and timezone it was computed from are still the
--   row's: every listener answers every NOTIFY, and a slower one's answer,
--   computed before a faster one stored the slot and fired it, would bring
--   that slot back and fire it twice;
-- - due_schedules locks what it returns (FOR NO KEY UPDATE SKIP LOCKED) until
--   the caller's transaction ends, so the caller fires them (fire_cron) in
--   that transaction and two listeners never fire one slot. A batch is of one
--   kind, routines first: a routine batch is admitted after its routines (the
--   lock order of 41_fire_admission.sql), a loop batch takes no fire lock
--   (56_loop_firing.sql), so no batch holds a loop while it waits for fire
--   admission;
-- - fire_cron fires each row once however many slots it missed, leaves out a
--   row no longer enabled and due, defers a routine refused for its cooldown
--   to the cooldown's end (so the slot it missed fires once the cooldown
--   allows, not a whole period later) and moves every other row to the slot
--   the listener computed;
-- - every fire, refused ones too, leaves a run of its kind (routine_runs or
--   topology_runs) with its trigger and, when refused, the reason; a cron or
--   backfill fire also its slot (slot_at), and a backfill never fires a slot
--   that a run with that slot_at already started.

-- Every routine and loop as a schedule: what fires it on a clock (schedule and
-- timezone, NULL for neither), when next, and whether it may fire at all.
-- security_invoker, so a user role sees its own rows (row-level security of
-- routines and loops); no credential is shown.
create or replace view schedules with (security_invoker = true) as
select 'routine'::text as kind,
       r.id,
       r.user_id as owner,
       r.name,
       r.enabled,
       case when r.trigger_type = 'cron' then r.trigger_config ->> 'schedule' end as schedule,
       case when r.trigger_type = 'cron' then r.trigger_config ->> 'timezone' end as timezone,
       r.next_fire_at,
       r.last_error
from routines r
union all
select 'loop'::text,
       l.id,
       l.user_id,
       l.title,
       l.enabled,
       l.triggers ->> 'cron',
       case when l.triggers ? 'cron' then l.triggers ->> 'timezone' end,
       l.next_fire_at,
       l.last_error
from loops l;

comment on view schedules is
    'Every routine (kind routine) and loop (kind loop) as a schedule: owner, name or title, '
    'enabled, cron schedule and timezone (NULL when it has none), next_fire_at, last_error.';

-- Whether a row's stored next slot may no longer be right: it is enabled with
-- a schedule, and the schedule, its timezone or its enabling changed. The
-- validation triggers then clear next_fire_at (and the error of a schedule
-- the engine disabled) for a listener to compute again.
create or replace function _schedule_changed(
    p_schedule text, p_timezone text, p_enabled boolean,
    p_old_schedule text, p_old_timezone text, p_old_enabled boolean
)
returns boolean
language sql immutable
as $$
    select p_enabled and p_schedule is not null
           and (p_schedule is distinct from p_old_schedule
                or p_timezone is distinct from p_old_timezone
                or not p_old_enabled);
$$;

comment on function _schedule_changed(text, text, boolean, text, text, boolean) is
    'True when an enabled row with a schedule changed its schedule, timezone or enabling: its '
    'next_fire_at must be computed again.';

-- Ask the listeners for a row's next slot when it is enabled with a schedule
-- and has none (created, changed or re-enabled): NOTIFY ceaseless_schedule,
-- naming the table as listener/notify_schemas.json says.
--
-- PL/pgSQL: the row triggers of routines and loops call this on every update
-- (a fire's next_fire_at, a finish batch's counters), nearly always to do
-- nothing; a SQL function with a SET clause is planned again on every call
-- (8.5 µs a call, 7 % of a cron fire), an IF on the arguments is not.
create or replace function _ask_for_next_fire(
    p_table text, p_id uuid, p_schedule text, p_enabled boolean, p_next_fire_at timestamptz
)
returns void
language plpgsql
as $$
begin
    if p_enabled and p_schedule is not null and p_next_fire_at is null then
        perform _announce('ceaseless_schedule',
                          jsonb_build_object('table', p_table, 'id', p_id)::text);
    end if;
end;
$$;

comment on function _ask_for_next_fire(text, uuid, text, boolean, timestamptz) is
    'NOTIFY ceaseless_schedule {table, id} for an enabled row with a schedule and no next_fire_at.';

-- Enabled schedules waiting for the listener to compute their next_fire_at
-- (created, changed or re-enabled since it last looked); p_ids limits it to
-- the rows a ceaseless_schedule NOTIFY named, NULL means all (startup,
-- catch-up). An id names a row of either kind.
create or replace function unscheduled_schedules(p_ids uuid[] default null)
returns table (kind text, id uuid, schedule text, timezone text)
language sql stable
as $$
    -- Two branches rather than `p_ids is null or id = any (p_ids)`, which no
    -- index serves: named rows are probed by key, and the branch not asked
    -- for is skipped before it reads anything.
    select s.kind, s.id, s.schedule, s.timezone
    from schedules s
    where p_ids is null
      and s.enabled and s.schedule is not null and s.next_fire_at is null
    union all
    select s.kind, s.id, s.schedule, s.timezone
    from schedules s
    where s.id = any (p_ids)
      and s.enabled and s.schedule is not null and s.next_fire_at is null;
$$;

comment on function unscheduled_schedules(uuid[]) is
    'Enabled routines and loops with a schedule and no next_fire_at (all of them, or those among '
    'p_ids): what the listener computes next slots for.';

-- The listener's answer to ceaseless_schedule: store freshly computed
-- next_fire_at values, one entry per row (kind, id, and the schedule and
-- timezone the answer was computed from), but only where those are still the
-- row's (an edit in between wins). Returns how many were stored.
--
-- The test is on each table's own columns, not on the view: an UPDATE that
-- waits for a concurrent edit re-checks its conditions on the edited row.
create or replace function set_next_fires(
    p_kinds text[], p_ids uuid[], p_schedules text[], p_timezones text[],
    p_next_fire_ats timestamptz[]
)
returns integer
language sql
as $$
    with computed as (
        select * from unnest(p_kinds, p_ids, p_schedules, p_timezones, p_next_fire_ats)
            as c(kind, id, schedule, timezone, next_fire_at)
    ),
    routines_stored as (
        update routines r
        set next_fire_at = c.next_fire_at
        from computed c
        where c.kind = 'routine' and r.id = c.id and r.next_fire_at is null
          and r.enabled and r.trigger_type = 'cron'
          and r.trigger_config ->> 'schedule' = c.schedule
          and r.trigger_config ->> 'timezone' = c.timezone
        returning r.id
    ),
    loops_stored as (
        update loops l
        set next_fire_at = c.next_fire_at
        from computed c
        where c.kind = 'loop' and l.id = c.id and l.next_fire_at is null
          and l.enabled
          and l.triggers ->> 'cron' = c.schedule
          and l.triggers ->> 'timezone' = c.timezone
        returning l.id
    )
    select ((select count(*) from routines_stored) + (select count(*) from loops_stored))::integer;
$$;

comment on function set_next_fires(text[], uuid[], text[], text[], timestamptz[]) is
    'Store listener-computed next_fire_at values where the routine or loop still waits for one '
    'and still has that schedule and timezone; returns how many were stored.';

-- The schedules due at p_now, oldest slot first, locked for the caller's
-- transaction: up to p_limit routines, or when none is due, up to p_limit
-- loops (one kind per batch; see the header). SKIP LOCKED: a row another
-- listener is firing, or a loop whose iteration is ending right now, is not
-- waited for; its slot stays due and the next pass takes it.
--
-- Locks: the returned rows, FOR NO KEY UPDATE, until the caller commits. Not
-- FOR UPDATE: that would block the KEY SHARE a manual run's foreign key takes
-- on the same routine while it holds the fire lock, which a routine batch is
-- about to wait for (a deadlock). FOR NO KEY UPDATE is also the lock
-- _fire_loop takes, so firing a loop batch waits for nothing.
create or replace function due_schedules(p_now timestamptz, p_limit integer)
returns table (kind text, id uuid, schedule text, timezone text, next_fire_at timestamptz)
language plpgsql volatile
as $$
begin
    -- idx_routines_next_fire and loops_next_fire_idx: partial on enabled rows
    -- with a slot, so each scan reads only what is due, however many rows
    -- exist. The schedule tests match fire_cron's, so every row returned is
    -- fired (or disabled by the caller) and a caller that repeats until
    -- nothing is returned ends.
    return query
    select 'routine'::text, r.id, r.trigger_config ->> 'schedule', r.trigger_config ->> 'timezone',
           r.next_fire_at
    from routines r
    where r.enabled and r.next_fire_at is not null and r.next_fire_at <= p_now
      and r.trigger_type = 'cron'
    order by r.next_fire_at
    limit p_limit
    for no key update skip locked;
    if found then
        return;
    end if;
    return query
    select 'loop'::text, l.id, l.triggers ->> 'cron', l.triggers ->> 'timezone', l.next_fire_at
    from loops l
    where l.enabled and l.next_fire_at is not null and l.next_fire_at <= p_now
      and l.triggers ? 'cron'
    order by l.next_fire_at
    limit p_limit
    for no key update skip locked;
end;
$$;

comment on function due_schedules(timestamptz, integer) is
    'Lock and return up to p_limit routines due at p_now, or when none is, up to p_limit loops '
    '(FOR NO KEY UPDATE SKIP LOCKED); fire them with fire_cron in the same transaction.';

-- Fire schedules of one kind: the end of every path of this layer. p_details[i]
-- is what fired row i (the schedule, the webhook path, 'manual'), at most 200
-- characters kept; p_contexts[i] what the run reacts to (a routine's context
-- and dedup key, a loop iteration's webhook body); p_missed[i] the cron slots
-- collapsed into this fire (a routine records them as a skipped run of their
-- own, a loop in its run's trigger_detail); p_slots[i] the cron slot the
-- fire stands for (cron and backfill: the run's slot_at); p_manual skips a
-- routine's cooldown. Returns one row per row fired, in input order: its run (a
-- routine_runs or topology_runs id), and the status with the skip reason. An
-- id that names no row of the kind returns no row.
--
-- Locks: those of _fire_routines (fire admission) or _fire_loop (each loop,
-- in the order given).
create or replace function _fire_schedules(
    p_kind text,
    p_ids uuid[],
    p_trigger text,
    p_now timestamptz,
    p_details text[] default null,
    p_contexts text[] default null,
    p_missed integer[] default null,
    p_manual boolean default false,
    p_slots timestamptz[] default null
)
returns table (ord bigint, id uuid, run_id uuid, status text, skip_reason text)
language plpgsql
as $$
#variable_conflict use_column
declare
    v_run uuid;
    v_missed integer;
begin
    if p_kind = 'routine' then
        return query
        select f.ord, f.routine_id, f.run_id, f.status, f.skip_reason
        from _fire_routines(p_ids, p_trigger, p_now, p_details, p_contexts, p_missed, p_manual,
                            null, p_slots) f;
    elsif p_kind = 'loop' then
        -- One at a time: a loop has at most one live iteration, judged under
        -- its own lock.
        for i in 1 .. coalesce(cardinality(p_ids), 0) loop
            v_missed := greatest(coalesce(p_missed[i], 0), 0);
            v_run := _fire_loop(p_ids[i], p_trigger,
                                p_details[i] || case when v_missed > 0
                                                     then format(' (%s missed slots)', v_missed)
                                                     else '' end,
                                p_contexts[i], p_now, p_slots[i]);
            -- A held fire (33_held_fires.sql) answers with its held_fires id.
            return query
            select i::bigint, p_ids[i], r.id, r.status, r.skip_reason
            from topology_runs r
            where r.id = v_run
            union all
            select i::bigint, p_ids[i], h.id, h.reason,
                   case when h.reason = 'buffered' then h.blocked_by end
            from held_fires h
            where h.id = v_run;
        end loop;
    else
        perform _invalid_value('kind', 'must be routine or loop', to_jsonb(p_kind));
    end if;
end;
$$;

comment on function _fire_schedules(text, uuid[], text, timestamptz, text[], text[], integer[],
                                    boolean, timestamptz[]) is
    'Fire routines (_fire_routines) or loops (_fire_loop): the end of every cron, webhook and '
    'manual fire; one row per row fired with its run, status and skip reason.';

-- Fire the due schedules a listener has locked and scheduled: the listener
-- selects them with due_schedules, computes each one's next slot and
-- missed-slot count with croniter, and calls this in the same transaction, so
-- no two listeners fire one slot. Arrays give one entry per schedule.
--
-- A row changed or disabled since the listener read it is left out: its new
-- schedule gets a fresh next_fire_at through ceaseless_schedule instead. The
-- rest fire through _fire_schedules, routines before loops; a routine fire
-- refused for its cooldown is deferred to the cooldown's end, every other row
-- moves to its next slot, refused or not: the slot is spent.
--
-- Raises: CE422 when the arrays differ in length.
create or replace function fire_cron(
    p_kinds text[],
    p_ids uuid[],
    p_next_fire_ats timestamptz[],
    p_missed integer[],
    p_now timestamptz default now()
)
returns table (kind text, id uuid, run_id uuid, status text, skip_reason text,
               next_fire_at timestamptz)
language plpgsql
as $$
#variable_conflict use_column
declare
    v_kind text;
    v_ids uuid[];
    v_next_fire_ats timestamptz[];
    v_missed integer[];
    v_schedules text[];
    -- The slot each row was due at: its run's slot_at, which backfill reads
    -- as "this slot fired".
    v_slots timestamptz[];
    v_fired record;
begin
    if cardinality(p_ids) is distinct from cardinality(p_kinds)
       or cardinality(p_ids) is distinct from cardinality(p_next_fire_ats)
       or cardinality(p_ids) is distinct from cardinality(p_missed) then
        raise exception 'fire_cron: the four arrays must have one entry per schedule'
            using errcode = 'CE422';
    end if;
    foreach v_kind in array array['routine', 'loop'] loop
        select array_agg(s.id order by i.ord), array_agg(i.next_at order by i.ord),
               array_agg(i.missed order by i.ord), array_agg(s.schedule order by i.ord),
               array_agg(s.next_fire_at order by i.ord)
        into v_ids, v_next_fire_ats, v_missed, v_schedules, v_slots
        from unnest(p_kinds, p_ids, p_next_fire_ats, p_missed)
            with ordinality as i(kind, id, next_at, missed, ord)
        join schedules s on s.kind = i.kind and s.id = i.id
        where i.kind = v_kind
          and s.enabled and s.schedule is not null
          and s.next_fire_at is not null and s.next_fire_at <= p_now;
        if v_ids is null then
            continue;
        end if;

        -- A statement of its own: firing a loop writes its row (last_run_id),
        -- which the move below writes again.
        select array_agg(f.ord order by f.ord) as ords, array_agg(f.id order by f.ord) as ids,
               array_agg(f.run_id order by f.ord) as runs,
               array_agg(f.status order by f.ord) as statuses,
               array_agg(f.skip_reason order by f.ord) as reasons
        into v_fired
        from _fire_schedules(v_kind, v_ids, 'cron', p_now, v_schedules, null, v_missed, false,
                             v_slots) f;

        return query
        with fired as (
            select *
            from unnest(v_fired.ords, v_fired.ids, v_fired.runs, v_fired.statuses,
                        v_fired.reasons) as f(ord, id, run_id, status, skip_reason)
        ),
        routines_moved as (
            update routines r
            -- A buffered fire already waits for the cooldown's end: the
            -- routine moves on to its next slot.
            set next_fire_at = case when f.skip_reason = 'cooldown' and f.status = 'skipped'
                                    then greatest(r.last_run_at
                                                  + make_interval(secs => r.cooldown_secs), p_now)
                                    else v_next_fire_ats[f.ord] end
            from fired f
            where v_kind = 'routine' and r.id = f.id
            returning r.id, r.next_fire_at
        ),
        -- A loop the fire left disabled keeps no slot (loops_validate would
        -- clear it anyway).
        loops_moved as (
            update loops l
            set next_fire_at = v_next_fire_ats[f.ord]
            from fired f
            where v_kind = 'loop' and l.id = f.id and l.enabled
            returning l.id, l.next_fire_at
        )
        select v_kind, f.id, f.run_id, f.status, f.skip_reason, m.next_fire_at
        from fired f
        left join (select * from routines_moved union all select * from loops_moved) m
            on m.id = f.id
        order by f.ord;
    end loop;
end;
$$;

comment on function fire_cron(text[], uuid[], timestamptz[], integer[], timestamptz) is
    'Fire a batch of due routines and loops the caller locked (due_schedules), each once however '
    'many slots it missed; a routine refused for cooldown is deferred to its end, the rest move '
    'to the next slot given. CE422 when the arrays differ in length.';

-- Disable a routine or loop whose stored configuration the listener cannot use
-- (a schedule croniter rejects despite validation), recording why, so it
-- stops failing silently and never blocks the others.
create or replace function disable_schedule(p_kind text, p_id uuid, p_error text)
returns void
language sql
as $$
    update routines set enabled = false, last_error = left(p_error, 2000)
    where p_kind = 'routine' and id = p_id;
    update loops set enabled = false, last_error = left(p_error, 2000)
    where p_kind = 'loop' and id = p_id;
$$;

comment on function disable_schedule(text, uuid, text) is
    'Disable a routine or loop the engine cannot run, recording the error in last_error.';

-- When the earliest scheduled routine or loop, or held fire
-- (33_held_fires.sql), is due, so the scheduler can sleep exactly until then;
-- NULL when nothing is scheduled.
create or replace function next_schedule_fire()
returns timestamptz
language sql stable
as $$
    -- Ordered and limited rather than min(): the two partial indexes on
    -- next_fire_at are merged, and only their first entries are read.
    select least((select s.next_fire_at
                  from schedules s
                  where s.enabled and s.next_fire_at is not null
                  order by s.next_fire_at
                  limit 1),
                 -- held_fires_fire_at_idx: its first entry.
                 (select h.fire_at from held_fires h
                  where h.fire_at is not null
                  order by h.fire_at
                  limit 1));
$$;

comment on function next_schedule_fire() is
    'The earliest next_fire_at among enabled routines and loops, or fire_at among held fires, '
    'or NULL.';

-- Fire a routine or loop by hand: a routine's cooldown is ignored, everything
-- else is judged as for any fire. Returns its run's id (a skipped run when
-- refused), or the held_fires id of a fire its overlap policy keeps.
--
-- Raises: CE404 when no row of the kind has the id, or the caller does not own it.
create or replace function _fire_by_hand(p_kind text, p_id uuid, p_now timestamptz)
returns uuid
language plpgsql
as $$
declare
    v_run_id uuid;
begin
    -- Its callers are security definer, so the guardrails see every owner's
    -- runs; the row must then be the caller's own (or the caller an operator
    -- or a listener), and one that is not is as unknown as one that does not
    -- exist.
    if exists (select from schedules s
               where s.kind = p_kind and s.id = p_id and _acts_for(s.owner)) then
        select f.run_id into v_run_id
        from _fire_schedules(p_kind, array[p_id], 'manual', p_now, array['manual'], null, null,
                             true) f;
    end if;
    if v_run_id is null then
        raise exception 'run_%: no % with id %', p_kind, p_kind, p_id using errcode = 'CE404';
    end if;
    return v_run_id;
end;
$$;

comment on function _fire_by_hand(text, uuid, timestamptz) is
    'Fire a routine or loop by hand for its owner (or an operator, a listener); its run''s id. '
    'CE404 when unknown or someone else''s.';

-- Manual trigger of a routine: ignores cooldown, respects everything else.
create or replace function run_routine(p_routine_id uuid, p_now timestamptz default now())
returns uuid
language sql
security definer
as $$
    select _fire_by_hand('routine', p_routine_id, p_now);
$$;

comment on function run_routine(uuid, timestamptz) is
    'Fire a routine by hand (ignores cooldown, respects max_concurrent and the global cap); '
    'returns the routine_runs id, whose status says whether it runs or was skipped and why, or '
    'the held_fires id of a fire its overlap policy keeps.';

-- Manual trigger of a loop.
create or replace function run_loop(p_loop_id uuid, p_now timestamptz default now())
returns uuid
language sql
as $$
    select _fire_by_hand('loop', p_loop_id, p_now);
$$;

comment on function run_loop(uuid, timestamptz) is
    'Fire a loop by hand; returns the topology_runs id, whose status says whether the iteration '
    'runs (pending) or was skipped and why, or the held_fires id of a fire its overlap policy '
    'keeps. CE404 for an unknown loop or someone else''s.';

-- Fire the cron slots of a routine or loop in [p_from, p_to) that have not
-- fired: the slots the missed-schedule rule collapsed into one fire (a
-- listener that was down fires a row once, however many slots it missed),
-- and slots whose fire was refused. A slot fired by cron or by an earlier
-- backfill (a run with that slot_at that was not skipped) is not fired
-- again, so a backfill can be repeated. The slots are the gate's reading of
-- the schedule (_cron_slots), in its time zone; the first p_max unfired ones
-- fire, oldest first, one fire each through _fire_schedules with trigger
-- backfill, so every guardrail of a cron fire applies (p_now is the fire's
-- time, the slot its record, slot_at). Returns one row per slot: fired (a
-- run started), refused (a skipped run, with its reason), already_fired (the
-- run that fired it) or over_max (not fired: past p_max). Audited once per
-- call (action backfill) with the counts.
--
-- Locks: the row FOR NO KEY UPDATE first (so two backfills, or a backfill
-- and the cron batch, never fire one slot twice), then each fire's own
-- (fire admission for a routine, 41_fire_admission.sql; the loop, already
-- held, for a loop): the order of a cron batch.
-- Raises: CE404 when no row of the kind has the id or the caller does not
-- own it; CE422 for a row without a cron schedule, p_from not before p_to,
-- p_to after p_now, p_max outside 1..backfill_max, or a range of more than
-- 100,000 slots.
create or replace function _backfill(
    p_kind text, p_id uuid, p_from timestamptz, p_to timestamptz, p_max integer,
    p_now timestamptz
)
returns table (slot_at timestamptz, outcome text, run_id uuid, status text, skip_reason text)
language plpgsql
as $$
#variable_conflict use_column
declare
    -- The most slots one range may hold: each is a row of the answer.
    c_range_cap constant integer := 100000;
    v_function constant text := 'backfill_' || p_kind;
    v_cap constant integer := _setting_int('backfill_max');
    v_schedule text;
    v_timezone text;
    v_slots timestamptz[];
    v_slot timestamptz;
    v_run uuid;
    v_status text;
    v_reason text;
    v_outcome text;
    v_fires integer := 0;
    -- The answer, one entry per slot in time order.
    v_out_slots timestamptz[] := '{}';
    v_out_outcomes text[] := '{}';
    v_out_runs uuid[] := '{}';
    v_out_statuses text[] := '{}';
    v_out_reasons text[] := '{}';
begin
    if p_kind = 'routine' then
        perform from routines r where r.id = p_id and _acts_for(r.user_id) for no key update;
    else
        perform from loops l where l.id = p_id and _acts_for(l.user_id) for no key update;
    end if;
    if not found then
        raise exception '%: no % with id %', v_function, p_kind, p_id using errcode = 'CE404';
    end if;
    select s.schedule, s.timezone into v_schedule, v_timezone
    from schedules s where s.kind = p_kind and s.id = p_id;
    if v_schedule is null then
        perform _invalid_value(v_function || '.' || p_kind || '_id',
                               format('must name a %s with a cron schedule: only cron slots can '
                                      'be backfilled', p_kind),
                               to_jsonb(p_id));
    end if;
    if p_from is null or p_to is null or p_from >= p_to then
        perform _invalid_value(v_function || '.p_to',
                               format('must be after p_from (%s)', coalesce(p_from::text, 'NULL')),
                               to_jsonb(p_to));
    end if;
    if p_to > p_now then
        perform _invalid_value(v_function || '.p_to',
                               format('must not be after now (%s): a backfill fires slots that '
                                      'have passed', p_now),
                               to_jsonb(p_to));
    end if;
    if p_max is null or p_max not between 1 and v_cap then
        perform _invalid_value(v_function || '.p_max',
                               format('must be 1 to %s (the setting backfill_max)', v_cap),
                               to_jsonb(p_max));
    end if;

    -- One more than the cap, to tell a range past it; sorted here, as
    -- _cron_slots promises no order.
    select array_agg(s order by s) into v_slots
    from _cron_slots(v_schedule, v_timezone, p_from, p_to, c_range_cap + 1) s;
    if cardinality(v_slots) > c_range_cap then
        perform _invalid_value(v_function || '.p_from',
                               format('the range to p_to (%s) holds more than %s slots of "%s": '
                                      'backfill it in parts', p_to, c_range_cap, v_schedule),
                               to_jsonb(p_from));
    end if;

    foreach v_slot in array coalesce(v_slots, '{}') loop
        v_run := null;
        -- routine_runs_slot_idx / topology_runs_slot_idx: one probe a slot.
        if p_kind = 'routine' then
            select rr.id, rr.status into v_run, v_status
            from routine_runs rr
            where rr.routine_id = p_id and rr.slot_at = v_slot and rr.status <> 'skipped'
            limit 1;
        else
            select tr.id, tr.status into v_run, v_status
            from topology_runs tr
            where tr.loop_id = p_id and tr.slot_at = v_slot and tr.status <> 'skipped'
            limit 1;
        end if;
        -- A slot whose fire waits as a held fire (33_held_fires.sql) is fired
        -- too: it starts when its blocker clears.
        if v_run is null then
            select h.id, h.reason into v_run, v_status
            from held_fires h
            where (h.routine_id = p_id or h.loop_id = p_id) and h.slot_at = v_slot
            limit 1;
        end if;
        if v_run is not null then
            v_outcome := 'already_fired';
            v_reason := null;
        elsif v_fires >= p_max then
            v_outcome := 'over_max';
            v_status := null;
            v_reason := null;
        else
            -- One fire a statement: each sees the runs the ones before it
            -- started, as max_concurrent and a loop's one live iteration need.
            select f.run_id, f.status, f.skip_reason into v_run, v_status, v_reason
            from _fire_schedules(p_kind, array[p_id], 'backfill', p_now,
                                 array[left(format('backfill of slot %s: %s', v_slot,
                                                   v_schedule), 200)],
                                 null, null, false, array[v_slot]) f;
            v_fires := v_fires + 1;
            v_outcome := case when v_status = 'skipped' then 'refused' else 'fired' end;
        end if;
        v_out_slots := v_out_slots || v_slot;
        v_out_outcomes := v_out_outcomes || v_outcome;
        v_out_runs := v_out_runs || v_run;
        v_out_statuses := v_out_statuses || v_status;
        v_out_reasons := v_out_reasons || v_reason;
    end loop;

    insert into audit_log (at, entity, entity_id, action, detail)
    select p_now, p_kind, p_id, 'backfill',
           jsonb_build_object(
               'from', p_from, 'to', p_to, 'max', p_max,
               'slots', count(*),
               'fired', count(*) filter (where o = 'fired'),
               'refused', count(*) filter (where o = 'refused'),
               'already_fired', count(*) filter (where o = 'already_fired'),
               'over_max', count(*) filter (where o = 'over_max'))
    from unnest(v_out_outcomes) o;

    return query
    select * from unnest(v_out_slots, v_out_outcomes, v_out_runs, v_out_statuses, v_out_reasons);
end;
$$;

comment on function _backfill(text, uuid, timestamptz, timestamptz, integer, timestamptz) is
    'Fire a routine''s or loop''s cron slots in [p_from, p_to) that have not fired (the first '
    'p_max, trigger backfill, slot_at the slot), for its owner; one row per slot: fired, refused, '
    'already_fired or over_max. Audited. CE404 unknown or someone else''s; CE422 bad bounds.';

-- Backfill a routine: fire its cron slots in [p_from, p_to) that the
-- missed-schedule rule collapsed (or a guardrail refused), at most p_max.
create or replace function backfill_routine(
    p_routine_id uuid, p_from timestamptz, p_to timestamptz, p_max integer default 100,
    p_now timestamptz default now()
)
returns table (slot_at timestamptz, outcome text, run_id uuid, status text, skip_reason text)
language sql
as $$
    select * from _backfill('routine', p_routine_id, p_from, p_to, p_max, p_now);
$$;

comment on function backfill_routine(uuid, timestamptz, timestamptz, integer, timestamptz) is
    'Fire a routine''s cron slots in [p_from, p_to) that never fired (trigger backfill, each '
    'run''s slot_at its slot), at most p_max (1..setting backfill_max); one row per slot: fired, '
    'refused (with the skip reason), already_fired or over_max. CE404, CE422.';

-- Backfill a loop: the same for its cron slots. A loop has one live
-- iteration, so a second backfilled slot is refused (live_iteration) while
-- the first runs, unless the loop's overlap policy buffers it.
create or replace function backfill_loop(
    p_loop_id uuid, p_from timestamptz, p_to timestamptz, p_max integer default 100,
    p_now timestamptz default now()
)
returns table (slot_at timestamptz, outcome text, run_id uuid, status text, skip_reason text)
language sql
as $$
    select * from _backfill('loop', p_loop_id, p_from, p_to, p_max, p_now);
$$;

comment on function backfill_loop(uuid, timestamptz, timestamptz, integer, timestamptz) is
    'Fire a loop''s cron slots in [p_from, p_to) that never fired (trigger backfill, slot_at its '
    'slot), at most p_max; refused as live_iteration while an iteration is live. One row per '
    'slot: fired, refused, already_fired or over_max. CE404, CE422.';
