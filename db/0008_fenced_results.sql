-- Fenced results and resumable sessions.
--
-- A listener cut off from the database (a partition, a hung server) cannot
-- extend its leases; another listener then expires them and runs the jobs
-- again. When the first one's results finally arrive they describe runs that
-- are already closed. Before this migration finish_runs merged them into the
-- closed rows ("only gains details"), so a run closed as lease_expired could
-- end up with the exit status and final message of an agent whose work was
-- thrown away — and nothing said the job had run twice. Now a run remembers
-- who ended it, a late result is kept apart in `late_results`, and the closed
-- run is never rewritten.
--
-- Every constraint on a table that already holds rows is added NOT VALID:
-- it holds for every new write at once, and 0009 validates the old rows in a
-- transaction of their own, under a lock that lets claims and finishes go on
-- (a CHECK added plainly would scan agent_run under an ACCESS EXCLUSIVE lock
-- for as long as the table is big).

set local search_path = ceaseless, pg_catalog, public;

-- Who ended the run. Without it a repeated finish (the reply to the first one
-- was lost with its connection) and a late finish (someone else closed the
-- run meanwhile) look alike: both find the run closed. The first must be
-- answered "recorded", the second must be kept apart.
alter table agent_run add column ended_by text;

comment on column agent_run.ended_by is
    'Who ended the run: agent (its listener reported the result), lease_expiry (the lease '
    'passed and a sweep closed it), release (its listener shut down and gave the job back) or '
    'cancel (cancel_job). NULL while open, and on runs ended before this column existed.';

-- An unknown value would make "who ended it" unanswerable.
alter table agent_run add constraint ended_by_known
    check (ended_by in ('agent', 'lease_expiry', 'release', 'cancel')) not valid;

-- An open run ended by someone is a contradiction the governor would count.
alter table agent_run add constraint ended_by_only_when_finished
    check (ended_by is null or finished_at is not null) not valid;

-- Session ids come from agents' output (Claude Code's init line) and go back
-- onto an agent's command line (`--resume <id>`): an id that starts with a
-- dash would be read as a flag, and one with spaces or newlines is not an id.
-- The functions that store them drop implausible ones (one agent's odd output
-- must not fail a batch of others' results); these CHECKs refuse the rest,
-- including an INSERT INTO job that names one.
alter table agent_run add constraint session_id_plausible
    check (session_id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$') not valid;
alter table job add constraint resume_session_id_plausible
    check (resume_session_id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$') not valid;

-- Results that arrived for runs no longer their reporter's. Append-only, like
-- the audit log; the result is kept whole (each text bounded by the same
-- limits as agent_run's) so an operator can see what the second agent did.
create table late_results (
    id bigint generated always as identity primary key,
    -- No foreign key: a result can name a run that does not exist (a bug,
    -- a forged report) and must still be kept rather than fail the batch.
    run_id uuid not null,
    job_id uuid,
    worker text not null,
    -- Why it was not recorded on the run, e.g. "run already ended
    -- (lease_expired, by lease_expiry)".
    reason text not null,
    result jsonb not null,
    received_at timestamptz not null default now(),

    -- A result that is not an object has no fields to show.
    constraint result_is_object check (jsonb_typeof(result) = 'object'),
    -- An empty reason says nothing about why the result was refused.
    constraint reason_not_empty check (reason <> '')
);

comment on table late_results is
    'Agent results refused because their run had already ended (lease expired, released, '
    'cancelled) or was not the reporter''s: kept apart, never written onto the closed run.';

create index late_results_run_idx on late_results (run_id);
create index late_results_received_idx on late_results (received_at desc);
