-- Autovacuum and page room for the tables every job writes, chosen by
-- measurement (docs/performance.md, "Running for months").
--
-- PostgreSQL's defaults vacuum a table once a fifth of it is dead: on a job
-- table of ten million rows, two million dead row versions, and every claim
-- walks past the dead entries of job_claimable_idx until then. A drain of a
-- million jobs left 1.7 million dead versions in job and 0.85 million in
-- agent_run, never vacuumed before it ended. Here a vacuum starts after 1 %
-- of the table (at least 1,000 rows) and runs unthrottled (cost_delay 0): a
-- queue's tables are worth the I/O. Inserts count too (the insert scale
-- factor), so a table that only grows (audit_log) is vacuumed for its
-- visibility map, which index-only scans read.
--
-- The small counter rows updated on every run (routine_run_shards,
-- metric_totals, lane_turns, owner_turns) change no indexed column: with
-- room left on their pages (fillfactor) the update is HOT, written beside the
-- old version without touching an index.
--
-- ALTER TABLE … SET of these parameters takes SHARE UPDATE EXCLUSIVE, which
-- no reader or writer of the table conflicts with.

set local search_path = ceaseless, pg_catalog, public;

alter table job set (
    autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0);
alter table agent_run set (
    autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0);
alter table audit_log set (
    autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_vacuum_cost_delay = 0);
alter table notifications set (
    autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);
alter table metric_deltas set (
    autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0);
alter table routine_run_shards set (fillfactor = 50);
alter table metric_totals set (fillfactor = 50);
alter table lane_turns set (fillfactor = 50);
alter table owner_turns set (fillfactor = 50);
