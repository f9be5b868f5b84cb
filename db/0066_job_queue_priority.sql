-- job_queue shows each live job's priority and fairness key (appended, in
-- functions/90_views.sql). stuck_jobs selects job_queue's `q.*`, so the new
-- columns would land before stuck_jobs.reason, which CREATE OR REPLACE VIEW
-- cannot do: stuck_jobs is dropped here, without cascade (a view an operator
-- built on it makes this fail, naming it), and functions/ recreates it. On a
-- fresh install the views do not exist yet when migrations run.

set local search_path = ceaseless, pg_catalog, public;

drop view if exists stuck_jobs;
