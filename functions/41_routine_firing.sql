-- Routines: the one firing path, where the trigger layer's fires of routines
-- end.
--
-- Called by: the events trigger (43_routine_events.sql), retry_job
-- (10_jobs.sql), and the trigger layer (_fire_schedules, 39_schedules.sql) for
-- cron batches, webhooks and run_routine.
-- Guarantees:
-- - every fire of every kind goes through _fire_routines, one set-based
--   statement: the guardrails are written once, and judged in this order —
--   the routine disabled; its agent disabled; cooldown_secs since the last run
--   finished (not for manual runs and retries; 0 means no cooldown at all);
--   max_concurrent running runs; dedup_window_secs on the hash of what fired
--   it; the global cap (setting routine_max_running), filled in the order the
--   fires were asked for;
-- - every fire, and every refused fire, leaves a routine_runs row;
-- - the global cap, max_concurrent and dedup are exact: a fire is admitted
--   (_admit_fires, below) before it reads them — shared while the cap is
--   far, with the fires of one routine serialised when its own guardrails
--   could bind, exclusive near the cap — so no two fires both take the last
--   place;
-- - a transaction's fires are admitted whatever their number (a statement
--   inserting many events fires once per row): the fires past the cap are
--   skipped (global_cap), never refused with an error; 40001 means only that
--   concurrent fires conflict with this transaction's, and a retry clears it;
-- - no deadlock between any two of: event inserts, webhook fires, manual
--   runs, retry_job, cron batches, finish batches, lease expiry, release_jobs
--   and cancel_job. The lock order:
--     * a statement that ends jobs (the queue functions, or a plain UPDATE)
--       locks its job rows, then — in its AFTER trigger, once for the whole
--       statement (_close_routine_runs, 44_routine_outcomes.sql) — the
--       routines of their runs in id order (FOR NO KEY UPDATE), then a shard
--       of the running count; it waits for no job after it holds a routine,
--       and never for fire admission;
--     * a fire is admitted — retry_job after its job row, the cron batch
--       after its routines (SKIP LOCKED, so it never waits for them): the
--       fire lock (shared or exclusive), then a slot without waiting, then
--       per-routine advisory locks in key order — and then waits for
--       nothing: it reads its routines without locking them (its runs'
--       foreign keys take KEY SHARE, which no finish, fire or cron batch
--       blocks), and counts its runs in a shard nobody holds; a second fire
--       in a transaction admitted shared waits for nothing at all (40001
--       instead), except the one such transaction at a time that needs more
--       room than its slot (_admit_exactly), which waits for the other
--       shared holders, none of which waits for it;
--   so an admitted fire is never in a cycle, every wait for routine rows or
--   routine fire locks is in id or key order, and a finishing statement
--   holds its routines only for its end, not all of it.
-- - NOTIFY ceaseless_run when a run starts or is refused (routine_runs
--   triggers, 44_routine_outcomes.sql).

set local search_path = ceaseless, pg_catalog, pg_temp;

-- The instruction that ends every lightweight prompt (spec 5.8).
create or replace function _routine_ok_instruction()
returns text
language sql immutable
set search_path = pg_catalog, ceaseless, pg_temp
as $$
    select 'If nothing needs attention, answer exactly ROUTINE_OK and nothing else. '
           'Otherwise, answer with what needs attention.';
$$;

comment on function _routine_ok_instruction() is
    'The closing instruction of every lightweight routine prompt.';

-- What the job of one routine run looks like, assembled in the order of spec
-- 5.8: the routine's prompt (and what fired it), then the context files —
-- which only the listener can read, so they are named in
-- payload.context_paths and inserted by the listener between `prompt` and
-- payload.prompt_tail — then the previous run's state, then the ROUTINE_OK
-- instruction. One definition for every kind of fire.
--
-- PL/pgSQL, which keeps its plan for the session: a SQL function with a SET
-- clause (every function here has one, for its search_path) is not inlined
-- and is planned afresh in every transaction, half a millisecond of each
-- event's insert (bin/bench event fan-in); this costs a call and a tuplestore
-- per routine fired.
create or replace function _routine_job_spec(p_routine routines, p_context text)
returns table (prompt text, payload jsonb, expects_reply boolean, max_attempts integer,
               max_turns integer)
