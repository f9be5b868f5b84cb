-- Validate the skip_reason constraint 0010 added NOT VALID.
--
-- A transaction of its own: VALIDATE CONSTRAINT takes a SHARE UPDATE
-- EXCLUSIVE lock, which lets fires and finishes go on while it reads
-- routine_runs; in 0010's transaction it would have run under the ACCESS
-- EXCLUSIVE lock of the DROP CONSTRAINT.

set local search_path = ceaseless, pg_catalog, public;

alter table routine_runs validate constraint skip_reason_known;
