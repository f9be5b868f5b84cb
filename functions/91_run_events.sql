-- Run and loop events: the audit trail of a topology run or a loop, read as
-- a stream of small events, and the snapshot a late follower starts from.
--
-- Called by: the listener's SSE observer (listener/web/observer.py, GET
-- /runs/{id}/events and GET /loops/{id}/events); operators in psql who want a
-- run's history as a follower sees it.
-- Guarantees: read-only, and as the caller (the observer reads as the
-- listener; audit_log is beyond a user role). An event's id is its audit_log
-- id, so "the events after id X" resumes a stream (SSE Last-Event-ID) where it
-- stopped. A run's events come in commit order: every change to a run, its
-- nodes and its approvals is written under the run's row lock (the lock
-- order of 51_topology_runs.sql), so the run's audit rows commit in id order
-- and nothing can later appear below an id already read. A snapshot and the
-- id it is current to are read by one statement, so the changes after it are
-- exactly the events after that id. Event data are small: ids, states,
-- times, errors and notes as the audit rows keep them (cut to 500
-- characters); never a prompt, an output, or a webhook credential.
--
-- Event names: run, node, approval (both streams), loop (the loop stream).

-- Run statuses after which nothing of the run moves again.
create or replace function _run_status_final(p_status text)
returns boolean
language sql immutable
as $$
    select p_status in ('succeeded', 'failed', 'cancelled', 'skipped');
$$;

comment on function _run_status_final(text) is
    'True for the statuses a topology run never leaves (succeeded, failed, cancelled, skipped): '
    'the run stream of the SSE observer ends there.';

-- The event name and data of one audit row of a run, node, approval or loop.
create or replace function _observer_event(p_row audit_log)
returns table (event text, data jsonb)
language sql stable
as $$
    select case p_row.entity
               when 'topology_run' then 'run'
               when 'topology_node' then 'node'
               else p_row.entity
           end,
           jsonb_strip_nulls(
               case p_row.entity
                   when 'topology_run' then jsonb_build_object(
                       'run_id', p_row.entity_id,
                       'status', p_row.new_state,
                       'old_status', p_row.old_state,
                       'loop_id', p_row.detail -> 'loop_id',
                       'iteration', p_row.detail -> 'iteration',
                       'trigger_type', p_row.detail -> 'trigger_type',
                       'skip_reason', p_row.detail -> 'skip_reason',
                       'error', p_row.detail -> 'error')
                   when 'topology_node' then jsonb_build_object(
                       'run_id', p_row.entity_id,
                       'node', p_row.detail -> 'node',
                       'status', p_row.new_state,
                       'old_status', p_row.old_state,
                       'job_id', p_row.detail -> 'job_id',
                       'error', p_row.detail -> 'error')
                   when 'approval' then jsonb_build_object(
                       'approval_id', p_row.entity_id,
                       'run_id', p_row.detail -> 'run_id',
                       'node', p_row.detail -> 'node',
                       'status', p_row.new_state,
                       'old_status', p_row.old_state,
                       'decided_by', p_row.detail -> 'decided_by',
                       'note', p_row.detail -> 'note',
                       'expires_at', p_row.detail -> 'expires_at')
                   else jsonb_build_object(
                       'loop_id', p_row.entity_id,
                       'action', p_row.action,
                       'status', p_row.new_state,
                       'old_status', p_row.old_state,
                       'stopped_reason', p_row.detail -> 'stopped_reason',
                       'webhook', p_row.detail -> 'webhook',
                       'last_error', p_row.detail -> 'last_error')
               end
               || jsonb_build_object('at', p_row.at, 'actor', p_row.actor)
               -- The listener's worker id, when a listener acted.
               || jsonb_strip_nulls(jsonb_build_object('worker', p_row.worker)));
$$;

