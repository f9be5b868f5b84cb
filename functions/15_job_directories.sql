-- Which jobs' working directories may go. A listener gives each job a
-- directory of its own under its workspace root (listener/producer/workdirs.py)
-- and keeps it across the job's attempts, so that a retry, or a resumed
-- session, finds what the previous attempt left; it asks here when to stop.
--
-- Called by: listeners, for the directories they find on disk and for the jobs
-- whose results they have just recorded.
-- Guarantees: reads only, takes no row lock; a job that can still run
-- (pending, claimed, running, blocked) is never named, and neither is an id
-- this database does not know: a root may be shared with another database's
-- listeners, whose jobs are theirs to judge.

set local search_path = ceaseless, pg_catalog, pg_temp;

-- Of p_ids, the jobs that will not run again: delivered, failed, abandoned or
-- cancelled. A failed job that retry_job brings back later starts in a fresh
-- directory.
create or replace function ended_jobs(p_ids uuid[])
returns setof uuid
language sql
stable
set search_path = pg_catalog, ceaseless, pg_temp
as $$
    -- A probe by key per asked id (the batch is the outer side).
    select j.id
    from unnest(p_ids) as asked (id)
    join job j on j.id = asked.id
    where j.state in ('delivered', 'failed', 'abandoned', 'cancelled');
$$;

comment on function ended_jobs(uuid[]) is
    'Of p_ids, the jobs of this database that will not run again (delivered, failed, '
    'abandoned, cancelled): listeners remove their working directories.';