language plpgsql stable
set search_path = pg_catalog, ceaseless, pg_temp
as $$
begin
    return query
    with fired as (
        select case when p_context is not null and p_context <> ''
                    then E'\n\n## What fired this run\n\n' || p_context else '' end as context
    )
    select case when p_routine.action_type = 'lightweight'
                then (p_routine.action_config ->> 'prompt') || fired.context
                else (p_routine.action_config ->> 'title') || E'\n\n'
                     || (p_routine.action_config ->> 'description') || fired.context
           end,
           case when p_routine.action_type = 'lightweight'
                then jsonb_build_object(
                         'routine_id', p_routine.id, 'action', 'lightweight',
                         'context_paths', p_routine.action_config -> 'context_paths',
                         'max_tokens', p_routine.action_config -> 'max_tokens',
                         'prompt_tail',
                         case when p_routine.state <> '{}'::jsonb
                              then E'\n\n## State from the previous run\n\n' || p_routine.state::text
                              else '' end
                         || E'\n\n' || ceaseless._routine_ok_instruction())
                else jsonb_build_object('routine_id', p_routine.id, 'action', 'full_job')
           end,
           -- A lightweight run's whole product is its reply: an empty one is
           -- a failure, retried at most twice (three attempts).
           p_routine.action_type = 'lightweight',
           case when p_routine.action_type = 'lightweight' then 3 end,
           case when p_routine.action_type = 'full_job'
                then (p_routine.action_config ->> 'max_iterations')::integer end
    from fired;
end;
$$;

comment on function _routine_job_spec(routines, text) is
    'The prompt, payload and limits of a routine run''s job: lightweight (prompt + context + '
    'state + ROUTINE_OK, replies required) or full_job (title + description, max_turns).';

-- This transaction's row of transaction_state (db/0026), or a row of NULLs
-- when it has none: what the engine's functions remember between two calls
-- in one transaction. Never a setting, which any session could SET. A
-- transaction without an id has written nothing, so it has no row either (and
-- reading assigns it none).
create or replace function _transaction_state()
returns transaction_state
language plpgsql stable
set search_path = pg_catalog, ceaseless, pg_temp
as $$
declare
    v_state transaction_state;
begin
    select s.* into v_state
    from transaction_state s
    where s.backend_pid = pg_backend_pid()
      and s.xact = pg_current_xact_id_if_assigned();
    return v_state;
end;
$$;

comment on function _transaction_state() is
    'This transaction''s transaction_state row (what the engine remembers within it), or NULLs.';

-- Remember how this transaction's fires were admitted (_admit_fires): one
-- row per backend, taken over from whichever transaction last wrote it.
create or replace function _remember_fire(p_mode text, p_room bigint)
returns void
language sql
set search_path = pg_catalog, ceaseless, pg_temp
as $$
    insert into transaction_state as s (backend_pid, xact, fire_mode, fire_room)
    values (pg_backend_pid(), pg_current_xact_id(), p_mode, p_room)
    on conflict (backend_pid) do update
    set fire_mode = excluded.fire_mode,
        fire_room = excluded.fire_room,
        loop_fire = case when s.xact = excluded.xact then s.loop_fire end,
        xact = excluded.xact;
$$;

comment on function _remember_fire(text, bigint) is
    'Record in transaction_state how this transaction''s fires were admitted (shared or '
    'exclusive) and the room its shared slots have left.';

-- Forget the transaction_state rows of backends that have exited: a row is
-- one per backend and means nothing once its backend is gone, but pids are
-- many, so rows would pile up over months of connections. A live backend's
-- row is kept whatever transaction it belongs to (it takes it over at its
-- next fire). Returns how many were forgotten.
--
-- Called by: every listener's maintenance tick (listener/maintenance.py).
create or replace function forget_ended_backends()
returns integer
language plpgsql
set search_path = pg_catalog, ceaseless, pg_temp
as $$
declare
    v_count integer;
begin
    delete from transaction_state s
    where not exists (select from pg_stat_activity a where a.pid = s.backend_pid);
    get diagnostics v_count = row_count;
    return v_count;
end;
$$;

comment on function forget_ended_backends() is
    'Delete the transaction_state rows of backends that no longer exist; returns how many. '
    'Maintenance, every listener.';

