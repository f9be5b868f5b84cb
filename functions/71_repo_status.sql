-- Tracked repositories: the operator's view of them.
--
-- Called by: operators and users (psql, the CLI's `repo list|show`).
-- Guarantees: read-only; security_invoker, so a user role sees only its own
-- repos and counts only its own jobs (row-level security of the caller);
-- holds no credential (tracked_repo stores none).

set local search_path = ceaseless, pg_catalog, pg_temp;

create or replace view repo_status with (security_invoker = true) as
select r.id,
       r.user_id as owner_role,
       r.forge,
       r.owner,
       r.repo,
       r.api_url,
       r.enabled,
       r.last_polled_at,
       r.next_poll_at,
       -- Quiet now: a due repo that is quiet waits for its window to end,
       -- which is why next_poll_at may lie in the past.
       _repo_quiet_at(r, now()) as quiet_now,
       case when r.quiet_from is not null
            then format('%s-%s %s', r.quiet_from, r.quiet_until, r.quiet_timezone)
       end as quiet_window,
       -- The interval used, after the floor, next to the one asked for: a
       -- difference means forge_min_interval_secs overrides the row.
       extract(epoch from _repo_interval(r))::integer as interval_used_secs,
       r.interval_seconds as interval_asked_secs,
       r.last_error,
       r.last_error_at,
       coalesce(live.n, 0) as live_jobs,
       r.discover_label,
       r.plan_label,
       r.implement_label,
       r.allowed_authors,
       r.tracking_issue,
       -- false: polled, cloned and written to without the listener's forge
       -- tokens until an operator allows them (db/0030).
       r.tokens_allowed
from tracked_repo r
-- job_live_issue_idx (forge, owner, repo, number) where live: a prefix probe.
left join lateral (
    select count(*)::integer as n from job j
    where j.forge = r.forge and j.owner = r.owner and j.repo = r.repo
      and j.state in ('pending', 'claimed', 'running')
) live on true;

comment on view repo_status is
    'One row per tracked repo: last and next poll, whether it is quiet now, the interval used '
    '(clamped to forge_min_interval_secs) and asked, the last error, its live jobs, and whether '
    'the listener''s forge tokens may serve it.';
