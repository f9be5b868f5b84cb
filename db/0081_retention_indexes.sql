-- The indexes retention reads by (prune(), functions/96_retention.sql),
-- built CONCURRENTLY: on a database that has run for months the job and
-- agent-run tables are the largest and the hottest, and a plain CREATE
-- INDEX would hold their writers (every claim and finish) for the whole
-- build. The runner applies this file statement by statement, outside a
-- transaction (listener/database/migrate.py).

-- ---------------------------------------------------------------------------
-- Oldest first, by the moment each kind's retention counts from. Partial: the
-- live rows a prune never takes are not in them. Jobs need none: they are
-- read by job_created_idx (functions/96_retention.sql, _prunable_jobs).
-- ---------------------------------------------------------------------------
create index concurrently if not exists routine_runs_completed_idx
    on routine_runs (completed_at)
    where completed_at is not null;
create index concurrently if not exists topology_runs_finished_idx
    on topology_runs (finished_at)
    where finished_at is not null;
create index concurrently if not exists events_created_idx
    on events (created_at);
create index concurrently if not exists notifications_delivered_idx
    on notifications (delivered_at)
    where status = 'delivered';

-- ---------------------------------------------------------------------------
-- The referring side of foreign keys with no index: deleting a job checks
-- routine_runs.job_id (no action) and clears forge_child_issue.implement_job_id
-- (set null); deleting a topology run clears topology_runs.parent_run_id and
-- loops.last_run_id. Without these each deleted row reads the whole table.
-- ---------------------------------------------------------------------------
create index concurrently if not exists routine_runs_job_idx
    on routine_runs (job_id)
    where job_id is not null;
create index concurrently if not exists forge_child_issue_implement_idx
    on forge_child_issue (implement_job_id)
    where implement_job_id is not null;
create index concurrently if not exists topology_runs_parent_idx
    on topology_runs (parent_run_id)
    where parent_run_id is not null;
create index concurrently if not exists loops_last_run_idx
    on loops (last_run_id)
    where last_run_id is not null;