-- Fire admission: what every fire takes before it reads its guardrails, so
-- that concurrent fires see each other's runs (max_concurrent, dedup, the
-- global cap) without locking any row. Finishes never take any of it, so a
-- fire never waits for one to commit.
--
-- Two ways in, chosen per transaction at its first fire:
-- - shared, while the cap is far: the fire lock in shared mode, one of 16
--   slot locks (taken without waiting), and an advisory lock per routine
--   whose own guardrails could bind (dedup, or max_concurrent within reach),
--   in key order. A slot stands for cap / 32 runs: with every slot in use
--   the runs in flight are at most half the cap, so a fire that sees the
--   running count at or below the other half needs nobody else's count.
--   Fires of different routines then run side by side.
-- - exclusive: the fire lock alone, in exclusive mode, which waits for every
--   shared holder to commit and keeps new ones out; the count it then reads
--   is exact. Taken when the cap is near, all slots are busy, the fire is
--   larger than a slot, or the transaction is not read committed.
-- The locks are the transaction's until it ends. A transaction that fired
-- shared and fires again within its slot's room takes the routine locks it
-- needs without waiting (taking them in order could deadlock with another
-- such transaction) and fails with 40001 (retry) when another fire holds
-- one. One that needs more room than its slot has (a statement of many
-- events, one fire per row) is judged exactly from then on (_admit_exactly),
-- so a statement's fires are admitted whatever its size, and the fires past
-- the cap are skipped (global_cap) as in exclusive mode. How it was admitted,
-- and the room its slot has left, is in transaction_state, which only the
-- engine writes: kept in a setting, any session could pass a first fire off
-- as a later one with room to spare, and fire past the cap.
--
-- Returns the running count to judge against (in shared mode, a bound that
-- includes every fire in flight) and the free places of the cap this fire
-- may take.
create or replace function _admit_fires(
    p_routine_ids uuid[],
    out o_running bigint,
    out o_free bigint
)
language plpgsql
set search_path = pg_catalog, ceaseless, pg_temp
as $$
declare
    v_cap bigint := _setting_int('routine_max_running');
    -- Sixteen slots of cap / 32 each: all of them in flight are half the cap.
    v_slot_size bigint := v_cap / 32;
    v_state constant transaction_state := _transaction_state();
    v_mode text := v_state.fire_mode;
    v_room bigint := coalesce(v_state.fire_room, 0);
    v_count integer := coalesce(cardinality(p_routine_ids), 0);
begin
    if v_mode is null and v_count <= v_slot_size
       and current_setting('transaction_isolation') = 'read committed' then
        begin
            perform pg_advisory_xact_lock_shared(hashtext('ceaseless'), hashtext('routine fires'));
            if not _take_fire_slot() then
                raise exception 'every fire slot is taken';
            end if;
            -- A statement after the locks: it sees every fire committed
            -- before them, and at most sixteen slots are in flight.
            select coalesce(sum(s.running), 0) + 16 * v_slot_size into o_running
            from routine_run_shards s;
            if o_running > v_cap then
                raise exception 'the cap is near';
            end if;
            perform _lock_routines_for_fire(p_routine_ids, o_running, false);
        -- The block's own signal (a plain RAISE; nothing it calls raises
        -- one). Leaving the block this way releases what it took: nothing
        -- is held when the exclusive lock is waited for.
        exception when raise_exception then
            o_running := null;
        end;
        if o_running is not null then
            v_mode := 'shared';
            v_room := v_slot_size;
        end if;
    elsif v_mode = 'shared' and v_room < v_count then
        -- More fires than its slot has room for (a statement inserting many
        -- events fires once per row): judged exactly from here on.
        perform _admit_exactly();
        v_mode := 'exclusive';
    elsif v_mode = 'shared' then
        -- Fired shared before in this transaction: nothing may be waited for
        -- now, out of order.
        select coalesce(sum(s.running), 0) + 16 * v_slot_size into o_running
        from routine_run_shards s;
        if not _lock_routines_for_fire(p_routine_ids, o_running, true) then
            raise exception 'ceaseless: this transaction''s fires conflict with concurrent fires'
                using errcode = '40001',
                      hint = 'Retry the transaction; or fire once per transaction.';
        end if;
    end if;

    if v_mode = 'shared' then
        o_free := v_room;
        v_room := v_room - v_count;
    else
        if v_mode is null then
            perform pg_advisory_xact_lock(hashtext('ceaseless'), hashtext('routine fires'));
            v_mode := 'exclusive';
        end if;
        -- Read committed takes a new snapshot for every statement, so what this
        -- transaction reads next includes every fire committed before it got
        -- the lock. A snapshot taken before the wait (repeatable read,
        -- serializable) would not: lock the shards FOR SHARE instead, which
        -- raises 40001 (retry) when a run started or ended since that snapshot.
        if current_setting('transaction_isolation') <> 'read committed' then
            perform from routine_run_shards for share;
        end if;
        select coalesce(sum(s.running), 0) into o_running from routine_run_shards s;
        o_free := greatest(v_cap - o_running, 0);
        v_room := null;
    end if;
    perform _remember_fire(v_mode, v_room);
