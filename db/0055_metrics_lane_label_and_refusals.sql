-- GET /metrics names a lane `lane` in every series, counts refused fires per
-- routine and per loop, and serves blocked jobs and each routine's last
-- success (functions/94_metrics.sql); routine_status shows the refusals of
-- the last hour (functions/90_views.sql).

set local search_path = ceaseless, pg_catalog, public;

-- The finished-run counters were labelled `agent` while every gauge of the
-- same lane said `lane`: a PromQL join or a dashboard variable matched one or
-- the other, never both. Their stored totals take the gauges' name, so no
-- counter restarts.
update metric_totals
set labels = (labels - 'agent') || jsonb_build_object('lane', labels -> 'agent')
where metric in ('ceaseless_agent_runs_total',
                 'ceaseless_agent_run_duration_seconds_bucket',
                 'ceaseless_agent_run_duration_seconds_sum')
  and labels ? 'agent';

update metric_deltas
set labels = (labels - 'agent') || jsonb_build_object('lane', labels -> 'agent')
where metric in ('ceaseless_agent_runs_total',
                 'ceaseless_agent_run_duration_seconds_bucket',
                 'ceaseless_agent_run_duration_seconds_sum')
  and labels ? 'agent';

-- Refused fires now carry the routine they refused (a webhook refused with
-- 409 is not redelivered: the operator must see which routine lost it). The
-- old totals know no routine, so they are counted again from the skipped runs
-- that are kept: one counter reset, which rate() and increase() absorb.
delete from metric_deltas where metric = 'ceaseless_routine_skips_total';
delete from metric_totals where metric = 'ceaseless_routine_skips_total';

insert into metric_totals (metric, labels, value)
select 'ceaseless_routine_skips_total',
       jsonb_build_object('routine', r.name, 'routine_id', r.id::text,
                          'trigger', rr.trigger_type, 'reason', rr.skip_reason),
       count(*)
from routine_runs rr
join routines r on r.id = rr.routine_id
where rr.status = 'skipped'
group by r.name, r.id, rr.trigger_type, rr.skip_reason;

-- A loop's refused fires are counted the same way, from its first scrape on,
-- so the ones already kept count too.
insert into metric_totals (metric, labels, value)
select 'ceaseless_loop_skips_total',
       jsonb_build_object('loop', l.title, 'loop_id', l.id::text,
                          'trigger', coalesce(r.trigger_type, ''), 'reason', r.skip_reason),
       count(*)
from topology_runs r
join loops l on l.id = r.loop_id
where r.status = 'skipped'
group by l.title, l.id, r.trigger_type, r.skip_reason;

-- ceaseless_jobs_blocked counts each lane's blocked jobs on every scrape:
-- without this index that is a scan of all finished jobs.
create index job_blocked_idx on job (agent) where state = 'blocked';

comment on index job_blocked_idx is
    'Blocked jobs by lane: ceaseless_jobs_blocked reads these entries only, never the finished '
    'jobs around them.';

-- ceaseless_routine_last_success_timestamp_seconds reads each routine's
-- latest ok run: through idx_routine_runs_routine that walks every failed or
-- skipped run since, which is the case the alert exists for.
create index routine_runs_last_ok_idx on routine_runs (routine_id, completed_at desc)
    where status = 'ok';

comment on index routine_runs_last_ok_idx is
    'Each routine''s ok runs, newest first: its last success, read by every scrape in one probe.';

-- routine_status's last refusal (reason and time) of each routine, one probe
-- however many runs it had since.
create index routine_runs_skipped_idx on routine_runs (routine_id, started_at desc)
    where status = 'skipped';

comment on index routine_runs_skipped_idx is
    'Each routine''s refused fires, newest first: routine_status''s refusals of the last hour and '
    'the last refusal''s reason and time.';