comment on function _observer_event(audit_log) is
    'The SSE event of one audit row: its name (run, node, approval, loop) and its data (ids, '
    'states, the time, the actor and a listener''s worker id; bounded errors and notes).';

-- Events of one run after p_after, in id order, at most p_limit (up to
-- 5000). `last` marks the run's final status: a follower reads on until a
-- read returns nothing, since the transaction that ended the run may have
-- moved its nodes after it, and then stops.
create or replace function run_events(p_run_id uuid, p_after bigint default 0,
                                      p_limit integer default 500)
returns table (id bigint, event text, data jsonb, last boolean)
language sql stable
as $$
    with rows as (
        -- The run's rows and its nodes': audit_log_entity_idx, one range each.
        select a.id, a as row
        from audit_log a
        where a.entity in ('topology_run', 'topology_node')
          and a.entity_id = p_run_id
          and a.id > p_after
        union all
        -- Its approvals' rows: the approvals by (topology_run_id, node_id),
        -- then audit_log_entity_idx for each (a run has few gates).
        select a.id, a
        from approvals ap
        join audit_log a on a.entity = 'approval' and a.entity_id = ap.id and a.id > p_after
        where ap.topology_run_id = p_run_id
    )
    select r.id, e.event, e.data,
           (r.row).entity = 'topology_run' and _run_status_final((r.row).new_state)
    from rows r
    cross join lateral _observer_event(r.row) e
    order by r.id
    limit least(greatest(p_limit, 1), 5000);
$$;

comment on function run_events(uuid, bigint, integer) is
    'The events of a topology run after audit id p_after, in order (at most p_limit, up to '
    '5000): run, node and approval changes with ids, states and times; `last` marks the final '
    'status. What GET /runs/{id}/events streams.';

-- A run as it stands, and the audit id it is current to; NULL when there is
-- no such run.
create or replace function run_snapshot(p_run_id uuid)
returns jsonb
language sql stable
as $$
    select jsonb_build_object(
        'run', jsonb_strip_nulls(jsonb_build_object(
            'run_id', r.id, 'status', r.status, 'loop_id', r.loop_id,
            'iteration', r.iteration, 'parent_run_id', r.parent_run_id,
            'trigger_type', r.trigger_type, 'skip_reason', r.skip_reason,
            'error', left(r.error, 500), 'created_at', r.created_at,
            'started_at', r.started_at, 'finished_at', r.finished_at)),
        'nodes', coalesce((
            select jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
                       'node', n.node_id, 'agent', n.agent, 'gate', n.gate,
                       'status', n.state, 'upstream_left', n.upstream_left,
                       'job_id', n.job_id, 'error', left(n.error, 500),
                       'started_at', n.started_at, 'finished_at', n.finished_at))
                   order by g.at)
            from topology_nodes n
            left join _topology_graph_order(r.graph) g on g.node_id = n.node_id
            where n.topology_run_id = r.id), '[]'::jsonb),
        -- Only the open ones: a decided approval shows in its node's state.
        'approvals', coalesce((
            select jsonb_agg(jsonb_strip_nulls(jsonb_build_object(
                       'approval_id', ap.id, 'node', ap.node_id, 'status', 'pending',
                       'requested_at', ap.requested_at, 'expires_at', ap.expires_at))
                   order by ap.requested_at, ap.node_id)
            from approvals ap
            where ap.topology_run_id = r.id and ap.decision is null), '[]'::jsonb),
        'final', _run_status_final(r.status),
        'last_event_id', greatest(
            (select max(a.id) from audit_log a
             where a.entity in ('topology_run', 'topology_node') and a.entity_id = r.id),
            (select max(a.id) from approvals ap
             join audit_log a on a.entity = 'approval' and a.entity_id = ap.id
             where ap.topology_run_id = r.id),
            0))
    from topology_runs r
    where r.id = p_run_id;
$$;