end;
$$;

comment on function _admit_fires(uuid[]) is
    'Admit a fire: shared (fire lock shared, a slot, per-routine locks) while the cap is far, '
    'else exclusive; returns the running count to judge by and the free places of the cap.';

-- Make a transaction admitted shared judge its fires exactly from now on,
-- without ever waiting for what could be waiting for it. It first takes every
-- fire slot it can, without waiting: holding all sixteen, no other shared
-- fire is in flight and none can start (a new one finds no slot and waits for
-- the exclusive lock, which this transaction's shared one holds off), so the
-- running count it reads is exact. When another transaction holds a slot, it
-- waits for the fire lock in exclusive mode instead: every other holder is a
-- shared fire, which ends its transaction without waiting for a fire lock
-- (its later fires fail with 40001 rather than wait), so the wait ends, and
-- new fires queue behind it. One transaction at a time may wait so (the
-- upgrade lock, taken without waiting): two would each hold the shared lock
-- the other waits for. The second is a real conflict with the first, raised
-- as 40001, and a retry clears it once the first has committed.
--
-- Raises: 40001 when another transaction is already waiting so.
create or replace function _admit_exactly()
returns void
language plpgsql
set search_path = pg_catalog, ceaseless, pg_temp
as $$
declare
    v_all boolean := true;
begin
    for i in 0..15 loop
        -- A slot this transaction holds is taken again at once.
        if not pg_try_advisory_xact_lock(hashtext('ceaseless fire slots'), i) then
            v_all := false;
        end if;
    end loop;
    if v_all then
        return;
    end if;
    if not pg_try_advisory_xact_lock(hashtext('ceaseless'), hashtext('routine fire upgrade')) then
        raise exception 'ceaseless: this transaction''s fires conflict with concurrent fires'
            using errcode = '40001',
                  detail = 'Another transaction of many fires is waiting for the others to end.',
                  hint = 'Retry the transaction.';
    end if;
    perform pg_advisory_xact_lock(hashtext('ceaseless'), hashtext('routine fires'));
end;
$$;

comment on function _admit_exactly() is
    'Make a transaction admitted shared judge exactly: every fire slot, or the fire lock in '
    'exclusive mode (one such waiter at a time; 40001 for a second).';

-- One of the sixteen fire slots, taken without waiting; false when all are
-- held by other transactions. The search starts at a different slot per
-- backend, so concurrent fires rarely try the same one first.
create or replace function _take_fire_slot()
returns boolean
language plpgsql
set search_path = pg_catalog, ceaseless, pg_temp
as $$
begin
    for i in 0..15 loop
        if pg_try_advisory_xact_lock(hashtext('ceaseless fire slots'),
                                     (i + pg_backend_pid()) % 16) then
            return true;
        end if;
    end loop;
    return false;
end;
$$;

comment on function _take_fire_slot() is
    'Take one of the sixteen fire slots (transaction-scoped advisory lock) without waiting.';

-- Serialise the fires of each routine whose own guardrails could bind: one
-- with a dedup window, or whose max_concurrent the running runs (p_running,
-- a bound including every fire in flight) could reach. In key order, so two
-- fires never wait for each other's routines in opposite orders; p_no_wait
-- for a transaction that already holds some (order is no longer possible):
-- false, holding what it took, when another fire holds one.
create or replace function _lock_routines_for_fire(
    p_routine_ids uuid[], p_running bigint, p_no_wait boolean
)
returns boolean
language plpgsql
set search_path = pg_catalog, ceaseless, pg_temp
as $$
declare
    v_key integer;
begin
    for v_key in
        select distinct hashtext(r.id::text) as key
        from routines r
        where r.id = any (p_routine_ids)
          and (r.dedup_window_secs is not null or r.max_concurrent <= p_running)
        order by key
    loop
        if not p_no_wait then
            perform pg_advisory_xact_lock(hashtext('ceaseless routine fires'), v_key);
        elsif not pg_try_advisory_xact_lock(hashtext('ceaseless routine fires'), v_key) then
            return false;
        end if;
    end loop;
    return true;
end;
$$;

comment on function _lock_routines_for_fire(uuid[], bigint, boolean) is
    'Serialise the fires of routines whose dedup or max_concurrent could bind (advisory locks '
    'in key order; or without waiting, false when another fire holds one).';

-- Add p_delta to the count of running routine runs, in a shard of
-- routine_run_shards that no other transaction holds (SKIP LOCKED), so a fire
-- or a finish never waits for another's commit here. A transaction keeps to
-- the shard it first took, which it marks with its own id (xact), so it
-- holds at most one: its later moves find that shard by the mark, which no
-- other transaction can have written. Only when all 64 are held at once does
-- it wait, for the shard its backend id names.
create or replace function _count_running(p_delta integer)
returns void
language plpgsql
set search_path = pg_catalog, ceaseless, pg_temp
as $$
declare
    v_xact xid8;
    v_shard smallint;
begin
    if coalesce(p_delta, 0) = 0 then
        return;
    end if;
    v_xact := pg_current_xact_id();
    -- The shard this transaction already holds. A plain scan of 64 rows: a
    -- row another transaction is moving is read as last committed, never
    -- marked with this id, so nothing is waited for.
    update routine_run_shards s set running = s.running + p_delta
    where s.xact = v_xact
    returning s.shard into v_shard;
    if v_shard is not null then
        return;
    end if;
    -- The shard this backend's id names, when nobody holds it (one
    -- update, no search); else the first free one from there, so
    -- concurrent transactions rarely try the same one first.
    update routine_run_shards s set running = s.running + p_delta, xact = v_xact
    where s.shard = (select f.shard from routine_run_shards f
                     where f.shard = pg_backend_pid() % 64
                     for no key update skip locked)
    returning s.shard into v_shard;
    if v_shard is null then
        select f.shard into v_shard
        from routine_run_shards f
        order by (f.shard + pg_backend_pid()) % 64
        limit 1
        for no key update skip locked;
        v_shard := coalesce(v_shard, pg_backend_pid() % 64);
        update routine_run_shards set running = running + p_delta, xact = v_xact
        where shard = v_shard;
    end if;
