-- Fire admission: what every fire of a routine takes before it reads its
-- guardrails, the running count of routine runs the global cap judges by,
-- and what a transaction remembers between two of its fires.
--
-- Called by: _fire_routines (42_routine_firing.sql), before each fire;
-- the routine_runs triggers (44_routine_outcomes.sql), which move the running
-- count; _fire_loop and topology_runs_loop_lock (56_loop_firing.sql), which
-- mark the iteration a fire inserts (transaction_state); every listener's
-- maintenance tick (recount_routine_run_shards, forget_ended_backends).
-- Guarantees:
-- - the global cap, max_concurrent and dedup are exact: a fire is admitted
--   (_admit_fires) before it reads them — shared while the cap is far, with
--   the fires of one routine serialised when its own guardrails could bind,
--   exclusive near the cap — so no two fires both take the last place;
-- - a transaction's fires are admitted whatever their number (a statement
--   inserting many events fires once per row): the fires past the cap are
--   skipped (global_cap), never refused with an error; 40001 means only that
--   concurrent fires conflict with this transaction's, and a retry clears it;
-- - the sum of routine_run_shards is the number of running routine runs,
--   moved in the transaction that starts or ends them, and recounted exactly
--   while fires and finishes go on;
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
--       fire lock (shared or exclusive), then its slots without waiting, then
--       per-routine advisory locks in key order — and then waits for
--       nothing: it reads its routines without locking them (its runs'
--       foreign keys take KEY SHARE, which no finish, fire or cron batch
--       blocks), and counts its runs in a shard nobody holds; a second fire
--       in a transaction admitted shared waits for nothing at all (40001
--       instead), except the one such transaction at a time that needs more
--       room than its slots (_admit_exactly), which waits for the other
--       shared holders, none of which waits for it;
--   so an admitted fire is never in a cycle, every wait for routine rows or
--   routine fire locks is in id or key order, and a finishing statement
--   holds its routines only for its end, not all of it.

-- This transaction's row of transaction_state (db/0026), or a row of NULLs
-- when it has none: what the engine's functions remember between two calls
-- in one transaction. Never a setting, which any session could SET. A
-- transaction without an id has written nothing, so it has no row either (and
-- reading assigns it none).
create or replace function _transaction_state()
returns transaction_state
language plpgsql stable
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

-- Remember in transaction_state what this transaction's later fires need:
-- how its routine fires were admitted and the room its shared slot has left
-- (p_mode, p_room; _admit_fires), or the loop iteration _fire_loop is about to
-- insert (p_loop_run; topology_runs_loop_lock checks it). A NULL p_mode, or a
-- NULL p_loop_run, keeps what this transaction remembered of that part. One
-- row per backend, taken over from whichever transaction last wrote it.
create or replace function _remember_fire(p_mode text, p_room bigint,
                                          p_loop_run uuid default null)
returns void
language plpgsql
as $$
begin
    insert into transaction_state as s (backend_pid, xact, fire_mode, fire_room, loop_fire)
    values (pg_backend_pid(), pg_current_xact_id(), p_mode, p_room, p_loop_run)
    on conflict (backend_pid) do update
    set fire_mode = case when p_mode is not null then excluded.fire_mode
                         when s.xact = excluded.xact then s.fire_mode end,
        fire_room = case when p_mode is not null then excluded.fire_room
                         when s.xact = excluded.xact then s.fire_room end,
        loop_fire = case when p_loop_run is not null then excluded.loop_fire
                         when s.xact = excluded.xact then s.loop_fire end,
        held_fire = case when s.xact = excluded.xact then s.held_fire end,
        xact = excluded.xact;
end;
$$;

comment on function _remember_fire(text, bigint, uuid) is
    'Record in transaction_state how this transaction''s routine fires were admitted (shared or '
    'exclusive) and the room its shared slots have left, or the loop iteration it is inserting; '
    'a NULL part keeps what the transaction recorded.';

