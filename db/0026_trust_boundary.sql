-- The trust boundary between user roles and the engine: what the engine
-- remembers within a transaction lives in rows only it can write, not in
-- settings any session can SET.
--
-- Function bodies: functions/41_routine_firing.sql (fire admission, the
-- running-count shards and their recount), 56_loop_firing.sql (the loop fire
-- marker); every function of functions/ names its search_path; privileges in
-- functions/99_access.sql.

set local search_path = ceaseless, pg_catalog, pg_temp;

-- ---------------------------------------------------------------------------
-- Transaction-local state of the engine. A setting (`set ceaseless.fire_mode
-- = 'shared'`, `ceaseless.fire_room`, `ceaseless.loop_fire`) can be set by any
-- session, so read as state it let a user skip the global cap or pass its own
-- run off as an iteration of another user's loop. One row per backend, valid
-- only while `xact` is the backend's current transaction: a row left by an
-- earlier transaction (or by a backend whose pid was reused) reads as none.
-- Unlogged: it means nothing after a crash, and writes to it cost no WAL.
-- No role but the owner and the listener may write it (99_access.sql).
-- ---------------------------------------------------------------------------
create unlogged table transaction_state (
    backend_pid integer primary key,
    xact xid8 not null,
    -- How this transaction's fires were admitted (_admit_fires: shared or
    -- exclusive): a second fire in it must neither wait out of order nor take
    -- more room than its slots hold.
    fire_mode text,
    fire_room bigint,
    -- The topology run _fire_loop is inserting: topology_runs_loop_lock lets
    -- exactly that row through.
    loop_fire uuid
);

comment on table transaction_state is
    'What the engine''s functions remember within one transaction (fire admission, the loop run '
    'being fired): one row per backend, read only while xact is the backend''s current '
    'transaction. Written by the engine alone; never a setting a session could forge.';
comment on column transaction_state.xact is
    'The transaction the row belongs to (pg_current_xact_id()); any other transaction reads no row.';

-- ---------------------------------------------------------------------------
-- The running-count shard a transaction holds is the one whose xact is its
-- own: it marks the shard in the same update that moves the count. A setting
-- naming the shard let `set ceaseless.run_shard = 999` send a decrement to no
-- row at all, which nothing ever gave back.
-- ---------------------------------------------------------------------------
alter table routine_run_shards add column xact xid8;
comment on column routine_run_shards.xact is
    'The transaction that last moved this shard: while it runs, its later moves go to the same '
    'shard, so it holds one at most.';

-- ---------------------------------------------------------------------------
-- The quiet-check trigger functions (functions/05_secrets.sql) were created
-- in pg_catalog, the first schema of their generator's search_path, when the
-- migrating role could create there (a superuser). Moved into ceaseless,
-- where they belong: the triggers follow them (they refer to the function
-- itself, not its name), and 05_secrets.sql now replaces them there.
-- ---------------------------------------------------------------------------
do $move$
declare
    v_function regprocedure;
begin
    for v_function in
        select p.oid::regprocedure
        from pg_proc p
        where p.pronamespace = 'pg_catalog'::regnamespace
          and p.proname in ('_tg_agents_quiet_checks', '_tg_settings_quiet_checks',
                            '_tg_routines_quiet_checks', '_tg_loops_quiet_checks')
    loop
        execute format('alter function %s set schema ceaseless', v_function);
    end loop;
end;
$move$;
