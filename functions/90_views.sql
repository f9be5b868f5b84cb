-- Operator views: the psql interface to the queue, the governor, routines,
-- loops and topology runs, notifications, tracked repositories and the forge
-- pipeline, and the listeners themselves.
--
-- Called by: operators and users in psql, `ceaseless status`, the CLI's
-- list and show commands, dashboards.
-- Guarantees: read-only; every view a user role may read (job_queue,
-- stuck_jobs, governor_usage, routine_status, owner_budget_usage,
-- topology_node_status, loop_status, repo_status, forge_pipeline) is
-- security_invoker, so a user role sees only its own rows (the row-level
-- security of the caller applies, not the view owner's); a lane's row in
-- governor_usage is every owner's lane, counted by _lane_capacity as the
-- claim counts it, with pending_due the caller's own due jobs; listener_status
-- and notification_status are the operators' and listeners' (99_access.sql):
-- they describe the installation, not a user's rows; no view shows a credential
-- (a loop's webhook token or signing key, an agent's env, a sink's headers);
-- column names are a stable interface (add columns, never rename them); an
-- operator's own view built on one of these survives every migrate, or
-- migrate fails naming it: nothing here is ever dropped.
--
-- The rule for changing a view (here, and for the schedules view of
-- 32_schedules.sql, which the trigger layer's functions read):
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

create or replace view job_queue with (security_invoker = true) as
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
       case when j.state in ('claimed', 'running') then j.claimed_at end as claimed_at,
       -- The order a claim takes the lane's due jobs in (agents.fairness).
       j.priority,
       j.fairness_key
from job j
join agents a on a.name = j.agent
-- Two arms, not one `state in (…)`: each arm is a partial index's own
-- predicate (job_claimable_idx / job_fair_claim_idx, job_claim_expiry_idx),
-- so the planner reads the live jobs through them (a BitmapOr) instead of
-- the whole table, finished history included.
where j.state = 'pending' or j.state in ('claimed', 'running');

comment on view job_queue is
    'Live jobs (pending, claimed, running): who holds each and since when, how long its lease '
    'has left, whether it is due, its priority and fairness key.';

-- "Claimed but never started" counts from the claim, not from the job's
-- creation: a job that waited an hour in the queue and was claimed a second
-- ago is not stuck.
create or replace view stuck_jobs with (security_invoker = true) as
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

-- One row per lane, as _lane_capacity (12_lanes.sql) counts it for the claim:
-- free_slots is what claim_jobs would admit now, nothing for a lane that is
-- disabled, paused or over a budget, whatever its counts say. paused_until
-- and pause_reason are those of a pause still in force (NULL once it has
-- passed).
create or replace view governor_usage with (security_invoker = true) as
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
       l.held_by,
       a.fairness
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
    'as explain_job names it), and the order its claims take due jobs in (fairness).';

create or replace view owner_budget_usage with (security_invoker = true) as
select b.user_id,
       b.window_secs,
       b.window_cost_usd,
       s.cost as cost_in_window,
       b.window_tokens,
       s.tokens as tokens_in_window,
       (s.cost >= b.window_cost_usd or s.tokens >= b.window_tokens) is true as over_budget
from owner_budgets b
cross join lateral _owner_spend(b, now()) s;

comment on view owner_budget_usage is
    'Each owner budget against what the owner''s runs reported in its window; over_budget: its '
    'jobs wait (explain_job says owner_budget).';

-- A routine's or loop's held fires (33_held_fires.sql) as its status shows
-- them: how many, how many fires they stand for, and the earliest timed
-- release (NULL: they wait for a run's end). Invoker's rights: a user counts
-- only its own (row-level security of held_fires).
create or replace function _held_summary(p_target uuid)
returns table (n bigint, collapsed bigint, next_at timestamptz)
language sql stable
as $$
    -- held_fires_routine_idx / held_fires_loop_idx: the target's rows only.
    select count(*), sum(h.collapsed), min(h.fire_at)
    from held_fires h
    where h.routine_id = p_target
    union all
    select count(*), sum(h.collapsed), min(h.fire_at)
    from held_fires h
    where h.loop_id = p_target
    order by 1 desc
    limit 1;
$$;

comment on function _held_summary(uuid) is
    'A routine''s or loop''s held fires: how many, the fires they stand for, the earliest fire_at.';

create or replace view routine_status with (security_invoker = true) as
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
       r.last_error,
       -- Refused fires: a webhook delivery refused (409) is not redelivered,
       -- so this is the place an operator sees that one was lost.
       coalesce(refused.n, 0) as skips_1h,
       last_skip.skip_reason as last_skip_reason,
       last_skip.started_at as last_skipped_at,
       r.overlap_policy,
       r.debounce_secs,
       r.debounce_max_secs,
       coalesce(held.n, 0) as held_fires,
       held.collapsed as held_collapsed,
       held.next_at as held_next_at
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
) live on true
-- routine_runs_skipped_idx holds only refused fires, newest first: the last
-- hour's and the latest are read without the routine's other runs.
left join lateral (
    select count(*) as n
    from routine_runs rr
    where rr.routine_id = r.id and rr.status = 'skipped'
      and rr.started_at > now() - interval '1 hour'
) refused on true
left join lateral (
    select rr.skip_reason, rr.started_at
    from routine_runs rr
    where rr.routine_id = r.id and rr.status = 'skipped'
    order by rr.started_at desc
    limit 1
) last_skip on true
left join lateral _held_summary(r.id) held on true;

comment on view routine_status is
    'One row per routine: trigger, schedule, next fire, last status, consecutive failures, '
    'runs and skips in the last 24 hours, runs running now, the last error, refused fires: '
    'in the last hour, the last one''s reason and time; its overlap policy and debounce, and its '
    'held fires (how many, the fires they stand for, the earliest timed release).';

-- The warning a listener's database authentication calls for (listener_reports.db_auth), or
-- NULL: without a password (trust), any process that reaches the database's socket or
-- 127.0.0.1 connects as the listener's role. The listener logs it at start and
-- listener_status shows it, in these words.
create or replace function _db_auth_warning(p_db_auth text)
returns text
language sql
immutable
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

-- The announcement relay's backlog (25_notify_audit.sql, relay_announcements):
-- how many relayed announcements wait to be sent and how long the oldest has
-- waited. A listener sends them within moments; a backlog that grows, or an
-- oldest one minutes old, means no listener is relaying (none running, or
-- each failing: its log says why).
create or replace view relay_status as
select count(a.id) as waiting,
       min(a.created_at) as oldest_at,
       c.now - min(a.created_at) as oldest_waited
from (values (now())) c (now)
left join announcements a on true
group by c.now;

comment on view relay_status is
    'Relayed announcements (sessions with ceaseless.notify = ''relay'') waiting for a listener to '
    'send them: how many, the oldest one''s time, and how long it has waited.';

create or replace view notification_status as
-- One row per (sink, status), because the operator's question is "which sink
-- is in trouble". The rows still to deliver and those given up on are read
-- through the partial indexes that hold only them (a BitmapOr of
-- notifications_pending_idx and notifications_failed_idx); the delivered ones
-- are counted by their counter (ceaseless_notifications_delivered_total,
-- functions/94_metrics.sql), which retention does not lower: after months of
-- deliveries the view reads what it read on the first day.
with live as (
    select coalesce(n.channel, 'default') as sink,
           n.status,
           count(*) as notifications,
           count(*) filter (where n.status = 'pending' and n.next_attempt_at <= now()) as due,
           -- Pending rows already tried: retrying, or claimed right now.
           count(*) filter (where n.status = 'pending' and n.attempts > 0) as attempted,
           max(now() - n.created_at) filter (where n.status = 'pending') as oldest_pending_age,
           min(n.next_attempt_at) filter (where n.status = 'pending') as next_attempt_at,
           max(n.attempts) as max_attempts_used,
           (array_agg(n.last_error order by n.created_at desc)
                filter (where n.last_error is not null))[1] as last_error
    from notifications n
    where n.status = 'pending' or n.status = 'failed'
    group by 1, 2
),
delivered as (
    -- Folded totals plus the deltas not folded yet, as metrics_snapshot adds them.
    select c.labels ->> 'channel' as sink,
           'delivered'::text as status,
           sum(c.value)::bigint as notifications,
           0::bigint as due,
           0::bigint as attempted,
           null::interval as oldest_pending_age,
           null::timestamptz as next_attempt_at,
           null::integer as max_attempts_used,
           null::text as last_error
    from (select t.labels, t.value from metric_totals t
          where t.metric = 'ceaseless_notifications_delivered_total'
          union all
          select d.labels, d.value from metric_deltas d
          where d.metric = 'ceaseless_notifications_delivered_total') c
    group by 1
    having sum(c.value) > 0
),
grouped as (
    select * from live
    union all
    select * from delivered
)
select g.sink,
       case when jsonb_typeof(c.sinks) = 'object' then c.sinks -> g.sink ->> 'type' end
           as sink_type,
       _notification_sink_problem(g.sink, c.sinks) as sink_problem,
       g.status,
       g.notifications,
       g.due,
       g.attempted,
       g.oldest_pending_age,
       g.next_attempt_at,
       g.max_attempts_used,
       g.last_error
from grouped g
cross join (select _notification_sinks() as sinks) c
order by g.sink, g.status;

comment on view notification_status is
    'Notifications per sink and status: how many (delivered: all ever delivered, by their '
    'counter), how many due, the oldest pending age, the next attempt, the newest error, and '
    'what is wrong with the sink''s configuration, if anything.';

create or replace view topology_node_status with (security_invoker = true) as
select n.topology_run_id as run_id,
       r.loop_id,
       r.iteration,
       n.node_id as node,
       n.agent,
       n.gate,
       n.state,
       n.upstream_left,
       n.job_id,
       j.state as job_state,
       j.attempts,
       n.started_at,
       n.finished_at,
       -- Until now for a node still running, so a stuck node shows its age.
       round(extract(epoch from coalesce(n.finished_at, now()) - n.started_at)::numeric, 3)
           as seconds,
       -- A preview: the whole output is topology_nodes.output.
       case when char_length(n.output) > 500 then left(n.output, 500) || '…'
            else n.output end as output_preview,
       n.error,
       a.id as approval_id,
       coalesce(a.decision, case when a.id is not null then 'pending' end) as approval_decision,
       a.decided_by,
       a.decided_at,
       a.expires_at as approval_expires_at
from topology_nodes n
join topology_runs r on r.id = n.topology_run_id
left join job j on j.id = n.job_id
left join approvals a on a.topology_run_id = n.topology_run_id and a.node_id = n.node_id;

comment on view topology_node_status is
    'One row per node of every topology run the caller may see: its state and upstreams left, '
    'its job''s state and attempts, timings, an output preview, the error, and its approval.';

create or replace view loop_status with (security_invoker = true) as
select l.id,
       l.title,
       l.user_id as owner,
       l.enabled,
       l.triggers ->> 'cron' as cron,
       l.triggers ->> 'timezone' as timezone,
       coalesce((l.triggers ->> 'on_completion')::boolean, false) as on_completion,
       l.webhook_token is not null as webhook,
       l.repeat_policy,
       -- The iteration the policy counts from: set when a stopped loop is
       -- re-enabled, so an operator can see why it has not stopped again.
       l.policy_from_iteration,
       latest.iteration as current_iteration,
       live.id as live_run_id,
       live.status as live_run_status,
       done.id as last_run_id,
       done.status as last_run_status,
       done.finished_at as last_run_finished_at,
       l.next_fire_at,
       l.stopped_reason,
       l.stopped_at,
       coalesce(skips.n, 0) as skipped_fires,
       skips.last_reason as last_skip_reason,
       skips.last_at as last_skipped_at,
       l.last_error,
       l.overlap_policy,
       l.debounce_secs,
       l.debounce_max_secs,
       coalesce(held.n, 0) as held_fires,
       held.collapsed as held_collapsed,
       held.next_at as held_next_at,
       l.min_interval_secs,
       -- Until when a fire is deferred by min_interval_secs (its held fire,
       -- blocked_by min_interval, starts then); NULL: a fire now may start.
       _loop_paced_until(l.id, l.min_interval_secs, now()) as paced_until
from loops l
-- topology_runs_loop_idx (loop_id, iteration desc): one entry each.
left join lateral (
    select r.iteration from topology_runs r
    where r.loop_id = l.id and r.iteration is not null
    order by r.iteration desc limit 1
) latest on true
-- At most one (topology_runs_one_live_iteration_idx).
left join lateral (
    select r.id, r.status from topology_runs r
    where r.loop_id = l.id and r.status in ('pending', 'running', 'awaiting_approval')
) live on true
left join lateral (
    select r.id, r.status, r.finished_at from topology_runs r
    where r.loop_id = l.id and r.iteration is not null
      and r.status in ('succeeded', 'failed', 'cancelled')
    order by r.iteration desc limit 1
) done on true
-- topology_runs_loop_skipped_idx holds only skipped runs.
left join lateral (
    select count(*) as n,
           (array_agg(r.skip_reason order by r.created_at desc))[1] as last_reason,
           max(r.created_at) as last_at
    from topology_runs r
    where r.loop_id = l.id and r.status = 'skipped'
) skips on true
left join lateral _held_summary(l.id) held on true;

comment on view loop_status is
    'One row per loop: title, owner, enabled, triggers (cron, timezone, on_completion, webhook on '
    'or off — never its credential), repeat policy, current iteration, the live run, the last '
    'finished run, next fire, why and when it stopped, skipped fires (count, last reason), the '
    'last error, its overlap policy and debounce, its held fires (how many, the fires they '
    'stand for, the earliest timed release), its min_interval_secs and until when it defers a '
    'fire.';

create or replace view repo_status with (security_invoker = true) as
select r.id,
       r.user_id as owner_role,
       r.forge,
       r.owner,
       r.repo,
       r.api_url,
       r.enabled,
       r.last_polled_at,
       r.next_poll_at,
       -- Quiet now: a due repo that is quiet waits for its window to end,
       -- which is why next_poll_at may lie in the past.
       _repo_quiet_at(r, now()) as quiet_now,
       case when r.quiet_from is not null
            then format('%s-%s %s', r.quiet_from, r.quiet_until, r.quiet_timezone)
       end as quiet_window,
       -- The interval used, after the floor, next to the one asked for: a
       -- difference means forge_min_interval_secs overrides the row.
       extract(epoch from _repo_interval(r))::integer as interval_used_secs,
       r.interval_seconds as interval_asked_secs,
       r.last_error,
       r.last_error_at,
       coalesce(live.n, 0) as live_jobs,
       r.discover_label,
       r.plan_label,
       r.implement_label,
       r.allowed_authors,
       r.tracking_issue,
       -- false: polled, cloned and written to without the listener's forge
       -- tokens until an operator allows them (db/0030).
       r.tokens_allowed
from tracked_repo r
-- job_live_issue_idx (forge, owner, repo, number) where live: a prefix probe.
left join lateral (
    select count(*)::integer as n from job j
    where j.forge = r.forge and j.owner = r.owner and j.repo = r.repo
      and j.state in ('pending', 'claimed', 'running')
) live on true;

comment on view repo_status is
    'One row per tracked repo: last and next poll, whether it is quiet now, the interval used '
    '(clamped to forge_min_interval_secs) and asked, the last error, its live jobs, and whether '
    'the listener''s forge tokens may serve it.';

create or replace view forge_pipeline with (security_invoker = true) as
select r.id as repo_id,
       j.user_id as owner_role,
       j.forge,
       j.owner,
       j.repo,
       j.number,
       coalesce(i.title, j.payload #>> '{forge,title}') as title,
       j.kind,
       j.id as job_id,
       j.state,
       j.agent,
       j.attempts,
       j.last_error,
       j.parent_job_id,
       p.number as parent_number,
       pr.pr_number,
       pr.pr_url,
       -- A plan's children: asked for, and created on the forge so far.
       ch.asked as children_asked,
       ch.created as children_created,
       j.labels_synced_label,
       j.labels_synced_at,
       j.labels_error,
       j.created_at,
       j.finished_at
from job j
left join tracked_repo r on r.forge = j.forge and r.owner = j.owner and r.repo = j.repo
left join forge_issue i on i.repo_id = r.id and i.number = j.number
left join job p on p.id = j.parent_job_id
left join lateral (
    select ar.pr_number, ar.pr_url from agent_run ar
    where ar.job_id = j.id and ar.pr_number is not null
    order by ar.started_at desc limit 1
) pr on true
left join lateral (
    select count(*)::integer as asked, count(c.number)::integer as created
    from forge_child_issue c where c.plan_job_id = j.id
) ch on j.kind = 'plan'
where j.forge is not null;

comment on view forge_pipeline is
    'One row per forge job: its repo and issue, kind, state, lane, parent, pull request, '
    'children (plans), mirrored label; newest last. Filter by owner, repo, number.';
