-- Lane pauses in a table of their own, and the time of each claim.
--
-- A provider rate limit pauses its whole lane (finish_runs). Until now the
-- pause was written onto the lane's row in `agents`, and a change to an agents
-- row is a configuration change: its row trigger writes a copy of the row to
-- audit_log and sends NOTIFY ceaseless_config. So every rate limit made every
-- listener reload its registry, and each one wrote an audit row, although no
-- configuration had changed. A pause is state, not configuration: it now lives
-- in lane_pauses, which has no trigger, and agents.paused_until is gone.
--
-- stuck_jobs called a job "claimed but never started" when it had been
-- *created* more than five minutes ago, however recently it was claimed:
-- nothing recorded when the claim was taken (claim_expires_at moves with every
-- heartbeat). job.claimed_at records it.
--
-- The views that read agents.paused_until (governor_usage, stuck_jobs) are
-- dropped without cascade so the column can go; functions/90_views.sql, which
-- is re-applied right after this file, recreates them. Dropping stuck_jobs also
-- lets job_queue gain its claimed_at column (stuck_jobs selects job_queue's
-- `q.*`, see the rule at the head of 90_views.sql). A view of your own built
-- on either makes this migration fail and name it, and nothing changes:
-- drop it, migrate, then recreate it.

set local search_path = ceaseless, pg_catalog, public;

create table lane_pauses (
    -- One pause per lane. on update cascade: a renamed lane stays paused.
    -- on delete cascade: a pause is no history worth keeping once its lane is
    -- gone, and must not stop the lane from being deleted.
    agent text primary key references agents (name) on update cascade on delete cascade,
    -- Claims skip the lane until then. A pause that has passed is no pause:
    -- every reader compares it with the time, so a passed row needs no sweep,
    -- and the lane's next pause overwrites it.
    paused_until timestamptz not null,
    -- Shown by governor_usage and stuck_jobs: 'rate limit' from finish_runs,
    -- or what an operator who paused the lane by hand wrote.
    reason text not null,
    updated_at timestamptz not null default now(),

    -- An empty or blank reason leaves "why is this lane not running?"
    -- unanswered. Blank is any Unicode whitespace, as for _is_blank
    -- (functions/00_helpers.sql), spelled out: migrations run before the
    -- functions exist.
    constraint reason_not_blank check (reason ~ '[^\u0009-\u000d\u001c-\u0020\u0085\u00a0\u1680\u180e\u2000-\u200b\u2028\u2029\u202f\u205f\u2060\u3000\ufeff]')
);

comment on table lane_pauses is
    'Agent lanes paused until a time (a provider rate limit, or an operator): claim_jobs skips '
    'them until then. Not configuration: a change here audits nothing and NOTIFYs no listener. '
    'Delete the row to lift a pause.';

-- Only finish_runs ever wrote agents.paused_until, for a rate limit.
insert into lane_pauses (agent, paused_until, reason, updated_at)
select a.name, a.paused_until, 'rate limit', a.updated_at
from agents a
where a.paused_until is not null;

-- If exists: a fresh install applies every migration before functions/ has
-- created any view.
drop view if exists stuck_jobs;
drop view if exists governor_usage;

alter table agents drop column paused_until;

alter table job add column claimed_at timestamptz;

comment on column job.claimed_at is
    'When the job was last claimed (claim_jobs). Read while the job is claimed or running; '
    'claim_expires_at cannot say it, since every heartbeat moves it.';

-- Jobs held while this migration runs. A running job's open run was opened by
-- the claiming statement, so its start is the claim; a claimed one was last
-- written by its claim (heartbeats move only claim_expires_at). No live job
-- is left without a claim time for stuck_jobs to measure.
update job j
set claimed_at = coalesce((select r.started_at
                           from agent_run r
                           where r.job_id = j.id and r.finished_at is null),
                          j.updated_at)
where j.state in ('claimed', 'running');
