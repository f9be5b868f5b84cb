-- Metrics: the counters triggers keep, and the one function GET /metrics reads.
--
-- Called by: PostgreSQL (the counting triggers, after each statement on
-- agent_run, routine_runs, topology_runs and notifications); every listener's
-- lease sweep (_metrics_fold); the listener's GET /metrics, and operators in
-- psql (metrics_snapshot).
-- Guarantees:
-- - counting never waits: a trigger only INSERTs into metric_deltas, one row
--   per label set of its statement (statement-level, transition tables), so
--   a batch of 1,000 finished runs of one lane writes a handful of rows (a
--   count per outcome, one per duration bucket, a sum);
-- - a scrape reads no history: metrics_snapshot() reads the agents, the live
--   rows of job through their partial indexes, the rolling window of
--   agent_run through agent_run_lane_window_idx, and the small counter
--   tables; never a table scan of job, agent_run, routine_runs,
--   topology_runs or notifications (tests/sql/test_metrics.py shows the plan);
-- - any listener serves the same database-wide numbers: nothing is kept in a
--   listener, so a restart resets no counter of these.

-- The run-duration histogram's upper bounds, in seconds (Prometheus `le`):
-- from an in-process noop run to a three-hour agent session.
create or replace function _metrics_duration_bounds()
returns double precision[]
language sql
immutable
parallel safe
as $$
    select array[0.05, 0.25, 1, 5, 15, 60, 300, 900, 1800, 3600, 10800,
                 'Infinity']::double precision[]
$$;

comment on function _metrics_duration_bounds() is
    'The upper bounds (le) of ceaseless_agent_run_duration_seconds, in seconds, +Inf last.';

-- Finished runs: one count per (lane, outcome), and the duration histogram
-- per lane (its bucket, its sum). A run's lane is its agent; the label is
-- `lane`, as on every gauge of the lane, so one PromQL matcher selects both. enable_nestloop, as _tg_job_update
-- (25_notify_audit.sql): a finish_runs batch of thousands of runs after
-- one-run statements rescans the transition table without it
-- (tests/sql/test_batch_plans.py, test_without_enable_nestloop_…). The other
-- update triggers below carry no setting: the same test shows no rescan for
-- the routine_runs one, and topology runs and notifications change a few
-- rows a statement.
create or replace function _tg_agent_run_metrics()
returns trigger
language plpgsql
set enable_nestloop = off
as $$
declare
    -- The bounds negated, ascending: width_bucket(-secs, v_neg) is then the
    -- position of the smallest bound >= secs (Prometheus' `le`, a duration
    -- equal to a bound counted under it), found by a C function per row, not
    -- a query per row: this runs after every finish_runs batch.
    v_neg double precision[] :=
        array(select -u.bound from unnest(_metrics_duration_bounds()) as u (bound)
              order by u.bound desc);
begin
    with finished as (
        select n.agent, n.outcome,
               greatest(extract(epoch from n.finished_at - n.started_at)::double precision, 0)
                   as secs
        from new_rows n
        join old_rows o on o.id = n.id
        where o.finished_at is null and n.finished_at is not null
    ),
    bucketed as (
        select f.agent, f.outcome, f.secs,
               -(v_neg[width_bucket(-f.secs, v_neg)]) as le
        from finished f
    )
    insert into metric_deltas (metric, labels, value)
    select 'ceaseless_agent_runs_total',
           jsonb_build_object('lane', f.agent, 'outcome', f.outcome), count(*)
    from bucketed f group by f.agent, f.outcome
    union all
    select 'ceaseless_agent_run_duration_seconds_bucket',
           jsonb_build_object('lane', f.agent,
                              'le', case when f.le = 'Infinity' then '+Inf' else f.le::text end),
           count(*)
    from bucketed f group by f.agent, f.le
    union all
    select 'ceaseless_agent_run_duration_seconds_sum',
           jsonb_build_object('lane', f.agent), sum(f.secs)
    from bucketed f group by f.agent;
    return null;
end;
$$;

comment on function _tg_agent_run_metrics() is
    'After UPDATE on agent_run: count the runs that just finished by lane and outcome, and '
    'their durations, into metric_deltas.';

