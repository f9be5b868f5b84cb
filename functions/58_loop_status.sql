-- Loops: the operator's view of them.
--
-- Called by: operators and users (psql, the CLI's `loop list|show`).
-- Guarantees: read-only; security_invoker, so a user role sees only its own
-- loops and their runs (row-level security of the caller); never shows the
-- webhook token or signing key, only whether the webhook trigger is on.

set local search_path = ceaseless, pg_catalog, pg_temp;

create or replace view loop_status with (security_invoker = true) as
select l.id,
       l.title,
       l.user_id as owner,
       l.enabled,
       l.triggers ->> 'cron' as cron,
       l.triggers ->> 'timezone' as timezone,
       coalesce((l.triggers ->> 'on_completion')::boolean, false) as on_completion,
       l.webhook_token is not null as webhook,
       l.repeat_policy,
       -- The iteration the policy counts from: set when a stopped loop is
       -- re-enabled, so an operator can see why it has not stopped again.
       l.policy_from_iteration,
       latest.iteration as current_iteration,
       live.id as live_run_id,
       live.status as live_run_status,
       done.id as last_run_id,
       done.status as last_run_status,
       done.finished_at as last_run_finished_at,
       l.next_fire_at,
       l.stopped_reason,
       l.stopped_at,
       coalesce(skips.n, 0) as skipped_fires,
       skips.last_reason as last_skip_reason,
       skips.last_at as last_skipped_at,
       l.last_error
from loops l
-- topology_runs_loop_idx (loop_id, iteration desc): one entry each.
left join lateral (
    select r.iteration from topology_runs r
    where r.loop_id = l.id and r.iteration is not null
    order by r.iteration desc limit 1
) latest on true
-- At most one (topology_runs_one_live_iteration_idx).
left join lateral (
    select r.id, r.status from topology_runs r
    where r.loop_id = l.id and r.status in ('pending', 'running', 'awaiting_approval')
) live on true
left join lateral (
    select r.id, r.status, r.finished_at from topology_runs r
    where r.loop_id = l.id and r.iteration is not null
      and r.status in ('succeeded', 'failed', 'cancelled')
    order by r.iteration desc limit 1
) done on true
-- topology_runs_loop_skipped_idx holds only skipped runs.
left join lateral (
    select count(*) as n,
           (array_agg(r.skip_reason order by r.created_at desc))[1] as last_reason,
           max(r.created_at) as last_at
    from topology_runs r
    where r.loop_id = l.id and r.status = 'skipped'
) skips on true;

comment on view loop_status is
    'One row per loop: title, owner, enabled, triggers (cron, timezone, on_completion, webhook on '
    'or off — never its credential), repeat policy, current iteration, the live run, the last '
    'finished run, next fire, why and when it stopped, skipped fires (count, last reason) and the '
    'last error.';
