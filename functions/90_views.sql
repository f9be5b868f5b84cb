-- Operator views: the psql interface to the queue and the governor.
--
-- Called by: operators in psql, `ceaseless status`, dashboards.
-- Guarantees: read-only; column names are a stable interface (add columns,
-- never rename them); an operator's own view built on one of these survives
-- every migrate, or migrate fails naming it: nothing here is ever dropped.
--
-- The rule for changing a view (here and in notification_status, 60_):
-- - CREATE OR REPLACE VIEW can only append columns at the end, with the
--   existing ones keeping their names, types and order. That is the only
--   change to make in this file.
-- - Any other change (rename, retype, remove or reorder a column) needs a db/
--   migration that drops the old view first, WITHOUT cascade
--   (`drop view ceaseless.job_queue;`), in the same release as the new
--   definition here: a view an operator built on ours then makes the
--   migration fail loudly, naming it, instead of vanishing without a word.
--   Drop the views that depend on it (stuck_jobs on job_queue) in the same
--   migration; this file recreates them all.
-- - stuck_jobs selects job_queue's `q.*`: a column appended to job_queue lands
--   before stuck_jobs.reason, which is no append there, so that change too
--   needs the migration (dropping stuck_jobs).
-- - Never `drop … cascade`: a test refuses it anywhere in db/ or functions/.

set local search_path = ceaseless, pg_catalog, pg_temp;

create or replace view job_queue as
select j.id,
       j.kind,
       j.agent,
       j.state,
       j.attempts,
       coalesce(j.max_attempts, a.max_attempts) as max_attempts,
       j.run_after,
       j.state = 'pending' and j.run_after <= now() as due,
       j.claimed_by,
       case when j.state in ('claimed', 'running') then j.claim_expires_at - now() end
           as lease_remaining,
       now() - j.created_at as age,
       j.dedup_key,
       case when j.forge is not null
            then format('%s:%s/%s#%s', j.forge, j.owner, j.repo, j.number) end as issue,
       j.last_error,
       j.created_at,
       -- Only while held: the column keeps the time of the last claim after
       -- the job has gone back to pending.
       case when j.state in ('claimed', 'running') then j.claimed_at end as claimed_at
from job j
join agents a on a.name = j.agent
where j.state in ('pending', 'claimed', 'running');

comment on view job_queue is
    'Live jobs (pending, claimed, running): who holds each and since when, how long its lease '
    'has left, whether it is due.';

-- "Claimed but never started" counts from the claim, not from the job's
-- creation: a job that waited an hour in the queue and was claimed a second
-- ago is not stuck.
create or replace view stuck_jobs as
select q.*,
       case
           when q.state in ('claimed', 'running') and q.lease_remaining < interval '0'
               then 'lease expired, not yet swept: is any listener running?'
           when q.state = 'claimed' and q.claimed_at < now() - interval '5 minutes'
               then 'claimed but never started'
           when q.state = 'running' and r.started_at < now()
                    - make_interval(secs => a.timeout_secs + a.kill_grace_secs + 60)
               then 'running past its agent''s timeout'
           when q.due and q.run_after < now() - interval '5 minutes'
               then case when not a.enabled then 'due, but its agent is disabled'
                         when p.agent is not null
                             then format('due, but its lane is paused (%s)', p.reason)
                         else 'due for over 5 minutes: lane full or no listener' end
       end as reason
from job_queue q
join agents a on a.name = q.agent
left join lane_pauses p on p.agent = q.agent and p.paused_until > now()
left join agent_run r on r.job_id = q.id and r.finished_at is null
where (q.state in ('claimed', 'running') and q.lease_remaining < interval '0')
   or (q.state = 'claimed' and q.claimed_at < now() - interval '5 minutes')
   or (q.state = 'running' and r.started_at < now()
           - make_interval(secs => a.timeout_secs + a.kill_grace_secs + 60))
   or (q.due and q.run_after < now() - interval '5 minutes');

comment on view stuck_jobs is
    'Live jobs that should have moved by now, each with the likely reason.';

-- One row per lane, as _lane_capacity (11_lanes.sql) counts it for the claim:
-- free_slots is what claim_jobs would admit now, nothing for a lane that is
-- disabled, paused or over a budget, whatever its counts say. paused_until
-- and pause_reason are those of a pause still in force (NULL once it has
-- passed).
create or replace view governor_usage as
select a.name as agent,
       a.adapter,
       a.enabled,
       a.max_concurrent,
       l.live,
       a.window_secs,
       a.window_budget,
       l.started_in_window,
       l.free as free_slots,
       l.paused_until,
       due.n as pending_due,
       l.pause_reason,
       a.window_cost_usd,
       l.cost_in_window,
       a.window_tokens,
       l.tokens_in_window,
       l.held_by
from _lane_capacity(now(), null, true) l
join agents a on a.name = l.agent
cross join lateral (
    select count(*) as n from job j
    where j.agent = a.name and j.state = 'pending' and j.run_after <= now()
) due;

comment on view governor_usage is
    'Per agent lane: live runs against max_concurrent, starts in the rolling window against '
    'window_budget, free slots (none while disabled, paused or over a cost or token budget), '
    'the pause in force and why, due work waiting, the cost and tokens the window''s runs '
    'reported against window_cost_usd and window_tokens, and what holds the lane (held_by, '
    'as explain_job names it).';

