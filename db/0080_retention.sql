-- Retention: finished rows are kept for a period per kind (settings) and then
-- pruned in bounded batches, oldest first, by prune() (functions/96_retention.sql).
-- The settings say how long; the indexes let each kind's batch be read oldest
-- first, and let each delete find the rows that refer to the deleted ones
-- without reading whole tables.

set local search_path = ceaseless, pg_catalog, public;

-- ---------------------------------------------------------------------------
-- How long each kind of finished row is kept, in seconds; 0 keeps it forever.
-- ---------------------------------------------------------------------------
insert into settings (key, value, description) values
    ('retention_jobs_secs', '2592000',
     'Finished jobs (delivered, failed, abandoned, cancelled) and their agent runs are pruned '
     'this many seconds after they finished; 0 keeps them forever. Default 30 days.'),
    ('retention_routine_runs_secs', '2592000',
     'Finished routine runs are pruned this many seconds after they completed (each routine '
     'keeps its latest successful run); 0 keeps them forever. Default 30 days.'),
    ('retention_topology_runs_secs', '2592000',
     'Finished topology runs (with their nodes and approvals) are pruned this many seconds after '
     'they finished (each loop keeps its latest finished iteration); 0 keeps them forever. '
     'Default 30 days.'),
    ('retention_events_secs', '604800',
     'Events are pruned this many seconds after they were inserted; 0 keeps them forever. '
     'Default 7 days.'),
    ('retention_notifications_secs', '604800',
     'Delivered notifications are pruned this many seconds after delivery; 0 keeps them '
     'forever. Default 7 days.'),
    ('retention_late_results_secs', '2592000',
     'Late results are pruned this many seconds after they arrived; 0 keeps them forever. '
     'Default 30 days.'),
    ('retention_audit_log_secs', '7776000',
     'Audit rows are pruned this many seconds after they were written, never inside '
     'audit_log_min_retention_secs; 0 keeps them forever. Default 90 days.'),
    ('prune_interval_secs', '3600',
     'How often one listener prunes what is past retention (prune()). Default an hour.')
on conflict (key) do nothing;

-- ---------------------------------------------------------------------------
-- Oldest first, by the moment each kind's retention counts from. Partial: the
-- live rows a prune never takes are not in them.
-- ---------------------------------------------------------------------------
create index job_finished_idx on job (finished_at)
    where state in ('delivered', 'failed', 'abandoned', 'cancelled');
create index routine_runs_completed_idx on routine_runs (completed_at)
    where completed_at is not null;
create index topology_runs_finished_idx on topology_runs (finished_at)
    where finished_at is not null;
create index events_created_idx on events (created_at);
create index notifications_delivered_idx on notifications (delivered_at)
    where status = 'delivered';

-- ---------------------------------------------------------------------------
-- The referring side of foreign keys with no index: deleting a job checks
-- routine_runs.job_id (no action) and clears forge_child_issue.implement_job_id
-- (set null); deleting a topology run clears topology_runs.parent_run_id and
-- loops.last_run_id. Without these each deleted row reads the whole table.
-- ---------------------------------------------------------------------------
create index routine_runs_job_idx on routine_runs (job_id) where job_id is not null;
create index forge_child_issue_implement_idx on forge_child_issue (implement_job_id)
    where implement_job_id is not null;
create index topology_runs_parent_idx on topology_runs (parent_run_id)
    where parent_run_id is not null;
create index loops_last_run_idx on loops (last_run_id) where last_run_id is not null;