-- Forget the transaction_state rows of backends that have exited: a row is
-- one per backend and means nothing once its backend is gone, but pids are
-- many, so rows would pile up over months of connections. A live backend's
-- row is kept whatever transaction it belongs to (it takes it over at its
-- next fire). Returns how many were forgotten.
--
-- Called by: every listener's maintenance tick (listener/daemon/maintenance.py).
create or replace function forget_ended_backends()
returns integer
language plpgsql
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
-- - shared, while the cap is far: the fire lock in shared mode, as many of
--   16 slot locks as the fire needs (taken without waiting), and an advisory
--   lock per routine whose own guardrails could bind (dedup, or
--   max_concurrent within reach), in key order. A slot stands for cap / 32
--   runs: with every slot in use the runs in flight are at most half the
--   cap, so a fire that sees the running count at or below the other half
--   needs nobody else's count. Fires of different routines then run side by
--   side: two listeners' cron batches of a fan-out, each taking the slots
--   its batch needs (listener/daemon/scheduler.py sizes its batches so that
--   the routine locks of both stay far below the server's lock table).
-- - exclusive: the fire lock alone, in exclusive mode, which waits for every
--   shared holder to commit and keeps new ones out; the count it then reads
--   is exact. Taken when the cap is near, the slots the fire needs are busy,
--   the fire is larger than half the cap, or the transaction is not read
--   committed.
-- The locks are the transaction's until it ends. A transaction that fired
-- shared and fires again within its slots' room takes the routine locks it
-- needs without waiting (taking them in order could deadlock with another
-- such transaction) and fails with 40001 (retry) when another fire holds
-- one. One that needs more room than its slots have (a statement of many
-- events, one fire per row) is judged exactly from then on (_admit_exactly),
-- so a statement's fires are admitted whatever its size, and the fires past
-- the cap are skipped (global_cap) as in exclusive mode. How it was admitted,
-- and the room its slots have left, is in transaction_state, which only the
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
as $$
declare
    v_cap bigint := _setting_int('routine_max_running');
    -- Sixteen slots of cap / 32 each: all of them in flight are half the cap.
    v_slot_size bigint := v_cap / 32;
    v_state constant transaction_state := _transaction_state();
    v_mode text := v_state.fire_mode;
    v_room bigint := coalesce(v_state.fire_room, 0);
    v_count integer := coalesce(cardinality(p_routine_ids), 0);
    -- The slots whose room the fire needs (one at least).
    v_slots integer := greatest(ceil(v_count::numeric / nullif(v_slot_size, 0)), 1);
begin
    if v_mode is null and v_slot_size > 0 and v_slots <= 16
       and current_setting('transaction_isolation') = 'read committed' then
        begin
            perform pg_advisory_xact_lock_shared(hashtext('ceaseless'), hashtext('routine fires'));
            if not _take_fire_slots(v_slots) then
                raise exception 'the fire slots are taken';
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
            v_room := v_slots * v_slot_size;
        end if;
    elsif v_mode = 'shared' and v_room < v_count then
        -- More fires than its slots have room for (a statement inserting many
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

-- p_count of the sixteen fire slots, taken without waiting; false when fewer
-- are free (the caller's block then gives back those it took). The search
-- starts at a different slot per backend, so concurrent fires rarely try the
-- same one first.
create or replace function _take_fire_slots(p_count integer)
returns boolean
language plpgsql
as $$
declare
    v_taken integer := 0;
begin
    for i in 0..15 loop
        if pg_try_advisory_xact_lock(hashtext('ceaseless fire slots'),
                                     (i + pg_backend_pid()) % 16) then
            v_taken := v_taken + 1;
            if v_taken >= p_count then
                return true;
            end if;
        end if;
    end loop;
    return false;
end;
$$;
comment on function _take_fire_slots(integer) is
    'Take p_count of the sixteen fire slots (transaction-scoped advisory locks) without waiting; '
    'false when fewer are free.';

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
as $$
declare
    v_key integer;
begin
    -- Each routine probed by key, the ids on the outer side (OFFSET 0 fences
    -- the probe): `r.id = any (p_routine_ids)` ran on its generic plan as a
    -- bitmap scan built for every fire, 72 µs a call for one routine on
    -- PostgreSQL 15 against 11 (tests/sql/test_fire_admission.py).
    for v_key in
        select distinct hashtext(r.id::text) as key
        from unnest(p_routine_ids) as u(id)
        cross join lateral (
            select r.id
            from routines r
            where r.id = u.id
              and (r.dedup_window_secs is not null or r.max_concurrent <= p_running)
            offset 0
        ) r
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
-- Called by: every listener's maintenance tick (listener/daemon/maintenance.py); the
-- one that gets the lock recounts. Returns the correction (0 when the shards
-- were right), NULL when another recount was running. A correction is
-- audited (entity routine_run_shards), at p_now.
create or replace function recount_routine_run_shards(p_now timestamptz default now())
returns integer
language plpgsql
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
