-- The forge pipeline: the operator's view of the lane's jobs, per repo and
-- issue.
--
-- Called by: operators and users (psql, `ceaseless repo show`).
-- Guarantees: read-only; security_invoker, so a user role sees the jobs of
-- its own repos only.

set local search_path = ceaseless, pg_catalog, pg_temp;

create or replace view forge_pipeline with (security_invoker = true) as
select r.id as repo_id,
       j.user_id as owner_role,
       j.forge,
       j.owner,
       j.repo,
       j.number,
       coalesce(i.title, j.payload #>> '{forge,title}') as title,
       j.kind,
       j.id as job_id,
       j.state,
       j.agent,
       j.attempts,
       j.last_error,
       j.parent_job_id,
       p.number as parent_number,
       pr.pr_number,
       pr.pr_url,
       -- A plan's children: asked for, and created on the forge so far.
       ch.asked as children_asked,
       ch.created as children_created,
       j.labels_synced_label,
       j.labels_synced_at,
       j.labels_error,
       j.created_at,
       j.finished_at
from job j
left join tracked_repo r on r.forge = j.forge and r.owner = j.owner and r.repo = j.repo
left join forge_issue i on i.repo_id = r.id and i.number = j.number
left join job p on p.id = j.parent_job_id
left join lateral (
    select ar.pr_number, ar.pr_url from agent_run ar
    where ar.job_id = j.id and ar.pr_number is not null
    order by ar.started_at desc limit 1
) pr on true
left join lateral (
    select count(*)::integer as asked, count(c.number)::integer as created
    from forge_child_issue c where c.plan_job_id = j.id
) ch on j.kind = 'plan'
where j.forge is not null;

comment on view forge_pipeline is
    'One row per forge job: its repo and issue, kind, state, lane, parent, pull request, '
    'children (plans), mirrored label; newest last. Filter by owner, repo, number.';
