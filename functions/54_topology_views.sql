-- The per-node view of topology runs.
--
-- Called by: operators and users in psql, `ceaseless run show`, dashboards.
-- Guarantees: read-only; security_invoker, so a user role sees only the nodes
-- of its own runs (the row-level security of topology_nodes, topology_runs,
-- job and approvals applies to the caller, not to the view's owner); column
-- names are a stable interface, changed only as 90_views.sql says.

set local search_path = ceaseless, pg_catalog, pg_temp;

create or replace view topology_node_status with (security_invoker = true) as
select n.topology_run_id as run_id,
       r.loop_id,
       r.iteration,
       n.node_id as node,
       n.agent,
       n.gate,
       n.state,
       n.upstream_left,
       n.job_id,
       j.state as job_state,
       j.attempts,
       n.started_at,
       n.finished_at,
       -- Until now for a node still running, so a stuck node shows its age.
       round(extract(epoch from coalesce(n.finished_at, now()) - n.started_at)::numeric, 3)
           as seconds,
       -- A preview: the whole output is topology_nodes.output.
       case when char_length(n.output) > 500 then left(n.output, 500) || '…'
            else n.output end as output_preview,
       n.error,
       a.id as approval_id,
       coalesce(a.decision, case when a.id is not null then 'pending' end) as approval_decision,
       a.decided_by,
       a.decided_at,
       a.expires_at as approval_expires_at
from topology_nodes n
join topology_runs r on r.id = n.topology_run_id
left join job j on j.id = n.job_id
left join approvals a on a.topology_run_id = n.topology_run_id and a.node_id = n.node_id;

comment on view topology_node_status is
    'One row per node of every topology run the caller may see: its state and upstreams left, '
    'its job''s state and attempts, timings, an output preview, the error, and its approval.';