-- The labels of a refused fire: the routine or loop (p_kind) it refused,
-- by name (a loop's title) and by id, which a rename or a second owner's
-- routine of the same name cannot change; how it was fired, and why it was
-- refused. Per routine and loop, since a refused webhook delivery is not
-- redelivered: an alert must say whose it was. A skipped run inserted by
-- hand may name no trigger: '' is what Prometheus reads as no label, where a
-- JSON null would print as a value.
create or replace function _metrics_skip_labels(
    p_kind text, p_id uuid, p_name text, p_trigger text, p_reason text)
returns jsonb
language sql
immutable
parallel safe
as $$
    select jsonb_build_object(p_kind, p_name, p_kind || '_id', p_id::text,
                              'trigger', coalesce(p_trigger, ''), 'reason', p_reason)
$$;

comment on function _metrics_skip_labels(text, uuid, text, text, text) is
    'The labels of ceaseless_routine_skips_total and ceaseless_loop_skips_total: routine (name) '
    'or loop (title) as p_kind says, its id as routine_id or loop_id, trigger, reason.';

-- Routine fires and refused fires. A refused fire is a row inserted as
-- skipped; a fire that a later step refuses is a row updated to skipped.
create or replace function _tg_routine_runs_insert_metrics()
returns trigger
language plpgsql
as $$
begin
    insert into metric_deltas (metric, labels, value)
    select 'ceaseless_routine_fires_total', jsonb_build_object('trigger', n.trigger_type),
           count(*)
    from new_rows n
    where n.status <> 'skipped'
    group by n.trigger_type
    union all
    select 'ceaseless_routine_skips_total',
           _metrics_skip_labels('routine', r.id, r.name, n.trigger_type, n.skip_reason), count(*)
    from new_rows n
    join routines r on r.id = n.routine_id
    where n.status = 'skipped'
    group by r.id, r.name, n.trigger_type, n.skip_reason;
    return null;
end;
$$;

comment on function _tg_routine_runs_insert_metrics() is
    'After INSERT on routine_runs: count fires by trigger, and refused fires by routine, trigger '
    'and reason.';

create or replace function _tg_routine_runs_update_metrics()
returns trigger
language plpgsql
as $$
begin
    insert into metric_deltas (metric, labels, value)
    select 'ceaseless_routine_skips_total',
           _metrics_skip_labels('routine', r.id, r.name, n.trigger_type, n.skip_reason), count(*)
    from new_rows n
    join old_rows o on o.id = n.id
    join routines r on r.id = n.routine_id
    where n.status = 'skipped' and o.status <> 'skipped'
    group by r.id, r.name, n.trigger_type, n.skip_reason;
    return null;
end;
$$;

comment on function _tg_routine_runs_update_metrics() is
    'After UPDATE on routine_runs: count runs that became skipped, by routine, trigger and '
    'reason.';

-- Loop iterations, counted once each when they end (an iteration refused at
-- its fire is inserted as skipped, already ended), and refused fires by loop.
create or replace function _tg_topology_runs_insert_metrics()
returns trigger
language plpgsql
as $$
begin
    insert into metric_deltas (metric, labels, value)
    select 'ceaseless_loop_iterations_total', jsonb_build_object('status', n.status), count(*)
    from new_rows n
    where n.loop_id is not null and n.finished_at is not null
    group by n.status
    union all
    select 'ceaseless_loop_skips_total',
           _metrics_skip_labels('loop', l.id, l.title, n.trigger_type, n.skip_reason), count(*)
    from new_rows n
    join loops l on l.id = n.loop_id
    where n.status = 'skipped'
    group by l.id, l.title, n.trigger_type, n.skip_reason;
    return null;
end;
$$;

comment on function _tg_topology_runs_insert_metrics() is
    'After INSERT on topology_runs: count loop iterations inserted already ended (skipped), and '
    'refused fires by loop, trigger and reason.';

create or replace function _tg_topology_runs_update_metrics()
returns trigger
language plpgsql
as $$
begin
    insert into metric_deltas (metric, labels, value)
    select 'ceaseless_loop_iterations_total', jsonb_build_object('status', n.status), count(*)
    from new_rows n
    join old_rows o on o.id = n.id
    where n.loop_id is not null and o.finished_at is null and n.finished_at is not null
    group by n.status;
    return null;
end;
$$;

comment on function _tg_topology_runs_update_metrics() is
    'After UPDATE on topology_runs: count loop iterations that just ended, by final status.';

-- Notifications delivered and given up on, per sink (channel). A failed
-- attempt that will be retried is no failure yet: the row stays pending.
create or replace function _tg_notifications_update_metrics()
returns trigger
language plpgsql
as $$
begin
    insert into metric_deltas (metric, labels, value)
    select case n.status when 'delivered' then 'ceaseless_notifications_delivered_total'
                         else 'ceaseless_notifications_failed_total' end,
           jsonb_build_object('channel', coalesce(n.channel, 'default')), count(*)
    from new_rows n
    join old_rows o on o.id = n.id
    where n.status in ('delivered', 'failed') and o.status is distinct from n.status
    group by n.status, coalesce(n.channel, 'default');
    return null;
end;
$$;

comment on function _tg_notifications_update_metrics() is
    'After UPDATE on notifications: count rows that became delivered or failed, by channel.';

select _statement_trigger('agent_run_metrics', 'update', 'agent_run');
select _statement_trigger('routine_runs_insert_metrics', 'insert', 'routine_runs');
select _statement_trigger('routine_runs_update_metrics', 'update', 'routine_runs');
select _statement_trigger('topology_runs_insert_metrics', 'insert', 'topology_runs');
select _statement_trigger('topology_runs_update_metrics', 'update', 'topology_runs');
select _statement_trigger('notifications_update_metrics', 'update', 'notifications');

-- Move the counted deltas into metric_totals.
--
-- Guarantees: the deltas a call deletes are added to the totals in the same
-- transaction, so a scrape sees each increment exactly once, in one table or
-- the other; SKIP LOCKED lets every listener's sweep call this at once, each
-- folding different deltas; totals are upserted in (metric, labels) order,
-- so two folds never deadlock. Bounded by p_limit deltas a call.
create or replace function _metrics_fold(p_limit integer default 50000)
returns integer
language plpgsql
as $$
declare
    v_folded integer;
begin
    with picked as (
        -- Oldest first; rows another fold holds are that fold's.
        select d.id from metric_deltas d
        order by d.id
        limit p_limit
        for update skip locked
    ),
    moved as (
        delete from metric_deltas d
        using picked p
        where d.id = p.id
        returning d.metric, d.labels, d.value
    ),
    summed as (
        select m.metric, m.labels, sum(m.value) as value, count(*) as n
        from moved m
        group by m.metric, m.labels
    ),
    upserted as (
        insert into metric_totals as t (metric, labels, value)
        select s.metric, s.labels, s.value from summed s
        order by s.metric, s.labels
        on conflict (metric, labels) do update set value = t.value + excluded.value
        returning 1
    )
    select coalesce(sum(s.n), 0) into v_folded
    from summed s
    -- Reads upserted so the insert runs before the count is returned.
    where (select count(*) from upserted) >= 0;
    return v_folded;
end;
$$;

comment on function _metrics_fold(integer) is
    'Fold up to p_limit counter deltas into metric_totals (SKIP LOCKED: every listener''s sweep '
    'may call it); returns how many deltas were folded.';

-- Every series GET /metrics serves that the database knows, one row a sample.
--
-- One statement (tests/sql/test_metrics.py reads its plan and asserts it reads
-- indexes, never a whole table of history).
-- Guarantees, for what Prometheus makes of the page: a lane is labelled
-- `lane` in every series; every counter of a label set that can exist (each
-- lane's outcomes, each trigger type, each routine's refusal reasons, each
-- loop iteration's end, each notification sink) is served from the start, at
-- 0, so rate() and increase() see its first increment; a histogram serves
-- every bucket of every label set, 0 included, its samples grouped by label
-- set with the buckets in ascending `le`.
create or replace function metrics_snapshot(p_now timestamptz default now())
returns table (
    family text,
    kind text,
    help text,
    sample text,
    labels jsonb,
    value double precision
)
language sql
stable
as $$
with families (family, kind, help) as (
    values
        ('ceaseless_jobs', 'gauge',
         'Live jobs by lane (agent) and state: pending, claimed, running.'),
        ('ceaseless_jobs_blocked', 'gauge',
         'Blocked jobs by lane: each waits for a person (reply_job or cancel_job).'),
        ('ceaseless_jobs_due', 'gauge',
         'Pending jobs whose run_after has come, by lane: work waiting for a slot.'),
        ('ceaseless_oldest_due_job_age_seconds', 'gauge',
         'How long the oldest due pending job of a lane has been due (0 when none).'),
        ('ceaseless_expired_leases', 'gauge',
         'Claimed or running jobs whose lease has passed and awaits the sweep, by lane.'),
        ('ceaseless_lane_live_runs', 'gauge',
         'Claimed and running jobs of a lane, which max_concurrent bounds.'),
        ('ceaseless_lane_max_concurrent', 'gauge', 'The lane''s max_concurrent.'),
        ('ceaseless_lane_window_started_runs', 'gauge',
         'Runs the lane started within its rolling window, which window_budget bounds.'),
        ('ceaseless_lane_window_budget', 'gauge',
         'The lane''s window_budget (absent: unlimited).'),
        ('ceaseless_lane_window_seconds', 'gauge', 'The lane''s rolling window.'),
        ('ceaseless_lane_enabled', 'gauge', '1 when the lane is enabled.'),
        ('ceaseless_lane_paused', 'gauge',
         '1 while the lane is paused (lane_pauses: a rate limit or an operator).'),
        ('ceaseless_lane_paused_until_seconds', 'gauge',
         'Unix time the lane''s pause ends (absent when not paused).'),
        ('ceaseless_notifications_pending', 'gauge', 'Notifications waiting to be delivered.'),
        ('ceaseless_approvals_open', 'gauge', 'Approvals waiting for a decision.'),
        ('ceaseless_announcements_waiting', 'gauge',
         'Relayed announcements (ceaseless.notify = relay) waiting for a listener to send them.'),
        ('ceaseless_oldest_announcement_age_seconds', 'gauge',
         'How long the oldest relayed announcement has waited (0 when none).'),
        ('ceaseless_routine_runs_running', 'gauge', 'Routine runs in progress.'),
        ('ceaseless_routine_last_success_timestamp_seconds', 'gauge',
         'Unix time the routine''s latest ok run completed (absent until it has one).'),
        ('ceaseless_agent_runs', 'counter', 'Finished agent runs by lane and outcome.'),
        ('ceaseless_agent_run_duration_seconds', 'histogram',
         'Wall time of finished agent runs, by lane.'),
        ('ceaseless_routine_fires', 'counter', 'Routine fires by trigger type.'),
        ('ceaseless_routine_skips', 'counter',
         'Refused routine fires (skipped runs) by routine, trigger type and reason.'),
        ('ceaseless_loop_iterations', 'counter', 'Ended loop iterations by final status.'),
        ('ceaseless_loop_skips', 'counter',
         'Refused loop fires (skipped runs) by loop, trigger type and reason.'),
        ('ceaseless_notifications_delivered', 'counter', 'Notifications delivered, by channel.'),
        ('ceaseless_notifications_failed', 'counter',
         'Notifications given up on (attempts exhausted or no such sink), by channel.')
),
lanes as (
    select a.name, a.enabled, a.max_concurrent, a.window_secs, a.window_budget,
           p.paused_until
    from ceaseless.agents a
    left join ceaseless.lane_pauses p on p.agent = a.name and p.paused_until > p_now
),
pending as (
    -- job_claimable_idx: partial on pending, led by agent, so each lane
    -- reads only its own pending entries.
    select l.name,
           q.n, q.due, q.oldest_due
    from lanes l
    cross join lateral (
        select count(*) as n,
               count(*) filter (where j.run_after <= p_now) as due,
               min(j.run_after) filter (where j.run_after <= p_now) as oldest_due
        from ceaseless.job j
        where j.agent = l.name and j.state = 'pending'
    ) q
),
live as (
    -- job_lane_live_idx: partial on claimed and running, led by agent.
    select l.name, q.claimed, q.running, q.expired
    from lanes l
    cross join lateral (
        select count(*) filter (where j.state = 'claimed') as claimed,
               count(*) filter (where j.state = 'running') as running,
               count(*) filter (where j.claim_expires_at < p_now) as expired
        from ceaseless.job j
        where j.agent = l.name and j.state in ('claimed', 'running')
    ) q
),
blocked as (
    -- job_blocked_idx: partial on blocked, led by agent; blocked jobs are
    -- finished jobs, and the rest of those are history.
    select l.name, q.n
    from lanes l
    cross join lateral (
        select count(*) as n
        from ceaseless.job j
        where j.agent = l.name and j.state = 'blocked'
    ) q
),
windowed as (
    -- agent_run_lane_window_idx: (agent, started_at desc), the governor's
    -- own index; reads the window's runs, never the lane's history.
    select l.name, q.n
    from lanes l
    cross join lateral (
        select count(*) as n
        from ceaseless.agent_run r
        where r.agent = l.name
          and r.started_at > p_now - make_interval(secs => l.window_secs)
    ) q
),
zeros (metric, labels) as (
    -- Every counter series that can exist, at 0 until counted: a series that
    -- appears only at its first increment hides that increment from rate().
    -- The value lists are the CHECK lists of agent_run.outcome,
    -- routines.trigger_type, routine_runs.skip_reason, topology_runs.skip_reason
    -- and the final topology_runs.status (tests/sql/test_metrics.py compares
    -- them with listener/enums.py, which mirrors those lists).
    select 'ceaseless_agent_runs_total', jsonb_build_object('lane', l.name, 'outcome', o.outcome)
    from lanes l
    cross join (values ('succeeded'), ('failed'), ('rate_limited'), ('budget_exhausted'),
                       ('output_budget_exhausted'), ('timed_out'), ('cancelled'),
                       ('lease_expired'), ('auth_failed'), ('needs_human')) o (outcome)
    union all
    -- One bucket makes the label set: the histogram below serves all of them.
    select 'ceaseless_agent_run_duration_seconds_bucket',
           jsonb_build_object('lane', l.name, 'le', '+Inf')
    from lanes l
    union all
    select 'ceaseless_agent_run_duration_seconds_sum', jsonb_build_object('lane', l.name)
    from lanes l
    union all
    select 'ceaseless_routine_fires_total', jsonb_build_object('trigger', t.trigger)
    from (values ('cron'), ('event'), ('webhook'), ('manual')) t (trigger)
    union all
    -- Each routine's own trigger type; a manual run of it counts under
    -- `manual` from its first refusal.
    select 'ceaseless_routine_skips_total',
           ceaseless._metrics_skip_labels('routine', r.id, r.name, r.trigger_type, k.reason)
    from ceaseless.routines r
    cross join (values ('cooldown'), ('concurrency'), ('dedup'), ('global_cap'),
                       ('missed_slots'), ('disabled'), ('agent_disabled')) k (reason)
    union all
    select 'ceaseless_loop_iterations_total', jsonb_build_object('status', s.status)
    from (values ('succeeded'), ('failed'), ('cancelled'), ('skipped')) s (status)
    union all
    -- Each loop's triggers that are on (manual always is).
    select 'ceaseless_loop_skips_total',
           ceaseless._metrics_skip_labels('loop', l.id, l.title, t.trigger, k.reason)
    from ceaseless.loops l
    cross join lateral (
        select 'manual'
        union all select 'cron' where l.triggers ->> 'cron' is not null
        union all select 'on_completion'
                  where coalesce((l.triggers ->> 'on_completion')::boolean, false)
        union all select 'webhook' where l.webhook_token is not null
        union all select 'event' where l.triggers ? 'event'
    ) t (trigger)
    cross join (values ('live_iteration'), ('disabled'), ('agent_disabled')) k (reason)
    union all
    -- The sinks configured, and `default`, which a notification naming no
    -- channel is counted under.
    select m.metric, jsonb_build_object('channel', c.channel)
    from (values ('ceaseless_notifications_delivered_total'),
                 ('ceaseless_notifications_failed_total')) m (metric)
    cross join (
        select 'default'
        union
        select jsonb_object_keys(st.value)
        from ceaseless.settings st
        where st.key = 'notification_sinks' and jsonb_typeof(st.value) = 'object'
    ) c (channel)
),
counted as (
    -- The counters: folded totals plus the deltas not folded yet.
    select c.metric, c.labels, sum(c.value) as value
    from (
        select t.metric, t.labels, t.value from ceaseless.metric_totals t
        union all
        select d.metric, d.labels, d.value from ceaseless.metric_deltas d
        union all
        select z.metric, z.labels, 0 from zeros z
    ) c
    group by c.metric, c.labels
),
histograms as (
    -- Bucket counts as the triggers keep them: per bucket, not cumulative.
    select c.metric, c.labels - 'le' as base,
           (c.labels ->> 'le')::double precision as le, c.value
    from counted c
    where c.metric like '%\_bucket'
),
samples (family, sample, labels, value) as (
    select 'ceaseless_jobs', 'ceaseless_jobs',
           jsonb_build_object('lane', l.name, 'state', s.state), s.n::double precision
    from lanes l
    join pending p on p.name = l.name
    join live v on v.name = l.name
    cross join lateral (values ('pending', p.n), ('claimed', v.claimed), ('running', v.running))
        s (state, n)
    union all
    -- One gauge a row for each lane; a gauge with no value (no window budget,
    -- no pause) has no sample.
    select g.family, g.family, jsonb_build_object('lane', l.name), g.value
    from lanes l
    join pending p on p.name = l.name
    join live v on v.name = l.name
    join windowed w on w.name = l.name
    join blocked bl on bl.name = l.name
    cross join lateral (values
        ('ceaseless_jobs_due', p.due::double precision),
        ('ceaseless_jobs_blocked', bl.n),
        ('ceaseless_oldest_due_job_age_seconds',
         coalesce(greatest(extract(epoch from p_now - p.oldest_due), 0), 0)),
        ('ceaseless_expired_leases', v.expired),
        ('ceaseless_lane_live_runs', v.claimed + v.running),
        ('ceaseless_lane_max_concurrent', l.max_concurrent),
        ('ceaseless_lane_window_started_runs', w.n),
        ('ceaseless_lane_window_budget', l.window_budget),
        ('ceaseless_lane_window_seconds', l.window_secs),
        ('ceaseless_lane_enabled', l.enabled::integer),
        ('ceaseless_lane_paused', (l.paused_until is not null)::integer),
        ('ceaseless_lane_paused_until_seconds', extract(epoch from l.paused_until))
    ) g (family, value)
    where g.value is not null
    union all
    -- notifications_pending_idx, approvals_open_idx, idx_routine_runs_status:
    -- each partial on exactly the rows counted.
    select 'ceaseless_notifications_pending', 'ceaseless_notifications_pending', '{}',
           (select count(*) from ceaseless.notifications n where n.status = 'pending')
    union all
    select 'ceaseless_approvals_open', 'ceaseless_approvals_open', '{}',
           (select count(*) from ceaseless.approvals a where a.decision is null)
    union all
    -- A listener sends them within about a second: a backlog that stays means
    -- none is relaying.
    select 'ceaseless_announcements_waiting', 'ceaseless_announcements_waiting', '{}',
           (select count(*) from ceaseless.announcements)
    union all
    select 'ceaseless_oldest_announcement_age_seconds',
           'ceaseless_oldest_announcement_age_seconds', '{}',
           coalesce(extract(epoch from p_now - (select min(a.created_at)
                                                from ceaseless.announcements a)), 0)
    union all
    select 'ceaseless_routine_runs_running', 'ceaseless_routine_runs_running', '{}',
           (select count(*) from ceaseless.routine_runs r where r.status = 'running')
    union all
    -- routine_runs_last_ok_idx: one probe a routine, however many failed or
    -- refused runs came after its last success.
    select 'ceaseless_routine_last_success_timestamp_seconds',
           'ceaseless_routine_last_success_timestamp_seconds',
           jsonb_build_object('routine', r.name, 'routine_id', r.id::text),
           extract(epoch from ok.completed_at)
    from ceaseless.routines r
    cross join lateral (
        select rr.completed_at from ceaseless.routine_runs rr
        where rr.routine_id = r.id and rr.status = 'ok'
        order by rr.completed_at desc
        limit 1
    ) ok
    union all
    -- Counters.
    select regexp_replace(c.metric, '_(total|sum)$', ''), c.metric, c.labels, c.value
    from counted c
    where c.metric not like '%\_bucket'
    union all
    -- A histogram's buckets, every bound of it (0 below its first
    -- observation), cumulative as Prometheus reads them; its _count is the
    -- +Inf bucket: every observation.
    select regexp_replace(h.metric, '_bucket$', ''), h.metric,
           h.base || jsonb_build_object('le', case when b.bound = 'Infinity' then '+Inf'
                                                   else b.bound::text end),
           coalesce(sum(h.value) filter (where h.le <= b.bound), 0)
    from histograms h
    cross join unnest(ceaseless._metrics_duration_bounds()) b (bound)
    group by h.metric, h.base, b.bound
    union all
    select regexp_replace(h.metric, '_bucket$', ''),
           regexp_replace(h.metric, '_bucket$', '_count'), h.base, sum(h.value)
    from histograms h
    group by h.metric, h.base
)
-- A histogram's label set together (its buckets, _count, _sum), the buckets
-- by numeric le: as text, 10800 would come before 15.
select s.family, f.kind, f.help, s.sample, s.labels, s.value
from samples s
join families f on f.family = s.family
order by s.family, (s.labels - 'le')::text, s.sample,
         (s.labels ->> 'le')::double precision
$$;

comment on function metrics_snapshot(timestamptz) is
    'Every database-wide series of GET /metrics, one row a sample: live queue depth, blocked jobs '
    'and lane usage from partial indexes, each routine''s last success, counters from '
    'metric_totals + metric_deltas (0 for every label set that can exist), histogram buckets in '
    'numeric le order. Reads no history.';
