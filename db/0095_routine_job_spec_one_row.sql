-- The job spec of a routine run is one row of assignments
-- (functions/42_routine_firing.sql), no longer a set-returning query: the
-- function is made again with its new result type.

set local search_path = ceaseless, pg_catalog, public;

drop function if exists _routine_job_spec(routines, text);