end;
$$;

comment on function _count_running(integer) is
    'Move the running routine_runs count by p_delta in a shard no other transaction holds.';

-- Recount the running routine runs into the shards, from routine_runs: the
-- shards' sum is what the global cap judges by, and a count lost there (or
-- added twice) would otherwise stay lost for good, shutting out every
-- owner's routines, or letting the cap be passed.
--
-- Exact while fires and finishes go on, and it waits for none of them: every
-- transaction that starts or ends runs moves a shard in the same transaction,
-- so one statement's snapshot sees both of its changes or neither, and the
-- sum less the count in that snapshot is exactly the error of the committed
-- past. It is added to one shard as a delta, on top of whatever concurrent
-- transactions add (an update of a row re-reads it when another changed it
-- first), so nothing is lost or counted twice. Two recounts at once would
-- each correct the same error: one at a time, and a second caller skips.
--
-- Called by: every listener's maintenance tick (listener/maintenance.py); the
-- one that gets the lock recounts. Returns the correction (0 when the shards
-- were right), NULL when another recount was running. A correction is
-- audited (entity routine_run_shards), at p_now.
create or replace function recount_routine_run_shards(p_now timestamptz default now())
returns integer
language plpgsql
set search_path = pg_catalog, ceaseless, pg_temp
as $$
declare
    v_sum bigint;
    v_running bigint;
    v_shard smallint;
