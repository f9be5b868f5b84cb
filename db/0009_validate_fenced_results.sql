-- Validate the constraints 0008 added NOT VALID.
--
-- A transaction of its own: VALIDATE CONSTRAINT takes a SHARE UPDATE
-- EXCLUSIVE lock, which lets claims, finishes and inserts go on while it
-- reads the table; in 0008's transaction it would have run under the ACCESS
-- EXCLUSIVE lock of the ALTER TABLE ... ADD COLUMN.

set local search_path = ceaseless, pg_catalog, public;

-- Runs ended before 0008 have no ended_by; those are NULL and pass.
alter table agent_run validate constraint ended_by_known;
alter table agent_run validate constraint ended_by_only_when_finished;

-- Ids stored before the rule existed that break it cannot be resumed safely;
-- forgetting them costs one fresh session.
update agent_run set session_id = null
where session_id !~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$';
update job set resume_session_id = null
where resume_session_id !~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$';

alter table agent_run validate constraint session_id_plausible;
alter table job validate constraint resume_session_id_plausible;