comment on function run_snapshot(uuid) is
    'A topology run as it stands (the run, every node, the open approvals, whether it is final) '
    'and last_event_id, the audit id it is current to: what a new follower of GET '
    '/runs/{id}/events receives first. NULL when there is no such run.';

-- Events of one loop after p_after, in id order: its own changes (enabled,
-- disabled, stopped, deleted), its runs' (iterations and skipped fires), and
-- the nodes' and approvals' of the runs that can have moved since p_after.
-- `last` marks the loop's deletion.
create or replace function loop_events(p_loop_id uuid, p_after bigint default 0,
                                       p_limit integer default 500)
returns table (id bigint, event text, data jsonb, last boolean)
language sql stable
as $$
    with run_rows as (
        -- The loop's run rows since p_after: audit_log_run_loop_idx.
        select a.id, a as row
        from audit_log a
        where a.entity = 'topology_run'
          and a.detail ->> 'loop_id' = p_loop_id::text
          and a.id > p_after
    ),
    moving as (
        -- A node row after p_after belongs to a run that was live when it was
        -- written: the live iteration now (topology_runs_one_live_iteration_idx),
        -- or one that has ended since, whose final row is in run_rows.
        select (r.row).entity_id as run_id from run_rows r
        union
        select t.id from topology_runs t
        where t.loop_id = p_loop_id and t.status in ('pending', 'running', 'awaiting_approval')
    ),
    rows as (
        select r.id, r.row from run_rows r
        union all
        select a.id, a
        from moving m
        join audit_log a on a.entity = 'topology_node' and a.entity_id = m.run_id
                        and a.id > p_after
        union all
        select a.id, a
        from moving m
        join approvals ap on ap.topology_run_id = m.run_id
        join audit_log a on a.entity = 'approval' and a.entity_id = ap.id and a.id > p_after
        union all
        -- The loop's own rows: audit_log_entity_idx.
        select a.id, a
        from audit_log a
        where a.entity = 'loop' and a.entity_id = p_loop_id and a.id > p_after
    )
    select r.id, e.event, e.data, (r.row).entity = 'loop' and (r.row).action = 'delete'
    from rows r
    cross join lateral _observer_event(r.row) e
    order by r.id
    limit least(greatest(p_limit, 1), 5000);
$$;

comment on function loop_events(uuid, bigint, integer) is
    'The events of a loop after audit id p_after, in order (at most p_limit, up to 5000): its '
    'own changes (enabled, disabled, stopped, deleted), its iterations'' and skipped fires'' run '
    'changes and their nodes'' and approvals''; `last` marks its deletion. What GET '
    '/loops/{id}/events streams.';

-- A loop as loop_status shows it, its latest iteration as run_snapshot shows
-- it, and the audit id both are current to; NULL when there is no such loop.
create or replace function loop_snapshot(p_loop_id uuid)
returns jsonb
language sql stable
as $$
    with latest as (
        select run_snapshot(t.id) as snap
        from topology_runs t
        where t.loop_id = p_loop_id and t.iteration is not null
        order by t.iteration desc
        limit 1
    )
    select jsonb_build_object(
        'loop', jsonb_strip_nulls(to_jsonb(s) - 'id' || jsonb_build_object('loop_id', s.id)),
        'run', (select snap from latest),
        'final', false,
        'last_event_id', greatest(
            (select max(a.id) from audit_log a
             where a.entity = 'loop' and a.entity_id = s.id),
            (select max(a.id) from audit_log a
             where a.entity = 'topology_run' and a.detail ->> 'loop_id' = s.id::text),
            (select (snap ->> 'last_event_id')::bigint from latest),
            0))
    from loop_status s
    where s.id = p_loop_id;
$$;

comment on function loop_snapshot(uuid) is
    'A loop as loop_status shows it (never its webhook credential), its latest iteration as '
    'run_snapshot shows it, and last_event_id, the audit id both are current to: what a new '
    'follower of GET /loops/{id}/events receives first. NULL when there is no such loop.';