begin
    if not pg_try_advisory_xact_lock(hashtext('ceaseless'), hashtext('recount routine runs')) then
        return null;
    end if;
    -- One statement, one snapshot (idx_routine_runs_status holds only
    -- running runs).
    select (select coalesce(sum(s.running), 0) from routine_run_shards s),
           (select count(*) from routine_runs rr where rr.status = 'running')
    into v_sum, v_running;
    if v_sum = v_running then
        return 0;
    end if;
    select f.shard into v_shard
    from routine_run_shards f
    order by f.shard
    limit 1
    for no key update skip locked;
    update routine_run_shards set running = running - (v_sum - v_running)::integer
    where shard = coalesce(v_shard, 0);
    insert into audit_log (at, entity, entity_key, action, detail)
    values (p_now, 'routine_run_shards', 'running', 'recount',
            jsonb_build_object('counted', v_sum, 'running', v_running,
                               'correction', v_running - v_sum));
    return (v_running - v_sum)::integer;
end;
$$;

comment on function recount_routine_run_shards(timestamptz) is
    'Correct the running-count shards to the running routine_runs (one shard moved by the '
    'difference, audited); exact while fires and finishes go on. Returns the correction, or NULL '
    'when another recount holds the lock. Maintenance, one listener at a time.';

-- Fire routines: the one path every fire takes. One entry per routine, in the
-- order the global cap fills them; p_details[i] is what fired routine i (the
-- schedule, the event preview, the webhook path), p_contexts[i] the whole text
-- the agent reacts to (also the dedup key), p_missed[i] the cron slots
-- collapsed into this fire, p_job_ids[i] an existing job the run adopts
-- instead of a new one (retry_job). p_manual skips the cooldown. Array
-- arguments may be NULL or shorter than p_routine_ids: a missing entry is
-- NULL (0 for p_missed). A routine id that names no routine returns no row.
--
-- Returns one row per routine fired: its run, its job (NULL when skipped),
-- and the status (running or skipped) with the skip reason. Writes one
-- routine_runs row per routine, plus one skipped row (reason missed_slots,
-- carrying the count) for a cron fire that stands for missed slots, and one
-- job per running run.
--
-- Locks: fire admission (_admit_fires); see this file's header for the
-- order every operation follows.
create or replace function _fire_routines(
    p_routine_ids uuid[],
    p_trigger text,
    p_now timestamptz,
    p_details text[] default null,
    p_contexts text[] default null,
    p_missed integer[] default null,
    p_manual boolean default false,
    p_job_ids uuid[] default null
)
returns table (ord bigint, routine_id uuid, run_id uuid, job_id uuid, status text,
               skip_reason text)
language plpgsql
set search_path = pg_catalog, ceaseless, pg_temp
-- Once the guard compared max_concurrent with the running count (v_running),
-- PL/pgSQL judged every custom plan of the big statement cheaper than the
-- generic one and planned it on every fire: 1.5 ms of a 2.8 ms event insert
-- (bin/bench event fan-in: 338 inserts/s instead of 899, PG 18). Its shape
-- does not depend on the values, so the one generic plan is the right one
-- (docs/performance.md, "Planner settings on functions").
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
declare
    v_running bigint;
    v_free bigint;
