-- NOTIFY and audit: the audit_log's rules, and the triggers that audit and
-- announce jobs, agent runs, configuration, topology runs, their nodes,
-- approvals and loops.
--
-- Called by: PostgreSQL, after each INSERT / UPDATE statement on job and
-- agent_run, each change of an agents or settings row, and each change of a
-- topology_runs, topology_nodes, approvals or loops row; the row-level
-- triggers of routines (_audit_enabling); the retention pass (prune,
-- 96_retention.sql) and prune_audit_log, through _delete_audit_rows.
-- Guarantees: the job and agent_run triggers are statement-level with
-- transition tables, so a bulk insert of 10,000 jobs sends one NOTIFY per
-- (kind, agent, state) group, not 10,000; payloads carry ids and states,
-- never job data (the tables are the truth); every state change writes one
-- audit_log row in the same transaction (who: the login role, and a
-- listener's worker id beside it), so the log and the state can never
-- disagree; audit_log is append-only, its actor is the session's login role,
-- and its rows leave only through _delete_audit_rows (prune_audit_log,
-- prune), above the retention floor.
--
-- A run's start and end are audited once, as its job's transitions into and
-- out of `running` (the detail names the attempt, and agent_run (job_id,
-- attempt) the run): they are the same events, in the same statements, and
-- auditing them twice would cost two of the eight rows a short job writes.
-- The agent_run triggers only announce.

-- How an announcement travels; every NOTIFY of the engine goes through here.
-- By default with the commit of the transaction that makes the change
-- (pg_notify). A session that set ceaseless.notify = 'relay' has its
-- announcements written to announcements instead, and a listener sends them
-- moments later (relay_announcements): PostgreSQL commits notifying
-- transactions one at a time, holding a database-wide lock through the
-- commit's WAL flush, so tens of sessions that each commit a notifying
-- insert wait on that lock rather than on their work (docs/notify.md,
-- "Relayed announcements"). A session's own choice, not a permission: it
-- decides only when that session's announcements go out, and the same
-- payloads go out on the same channels either way.
--
-- Raises: CE422 when ceaseless.notify is neither direct nor relay (a typo
-- would otherwise pass for the default unnoticed).
create or replace function _announce(p_channel text, p_payload text)
returns void
language plpgsql
as $$
declare
    v_mode constant text := coalesce(nullif(current_setting('ceaseless.notify', true), ''),
                                     'direct');
begin
    if v_mode = 'direct' then
        perform pg_notify(p_channel, p_payload);
    elsif v_mode = 'relay' then
        perform _relay_announcement(p_channel, p_payload);
    else
        perform _invalid_value('ceaseless.notify', 'must be direct or relay',
                               to_jsonb(v_mode));
    end if;
end;
$$;

comment on function _announce(text, text) is
    'NOTIFY p_channel with p_payload on commit, or, in a session with ceaseless.notify = '
    '''relay'', write it to announcements for a listener to send.';

-- Write one announcement for the relay. Security definer (99_access.sql):
-- an operator's or a user's session reaches announcements only this way,
-- and only with what the engine announces. The table's checks are
-- pg_notify's own, so the relay never meets one it cannot send.
create or replace function _relay_announcement(p_channel text, p_payload text)
returns void
language plpgsql
as $$
begin
    insert into announcements (channel, payload) values (p_channel, coalesce(p_payload, ''));
end;
$$;

comment on function _relay_announcement(text, text) is
    'Append one announcement to announcements, for relay_announcements to send.';

-- Send the relayed announcements, oldest first, at most p_limit of them in
-- this one commit, and remove them: one notifying commit for what many
-- sessions wrote. One relay at a time, so they go out in the order they were
-- written: a session that finds the advisory lock held has nothing to do
-- and does not wait. pg_notify is volatile, so PostgreSQL calls it after the
-- sort, in id order. Every listener calls this in a loop
-- (listener/daemon/maintenance.py); operators see the backlog in
-- relay_status.
--
-- Returns: how many it sent; 0 when none were waiting or another session is
-- relaying. Raises: CE422 when p_limit is not 1 to 10,000.
create or replace function relay_announcements(p_limit integer default 1000)
returns integer
language plpgsql
as $$
declare
    v_sent integer;
begin
    if p_limit is null or p_limit not between 1 and 10000 then
        perform _invalid_value('relay_announcements.p_limit', 'must be 1 to 10,000',
                               to_jsonb(p_limit));
    end if;
    if not pg_try_advisory_xact_lock(hashtext('ceaseless'), hashtext('announcement relay')) then
        return 0;
    end if;
    with taken as (
        delete from announcements a
        where a.id in (select x.id from announcements x order by x.id limit p_limit)
        returning a.id, a.channel, a.payload
    )
    select count(s.sent) into v_sent
    from (select pg_notify(t.channel, t.payload) as sent from taken t order by t.id) s;
    return v_sent;
end;
$$;

comment on function relay_announcements(integer) is
    'Send up to p_limit relayed announcements (oldest first) with pg_notify and remove them; '
    'returns how many, 0 when none waited or another session relays.';

-- The NOTIFY payload of a group of rows: the id when the group is one row,
-- else the count (a listener then reads the table, which it must do anyway).
-- No rows, no NOTIFY: an aggregate without GROUP BY returns one row even
-- over an empty transition table, so a caller that forgot to group would
-- otherwise wake every listener with {"id": null, "count": null} after each
-- statement that changed nothing (an empty claim, every poll).
--
-- PL/pgSQL, not SQL: a SQL function with a SET clause cannot be inlined and
-- is planned afresh on every call (about 0.2 ms), and this runs after every
-- statement that moves a job or a run.
create or replace function _notify_group(
    p_channel text, p_ids uuid[], p_fields jsonb
)
returns void
language plpgsql
as $$
begin
    if coalesce(cardinality(p_ids), 0) = 0 then
        return;
    end if;
    perform _announce(
        p_channel,
        (case when cardinality(p_ids) = 1
              then jsonb_build_object('id', p_ids[1])
              else jsonb_build_object('id', null, 'count', cardinality(p_ids))
         end || p_fields)::text);
end;
$$;

comment on function _notify_group(text, uuid[], jsonb) is
    'pg_notify one group of rows: {id} for a single row, {id: null, count} for many, plus '
    'p_fields; nothing for no rows.';

-- Audit one change of a row, and announce it on p_channel with p_payload
-- when a channel is given: the one way the row-level triggers (routines,
-- loops, topology runs, their nodes, approvals) record an event, in the
-- transaction that made it, so the log and the announcement never disagree
-- with the row.
create or replace function _audit_change(
    p_entity text, p_id uuid, p_action text, p_old_state text, p_new_state text,
    p_detail jsonb default '{}', p_channel text default null, p_payload jsonb default null
)
returns void
language plpgsql
as $$
begin
    insert into audit_log (entity, entity_id, action, old_state, new_state, detail)
    values (p_entity, p_id, p_action, p_old_state, p_new_state, p_detail);
    if p_channel is not null then
        perform _announce(p_channel, p_payload::text);
    end if;
end;
$$;

comment on function _audit_change(text, uuid, text, text, text, jsonb, text, jsonb) is
    'Write one audit_log row for a change of a row (entity, id, action, old and new state, '
    'detail) and, with p_channel, NOTIFY p_payload on it.';

-- Audit an INSERT, UPDATE or DELETE (p_op, as TG_OP says it) of a row its
-- owner switches on and off (a routine, a loop): its state is `enabled` or
-- `disabled`, the one before (not for an insert) and the one after (not for
-- a delete).
create or replace function _audit_enabling(
    p_entity text, p_op text, p_id uuid, p_was_enabled boolean, p_is_enabled boolean,
    p_detail jsonb default '{}'
)
returns void
language plpgsql
as $$
begin
    perform _audit_change(
        p_entity, p_id, lower(p_op),
        case when p_op <> 'INSERT'
             then case when p_was_enabled then 'enabled' else 'disabled' end end,
        case when p_op <> 'DELETE'
             then case when p_is_enabled then 'enabled' else 'disabled' end end,
        p_detail);
end;
$$;

comment on function _audit_enabling(text, text, uuid, boolean, boolean, jsonb) is
    'Audit an INSERT, UPDATE or DELETE (p_op) of a routine or loop with its enabled state '
    'before and after (_audit_change).';

create or replace function _tg_job_insert()
returns trigger
language plpgsql
as $$
begin
    insert into audit_log (entity, entity_id, action, new_state)
    select 'job', n.id, 'insert', n.state from new_rows n;

    perform _notify_group('ceaseless_job', array_agg(n.id),
                          jsonb_build_object('kind', n.kind, 'agent', n.agent,
                                             'state', n.state, 'old_state', null))
    from new_rows n
    group by n.kind, n.agent, n.state;
    return null;
end;
$$;

comment on function _tg_job_insert() is
    'After INSERT on job: audit each row, NOTIFY ceaseless_job once per (kind, agent, state).';

-- The update triggers join a statement's old rows to its new rows by id.
-- PL/pgSQL plans that join once per session and keeps the plan; planned for
-- a statement of one row it is a nested loop, which a later statement of two
-- thousand rows then runs as four million comparisons (half a second of one
-- finish_runs call, at random, depending on which batch came first). With
-- nested loops off the join is always hashed or merged: linear at any size,
-- and no dearer for one row. Evidence, on PostgreSQL 15 and 18: without it the
-- transition table is rescanned a thousand times (999,000 rows discarded) in
-- tests/sql/test_batch_plans.py, test_without_enable_nestloop_…; and bin/bench
-- throughput drops (docs/performance.md, "Planner settings on functions").
create or replace function _tg_job_update()
returns trigger
language plpgsql
set enable_nestloop = off
as $$
begin
    -- Lease extensions and bookkeeping updates change no state: they are
    -- neither audited nor announced, or every heartbeat would wake everyone.
    insert into audit_log (entity, entity_id, action, old_state, new_state, detail)
    select 'job', n.id, 'state', o.state, n.state,
           jsonb_strip_nulls(jsonb_build_object(
               'attempts', n.attempts, 'claimed_by', n.claimed_by,
               'error', case when n.last_error is distinct from o.last_error
                             then n.last_error end))
    from new_rows n
    join old_rows o on o.id = n.id
    where o.state is distinct from n.state;

    perform _notify_group('ceaseless_job', array_agg(n.id),
                          jsonb_build_object('kind', n.kind, 'agent', n.agent,
                                             'state', n.state, 'old_state', o.state))
    from new_rows n
    join old_rows o on o.id = n.id
    where o.state is distinct from n.state
    group by n.kind, n.agent, n.state, o.state;
    return null;
end;
$$;

comment on function _tg_job_update() is
    'After UPDATE on job: audit and NOTIFY ceaseless_job for rows whose state changed, once per group.';

create or replace function _tg_agent_run_insert()
returns trigger
language plpgsql
as $$
begin
    -- One NOTIFY for the whole statement. HAVING, because an aggregate
    -- without GROUP BY yields a row even when the statement inserted none (a
    -- claim that found no work still runs its insert of runs).
    perform _notify_group('ceaseless_run', array_agg(n.id),
                          jsonb_build_object('table', 'agent_run', 'status', 'running'))
    from new_rows n
    having count(*) > 0;
    return null;
end;
$$;

comment on function _tg_agent_run_insert() is
    'After INSERT on agent_run: NOTIFY ceaseless_run once per statement (the start is audited on the job).';

-- enable_nestloop: see _tg_job_update; the same test shows the same loop here.
create or replace function _tg_agent_run_update()
returns trigger
language plpgsql
set enable_nestloop = off
as $$
begin
    perform _notify_group('ceaseless_run', array_agg(n.id),
                          jsonb_build_object('table', 'agent_run', 'status', n.outcome))
    from new_rows n
    join old_rows o on o.id = n.id
    where o.finished_at is null and n.finished_at is not null
    group by n.outcome;
    return null;
end;
$$;

comment on function _tg_agent_run_update() is
    'After UPDATE on agent_run: NOTIFY ceaseless_run for runs that just finished (audited on the job).';

-- Configuration changed: every listener reloads the registry and settings.
-- Row-level because configuration changes are rare and each deserves its own
-- audit row; PostgreSQL folds the identical NOTIFYs of one transaction into one.
create or replace function _tg_config_changed()
returns trigger
language plpgsql
as $$
declare
    v_key text;
begin
    -- Through jsonb: PL/pgSQL resolves new.<field> against the table the
    -- trigger fired on, and agents and settings name their keys differently.
    v_key := coalesce(to_jsonb(new), to_jsonb(old)) ->> case tg_table_name
                                                             when 'agents' then 'name'
                                                             else 'key' end;
    insert into audit_log (entity, entity_key, action, detail)
    values (tg_table_name, v_key, lower(tg_op),
            -- Secrets hidden (05_secrets.sql): agents.env values and the
            -- sinks' headers and URLs would otherwise be kept here forever.
            _without_secrets(tg_table_name,
                             case when tg_op = 'DELETE' then to_jsonb(old) else to_jsonb(new) end));
    perform _announce('ceaseless_config', jsonb_build_object('table', tg_table_name)::text);
    return null;
end;
$$;

comment on function _tg_config_changed() is
    'After a change to an agents or settings row: audit it and NOTIFY ceaseless_config so listeners reload.';

-- Row triggers too are created with CREATE OR REPLACE, never dropped and
-- created again (_statement_trigger in 00_helpers.sql says why).
select _statement_trigger('job_insert', 'insert', 'job');
select _statement_trigger('job_update', 'update', 'job');
select _statement_trigger('agent_run_insert', 'insert', 'agent_run');
select _statement_trigger('agent_run_update', 'update', 'agent_run');

create or replace trigger agents_changed
    after insert or update or delete on agents
    for each row execute function _tg_config_changed();

create or replace trigger settings_changed
    after insert or update or delete on settings
    for each row execute function _tg_config_changed();

-- Topology runs, their nodes, approvals and loops: row-level, unlike the job
-- triggers (a run has tens of nodes, not thousands, and each node's
-- transition is its own event for a subscriber). Every status change of a
-- run, a node or an approval, and every change an operator makes to a loop,
-- is audited and announced on ceaseless_run, which the SSE observer and
-- other subscribers follow (docs/loops.md):
--   {"table": "topology_runs", "id": <run>, "status", "old_status", "loop_id"}
--   {"table": "topology_nodes", "id": <run>, "node", "status", "old_status", "job_id"}
--   {"table": "approvals", "id": <approval>, "run_id", "node", "status"}
--     status: pending | approved | rejected | expired
--   {"table": "loops", "id": <loop>, "status": "stopped" | "enabled" | "disabled",
--    "stopped_reason"}
-- Payloads carry ids and states only; loop audit rows never carry the webhook
-- token or signing key.

create or replace function _tg_topology_runs_changed()
returns trigger
language plpgsql
as $$
begin
    if tg_op = 'UPDATE' and new.status is not distinct from old.status then
        return null;
    end if;
    perform _audit_change(
        'topology_run', new.id, lower(tg_op), case when tg_op = 'UPDATE' then old.status end,
        new.status,
        jsonb_strip_nulls(jsonb_build_object(
            'loop_id', new.loop_id, 'iteration', new.iteration,
            'trigger_type', new.trigger_type, 'skip_reason', new.skip_reason,
            'error', left(new.error, 500))),
        'ceaseless_run',
        jsonb_build_object('table', 'topology_runs', 'id', new.id, 'status', new.status,
                           'old_status', case when tg_op = 'UPDATE' then old.status end,
                           'loop_id', new.loop_id));
    return null;
end;
$$;

comment on function _tg_topology_runs_changed() is
    'After a topology run is inserted or changes status: audit it and NOTIFY ceaseless_run.';

create or replace trigger topology_runs_changed
    after insert or update of status on topology_runs
    for each row execute function _tg_topology_runs_changed();

-- Nodes are inserted with their run, in the state the run's start gives
-- them; only their moves afterwards are events.
create or replace function _tg_topology_nodes_changed()
returns trigger
language plpgsql
as $$
begin
    if new.state is not distinct from old.state then
        return null;
    end if;
    perform _audit_change(
        'topology_node', new.topology_run_id, 'state', old.state, new.state,
        jsonb_strip_nulls(jsonb_build_object(
            'node', new.node_id, 'job_id', new.job_id, 'error', left(new.error, 500))),
        'ceaseless_run',
        jsonb_build_object('table', 'topology_nodes', 'id', new.topology_run_id,
                           'node', new.node_id, 'status', new.state, 'old_status', old.state,
                           'job_id', new.job_id));
    return null;
end;
$$;

comment on function _tg_topology_nodes_changed() is
    'After a topology node changes state: audit it (entity topology_node, the run''s id, the '
    'node in detail) and NOTIFY ceaseless_run.';

create or replace trigger topology_nodes_changed
    after update of state on topology_nodes
    for each row execute function _tg_topology_nodes_changed();

create or replace function _tg_approvals_changed()
returns trigger
language plpgsql
as $$
begin
    if tg_op = 'UPDATE' and new.decision is not distinct from old.decision then
        return null;
    end if;
    -- The decider named in the call is the one on the row; the actor is the
    -- role (or listener) that made it, which a user role cannot forge.
    perform _audit_change(
        'approval', new.id, case when tg_op = 'INSERT' then 'request' else 'decide' end,
        case when tg_op = 'UPDATE' then coalesce(old.decision, 'pending') end,
        coalesce(new.decision, 'pending'),
        jsonb_strip_nulls(jsonb_build_object(
            'run_id', new.topology_run_id, 'node', new.node_id,
            'decided_by', new.decided_by, 'note', left(new.note, 500),
            'expires_at', new.expires_at)),
        'ceaseless_run',
        jsonb_build_object('table', 'approvals', 'id', new.id, 'run_id', new.topology_run_id,
                           'node', new.node_id, 'status', coalesce(new.decision, 'pending')));
    return null;
end;
$$;

comment on function _tg_approvals_changed() is
    'After an approval is requested or decided: audit it (who asked, who decided, the note) and '
    'NOTIFY ceaseless_run.';

create or replace trigger approvals_changed
    after insert or update of decision on approvals
    for each row execute function _tg_approvals_changed();

-- What an operator changed on a loop, without its credentials: the token and
-- signing key appear only as "set", "rotated" or "cleared".
create or replace function _loop_audit_detail(p_old loops, p_new loops)
returns jsonb
language plpgsql immutable
as $$
begin
    return jsonb_strip_nulls(jsonb_build_object(
        'title', case when p_old is null or p_new.title is distinct from p_old.title
                      then p_new.title end,
        'triggers', case when p_old is null or p_new.triggers is distinct from p_old.triggers
                         then p_new.triggers end,
        'repeat_policy', case when p_old is null
                                   or p_new.repeat_policy is distinct from p_old.repeat_policy
                              then p_new.repeat_policy end,
        'graph_changed', case when p_old is not null and p_new.graph is distinct from p_old.graph
                              then true end,
        'task_changed', case when p_old is not null
                                  and p_new.task_template is distinct from p_old.task_template
                             then true end,
        'webhook', case when p_new.webhook_token is not distinct from p_old.webhook_token then null
                        when p_new.webhook_token is null then 'cleared'
                        when p_old.webhook_token is null then 'set'
                        else 'rotated' end,
        'stopped_reason', case when p_new.stopped_reason is distinct from p_old.stopped_reason
                               then p_new.stopped_reason end,
        'last_error', case when p_new.last_error is distinct from p_old.last_error
                           then left(p_new.last_error, 500) end));
end;
$$;

comment on function _loop_audit_detail(loops, loops) is
    'The audit detail of a loop change: changed configuration, the webhook credential as '
    'set / rotated / cleared (never its value), the stopped reason and the last error.';

-- Runtime bookkeeping (next_fire_at, last_run_id) is not audited: the runs
-- are. Everything else is: configuration, enabling, stopping.
create or replace function _tg_loops_changed()
returns trigger
language plpgsql
as $$
declare
    v_detail jsonb;
begin
    if tg_op = 'DELETE' then
        perform _audit_enabling('loop', tg_op, old.id, old.enabled, null);
        return null;
    end if;
    v_detail := _loop_audit_detail(case when tg_op = 'UPDATE' then old end, new);
    if tg_op = 'UPDATE' and new.enabled is not distinct from old.enabled
       and v_detail = '{}'::jsonb then
        return null;
    end if;
    perform _audit_enabling('loop', tg_op, new.id, old.enabled, new.enabled, v_detail);
    if tg_op = 'UPDATE' and (new.enabled is distinct from old.enabled
                             or new.stopped_reason is distinct from old.stopped_reason) then
        perform _announce('ceaseless_run', jsonb_build_object(
            'table', 'loops', 'id', new.id,
            'status', case when new.stopped_reason is not null then 'stopped'
                           when new.enabled then 'enabled' else 'disabled' end,
            'stopped_reason', new.stopped_reason)::text);
    end if;
    return null;
end;
$$;

comment on function _tg_loops_changed() is
    'After a loop is created, changed or deleted: audit it (credentials hidden) and, when it '
    'is enabled, disabled or stopped, NOTIFY ceaseless_run.';

-- The trigger loops_changed is created with the loops' other row triggers
-- (55_loop_validation.sql), from the one list of their bookkeeping columns.

-- audit_log is append-only: a row, once written, is never changed, and is
-- removed only by prune_audit_log's retention. Privileges already keep every
-- role but the owner from UPDATE and DELETE (99_access.sql); this
-- keeps the owner's own sessions, and a listener run as superuser, honest.
-- The pruning flag is a setting, which any session can SET: it opens nothing,
-- since only the owner holds DELETE at all.
create or replace function _tg_audit_log_append_only()
returns trigger
language plpgsql
as $$
begin
    if tg_op = 'DELETE' and current_setting('ceaseless.pruning_audit_log', true) = 'on' then
        return old;
    end if;
    raise exception 'audit_log is append-only: % is refused (old rows go through prune_audit_log)',
        tg_op using errcode = 'CE409';
end;
$$;

comment on function _tg_audit_log_append_only() is
    'Before UPDATE, DELETE or TRUNCATE on audit_log: refuse, except the deletes of prune_audit_log.';

create or replace trigger audit_log_append_only
    before update or delete on audit_log
    for each row execute function _tg_audit_log_append_only();

create or replace trigger audit_log_no_truncate
    before truncate on audit_log
    for each statement execute function _tg_audit_log_append_only();

-- The actor of an audit row is the login role of the session that writes it,
-- and only a listener's rows carry a worker id: a listener may append to the
-- log (it holds INSERT), but not in alice's name. The rows this schema writes
-- take both from the column defaults (db/0026), so the WHEN clause is false
-- for them and no function is called.
create or replace function _tg_audit_log_actor()
returns trigger
language plpgsql
as $$
begin
    if new.actor is distinct from session_user::text then
        raise exception 'audit_log.actor: is the login role of the session writing the row (%); '
                        'got %', session_user, to_jsonb(left(new.actor, 100))
            using errcode = 'CE422', table = 'audit_log', column = 'actor';
    end if;
    raise exception 'audit_log.worker: only a member of ceaseless_listener records a worker id; '
                    'got %', to_jsonb(left(new.worker, 100))
        using errcode = 'CE422', table = 'audit_log', column = 'worker';
end;
$$;

comment on function _tg_audit_log_actor() is
    'Before INSERT on audit_log of a row naming another actor than the session''s login role, '
    'or a worker id from a role that is no listener: refuse (CE422).';

create or replace trigger audit_log_actor_is_session
    before insert on audit_log
    for each row
    when (new.actor is distinct from session_user::text
          or (new.worker is not null
              and not pg_catalog.pg_has_role(session_user, 'ceaseless_listener', 'usage')))
    execute function _tg_audit_log_actor();

-- Delete up to p_limit audit rows older than p_before, oldest first, and say
-- how many: the one delete of the append-only log, shared by prune_audit_log
-- and the retention pass (prune, 96_retention.sql), which audit it each in
-- their own row. Bounded so a first prune of a large log does not hold a long
-- transaction.
--
-- The cutoff must lie at least audit_log_min_retention_secs before now: a
-- prune of everything (prune_audit_log(now())) leaves nothing to audit what
-- happened before it. Read against the server's clock, not a p_now, which
-- would let the caller move the floor.
--
-- Raises: CE422 a cutoff inside the retention floor, or p_limit below 1.
create or replace function _delete_audit_rows(p_before timestamptz, p_limit integer)
returns integer
language plpgsql
as $$
declare
    v_keep constant integer := _setting_int('audit_log_min_retention_secs');
    v_deleted integer;
begin
    if p_before is null or p_before > now() - make_interval(secs => v_keep) then
        raise exception 'prune_audit_log: p_before must be at least audit_log_min_retention_secs '
                        '(% s) before now, at or before %; got %', v_keep,
            now() - make_interval(secs => v_keep), coalesce(p_before::text, 'NULL')
            using errcode = 'CE422',
                  hint = 'Audit rows younger than the setting audit_log_min_retention_secs are '
                         'kept; pass an older cutoff.';
    end if;
    if p_limit is null or p_limit < 1 then
        raise exception 'prune_audit_log: p_limit must be at least 1, got %', p_limit
            using errcode = 'CE422';
    end if;
    perform set_config('ceaseless.pruning_audit_log', 'on', true);
    delete from audit_log
    where id in (select id from audit_log where at < p_before order by id limit p_limit);
    get diagnostics v_deleted = row_count;
    perform set_config('ceaseless.pruning_audit_log', 'off', true);
    return v_deleted;
end;
$$;

comment on function _delete_audit_rows(timestamptz, integer) is
    'Delete up to p_limit audit_log rows older than p_before (oldest first), which must be at '
    'least audit_log_min_retention_secs ago; returns how many. Unaudited: its callers audit.';

-- Retention for the audit log: delete up to p_limit rows older than p_before
-- (_delete_audit_rows, with its floor), say how many, and leave an audit row
-- of the prune (the cutoff, the count, and who: its actor). Call it again
-- until it returns 0.
--
-- Security definer, so the listener's maintenance may prune without DELETE on
-- audit_log; operators and users may not call it (99_access.sql).
-- Raises: CE422 a cutoff inside the retention floor, or p_limit below 1.
create or replace function prune_audit_log(p_before timestamptz, p_limit integer default 10000)
returns integer
language plpgsql
security definer
as $$
declare
    v_deleted constant integer := _delete_audit_rows(p_before, p_limit);
begin
    if v_deleted > 0 then
        insert into audit_log (entity, entity_key, action, detail)
        values ('audit_log', 'retention', 'prune',
                jsonb_build_object('before', p_before, 'deleted', v_deleted, 'limit', p_limit));
    end if;
    return v_deleted;
end;
$$;

comment on function prune_audit_log(timestamptz, integer) is
    'Delete up to p_limit audit_log rows older than p_before (oldest first), which must be at '
    'least audit_log_min_retention_secs ago, and audit the prune; returns how many. The only way '
    'rows leave the append-only log. CE422 for a cutoff inside the floor.';