create or replace view routine_status as
select r.id,
       r.name,
       r.user_id,
       r.enabled,
       r.trigger_type,
       r.trigger_config ->> 'schedule' as schedule,
       r.trigger_config ->> 'timezone' as timezone,
       r.next_fire_at,
       r.action_type,
       r.agent,
       last_run.status as last_status,
       last_run.started_at as last_started_at,
       r.last_run_at as last_finished_at,
       r.consecutive_failures,
       coalesce(day.runs, 0) as runs_24h,
       coalesce(day.skips, 0) as skips_24h,
       coalesce(live.running, 0) as running,
       r.last_error
from routines r
left join lateral (
    select rr.status, rr.started_at
    from routine_runs rr
    where rr.routine_id = r.id
    order by rr.started_at desc
    limit 1
) last_run on true
left join lateral (
    select count(*) filter (where rr.status <> 'skipped') as runs,
           count(*) filter (where rr.status = 'skipped') as skips
    from routine_runs rr
    where rr.routine_id = r.id and rr.started_at > now() - interval '24 hours'
) day on true
-- Every running run, however long ago it started: one running for over a day
-- is the one an operator most needs to see. idx_routine_runs_running holds
-- only running runs, so this reads nothing else.
left join lateral (
    select count(*) as running
    from routine_runs rr
    where rr.routine_id = r.id and rr.status = 'running'
) live on true;

comment on view routine_status is
    'One row per routine: trigger, schedule, next fire, last status, consecutive failures, '
    'runs and skips in the last 24 hours, and runs running now.';

-- The warning a listener's database authentication calls for (listener_reports.db_auth), or
-- NULL: without a password (trust), any process that reaches the database's socket or
-- 127.0.0.1 connects as the listener's role. The listener logs it at start and
-- listener_status shows it, in these words.
create or replace function _db_auth_warning(p_db_auth text)
returns text
language sql
immutable
set search_path = pg_catalog, ceaseless, pg_temp
as $$
    select case p_db_auth
        when 'trust' then
            'the listener''s database connection used no password (trust authentication): any '
            'process that reaches the database''s socket or 127.0.0.1, an agent included, '
            'connects as its role; require scram-sha-256 in pg_hba.conf and give the listener a '
            'password (PGPASSFILE)'
        when 'unknown' then
            'the listener''s database connection used no password (trust, or peer, ident or '
            'cert: PostgreSQL before 16 cannot say which); under trust any process that reaches '
            'the database''s socket or 127.0.0.1, an agent included, connects as its role; '
            'require scram-sha-256 in pg_hba.conf and give the listener a password (PGPASSFILE)'
    end
$$;

comment on function _db_auth_warning(text) is
    'The warning a listener''s database authentication (listener_reports.db_auth) calls for: '
    'trust, or no password on a server that cannot say why; NULL otherwise.';

-- One row per listener that holds work, is connected, or had results refused
-- in the last day: how much it holds, how close its nearest lease is to ending
-- (negative: a lease passed and waits for a sweep, the listener stopped
-- renewing), how many of its results were refused (late_results: it was
-- cut off long enough for another listener to take its jobs over), and what
-- it reported about itself at start (listener_reports): its agents' sandbox,
-- how its database connection authenticated, and a warning for each of them
-- that leaves the host open to its agents.
create or replace view listener_status as
with held as (
    -- job_claim_expiry_idx: partial on live jobs, so this reads only what is held.
    select j.claimed_by as worker,
           count(*) as held,
           count(*) filter (where j.state = 'running') as running,
           min(j.claim_expires_at) - now() as next_lease_ends_in
    from job j
    where j.state in ('claimed', 'running')
    group by j.claimed_by
),
connected as (
    -- A listener names its LISTEN session 'ceaseless listen <worker id>'.
    select distinct substr(a.application_name, length('ceaseless listen ') + 1) as worker
    from pg_stat_activity a
    where a.datname = current_database()
      and a.application_name like 'ceaseless listen %'
),
refused as (
    -- late_results_received_idx: only the last day is read.
    select l.worker, count(*) as late
    from late_results l
    where l.received_at > now() - interval '24 hours'
    group by l.worker
),
workers as (
    select worker from held
    union
    select worker from connected
    union
    select worker from refused
)
select w.worker,
       coalesce(h.held, 0) as held,
       coalesce(h.running, 0) as running,
       h.next_lease_ends_in,
       coalesce(r.late, 0) as late_results_24h,
       c.worker is not null as listening,
       rep.sandbox,
       rep.agent_user,
       rep.db_auth,
       rep.http,
       -- The rule for what to warn of, once, for `ceaseless status` and psql alike.
       array_remove(array[
           rep.isolation_warning,
           _db_auth_warning(rep.db_auth)
       ], null) as warnings
from workers w
left join held h on h.worker = w.worker
left join connected c on c.worker = w.worker
left join refused r on r.worker = w.worker
left join listener_reports rep on rep.worker = w.worker;

comment on view listener_status is
    'One row per listener holding work, listening, or with results refused in 24 h: jobs held '
    'and running, time until its nearest lease ends (negative: it stopped renewing), refused '
    'results, connected, and what it reported at start: its agents'' sandbox and OS user, how its '
    'database connection authenticated, its HTTP address, and warnings (agents not isolated, no '
    'database password).';