begin
    if coalesce(cardinality(p_routine_ids), 0) = 0 then
        return;
    end if;
    select a.o_running, a.o_free into v_running, v_free from _admit_fires(p_routine_ids) a;

    return query
    with input as (
        select i.id, i.ord, p_details[i.ord] as detail, p_contexts[i.ord] as context,
               greatest(coalesce(p_missed[i.ord], 0), 0) as missed, p_job_ids[i.ord] as job_id
        from unnest(p_routine_ids) with ordinality as i(id, ord)
    ),
    -- Materialized: `capped` reads each reason three times, and inlined,
    -- every read would count the routine's running runs again.
    judged as materialized (
        select found.r as routine, i.ord, i.detail, i.context, i.missed, i.job_id, h.hash,
               case
                   when not r.enabled then 'disabled'
                   when not a.enabled then 'agent_disabled'
                   -- Zero is no cooldown at all: compared to the finishing
                   -- transaction's clock, an event inserted a moment before
                   -- the finish committed would look "too soon".
                   when not p_manual and r.cooldown_secs > 0 and r.last_run_at is not null
                        and p_now < r.last_run_at + make_interval(secs => r.cooldown_secs)
                       then 'cooldown'
                   -- Counting stops at max_concurrent: a routine allowed one
                   -- run at a time reads one index entry, not all of them.
                   -- And no count when fewer runs than that are running in
                   -- all (v_running: every run committed and every fire in
                   -- flight, _admit_fires): a routine allowed thousands
                   -- would otherwise count its whole backlog at every fire.
                   when r.max_concurrent <= v_running
                        and (select count(*)
                         from (select from routine_runs rr
                               where rr.routine_id = r.id and rr.status = 'running'
                               limit r.max_concurrent) running)
                        >= r.max_concurrent
                       then 'concurrency'
                   when h.hash is not null and exists (
                           select 1 from routine_runs rr
                           where rr.routine_id = r.id and rr.content_hash = h.hash
                             and rr.status <> 'skipped'
                             and rr.started_at > p_now - make_interval(secs => r.dedup_window_secs))
                       then 'dedup'
               end as reason
        from input i
        -- Each routine probed by key, the fires on the outer side (OFFSET 0
        -- fences it): the generic plan cannot size the fires, and joined, it
        -- hashed them against a read of every routine (1.1 ms a fire at a
        -- thousand routines).
        cross join lateral (
            select r from routines r where r.id = i.id offset 0
        ) found
        cross join lateral (select (found.r).*) r
        join agents a on a.name = r.agent
        cross join lateral (
            select case when i.context is not null and r.dedup_window_secs is not null
                        then encode(sha256(convert_to(i.context, 'UTF8')), 'hex') end as hash
        ) h
    ),
    -- The global cap admits the first v_free fires that passed the rest.
    capped as (
        select j.routine, j.ord, j.detail, j.context, j.missed, j.hash,
               case when j.reason is null
                         and count(*) filter (where j.reason is null) over (order by j.ord) > v_free
                    then 'global_cap' else j.reason end as reason,
               gen_random_uuid() as run_id,
               coalesce(j.job_id, gen_random_uuid()) as job_id,
               j.job_id is null as new_job
        from judged j
    ),
    -- Runs and jobs point at each other; both are written by this one
    -- statement, whose foreign keys are checked when it ends.
    runs as (
        insert into routine_runs (id, routine_id, trigger_type, trigger_detail, started_at,
                                  status, skip_reason, completed_at, missed_slots, content_hash,
                                  context, created_at, job_id)
        select c.run_id, (c.routine).id, p_trigger, left(c.detail, 200), p_now,
               case when c.reason is null then 'running' else 'skipped' end, c.reason,
               case when c.reason is null then null else p_now end, c.missed, c.hash,
               c.context, p_now, case when c.reason is null then c.job_id end
        from capped c
        union all
        -- The slots that passed unfired: refused fires too, so they leave
        -- their own row, with the count.
        select gen_random_uuid(), (c.routine).id, p_trigger, left(c.detail, 200), p_now,
               'skipped', 'missed_slots', p_now, c.missed, null, null, p_now, null
        from capped c
        where c.missed > 0
        returning routine_runs.id
    ),
    jobs as (
        -- The job is the routine owner's, whoever fired it (a listener's
        -- cron, an operator's run_routine).
        insert into job (id, kind, agent, prompt, payload, routine_run_id, expects_reply,
                         max_attempts, max_turns, run_after, created_at, user_id)
        select c.job_id, 'routine', (c.routine).agent, s.prompt, s.payload, c.run_id,
               s.expects_reply, s.max_attempts, s.max_turns, p_now, p_now, (c.routine).user_id
        from capped c
        cross join lateral _routine_job_spec(c.routine, c.context) s
        where c.reason is null and c.new_job
        returning job.id
    )
    select c.ord, (c.routine).id, c.run_id, case when c.reason is null then c.job_id end,
           case when c.reason is null then 'running' else 'skipped' end, c.reason
    from capped c
    order by c.ord;
end;
$$;

comment on function _fire_routines(uuid[], text, timestamptz, text[], text[], integer[], boolean,
                                   uuid[]) is
    'The one firing path: judge each routine against its guardrails (disabled, agent disabled, '
    'cooldown, max_concurrent, dedup, global cap), write a running or skipped routine_runs row '
    'per routine and a job per running run.';
