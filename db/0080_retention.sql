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

-- The indexes prune() reads by are built concurrently by 0081_retention_indexes.sql.
