-- The trust boundary between user roles and the engine: what the engine
-- remembers within a transaction lives in rows only it can write, not in
-- settings any session can SET; the audit log names the login role and keeps a
-- listener's worker id beside it; approvals record the role that decided them;
-- audit pruning has a floor.
--
-- Function bodies: functions/41_routine_firing.sql (fire admission, the
-- running-count shards and their recount), 56_loop_firing.sql (the loop fire
-- marker), 30_notify_audit.sql (audit actor, pruning), 53_approvals.sql;
-- every function of functions/ names its search_path; privileges in
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
-- The audit actor is the login role, always; a listener's worker id (which
-- it chooses, so it is a claim) is kept beside it. A listener could once
-- write any name as the actor, alice's included.
-- ---------------------------------------------------------------------------
alter table audit_log alter column actor set default session_user;
alter table audit_log add column worker text
    default (case when pg_catalog.pg_has_role(session_user, 'ceaseless_listener', 'usage')
                  then nullif(pg_catalog.current_setting('ceaseless.actor', true), '') end);
comment on column audit_log.actor is
    'The login role (session_user) whose session made the change. A row naming any other is '
    'refused (audit_log_actor_is_session).';
comment on column audit_log.worker is
    'For a member of ceaseless_listener, the worker id its functions claimed for the transaction '
    '(--worker-id): which listener process acted, as that role says. NULL for every other role.';

-- ---------------------------------------------------------------------------
-- decided_by is the caller's free text (the person, as a dashboard names
-- them); the role that called decide_approval is recorded beside it.
-- ---------------------------------------------------------------------------
alter table approvals add column decided_by_role text;
comment on column approvals.decided_by_role is
    'The login role that decided the approval (session_user), filled by decide_approval; '
    'decided_by is the name the caller gave.';

-- ---------------------------------------------------------------------------
-- Audit retention has a floor: prune_audit_log(now()) once emptied the log.
-- ---------------------------------------------------------------------------
insert into settings (key, value, description) values
    ('audit_log_min_retention_secs', '2592000',
     'Audit rows younger than this many seconds are never pruned (prune_audit_log refuses a '
     'cutoff inside it). At least 86400 (one day); default 30 days.')
on conflict (key) do nothing;

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
