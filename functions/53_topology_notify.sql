-- NOTIFY and audit for topology runs, their nodes, approvals and loops: what
-- ceaseless_run says about them.
--
-- Called by: PostgreSQL, after each row of topology_runs, topology_nodes,
-- approvals and loops changes; each trigger audits and announces through
-- _audit_change (25_notify_audit.sql).
-- Guarantees: every status change of a run, a node or an approval, and every
-- change an operator makes to a loop, writes one audit_log row in the same
-- transaction (who: the login role, and a listener's worker id beside it;
-- when: the row's time); every status change of a
-- run, a node or an approval is announced on ceaseless_run, which the SSE
-- observer and other subscribers follow. Payloads carry ids and states only;
-- loop audit rows never carry the webhook token or signing key.
--
-- Row-level, unlike the job triggers: a run has tens of nodes, not
-- thousands, and each node's transition is its own event for a subscriber.
--
-- ceaseless_run payloads (docs/loops.md):
--   {"table": "topology_runs", "id": <run>, "status", "old_status", "loop_id"}
--   {"table": "topology_nodes", "id": <run>, "node", "status", "old_status", "job_id"}
--   {"table": "approvals", "id": <approval>, "run_id", "node", "status"}
--     status: pending | approved | rejected | expired
--   {"table": "loops", "id": <loop>, "status": "stopped" | "enabled" | "disabled",
--    "stopped_reason"}

set local search_path = ceaseless, pg_catalog, pg_temp;

create or replace function _tg_topology_runs_changed()
returns trigger
language plpgsql
set search_path = pg_catalog, ceaseless, pg_temp
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
set search_path = pg_catalog, ceaseless, pg_temp
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
set search_path = pg_catalog, ceaseless, pg_temp
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
language sql immutable
set search_path = pg_catalog, ceaseless, pg_temp
as $$
    select jsonb_strip_nulls(jsonb_build_object(
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
$$;

comment on function _loop_audit_detail(loops, loops) is
    'The audit detail of a loop change: changed configuration, the webhook credential as '
    'set / rotated / cleared (never its value), the stopped reason and the last error.';

-- Runtime bookkeeping (next_fire_at, last_run_id) is not audited: the runs
-- are. Everything else is: configuration, enabling, stopping.
create or replace function _tg_loops_changed()
returns trigger
language plpgsql
set search_path = pg_catalog, ceaseless, pg_temp
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
        perform pg_notify('ceaseless_run', jsonb_build_object(
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

create or replace trigger loops_changed
    after insert or update or delete on loops
    for each row execute function _tg_loops_changed();
