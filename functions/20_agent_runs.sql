-- Agent runs: sessions noted while they run, results recorded when they end,
-- and the outcome → job state machine.
--
-- Called by: listeners, in batches (one call for every run that reported a
-- session or finished since the last call), so the hot path costs one round
-- trip per batch rather than per job. Runs are opened by claim_jobs.
-- Guarantees: a result is written onto its run only while that run is still
-- open and its job still held by the reporting listener at the run's attempt
-- (the claim is the fence); a result for a run someone else ended — a lease
-- sweep, a release, a cancel — is kept apart in late_results and audited, and
-- the closed run is never rewritten; a repeated report of a result already
-- recorded (its reply was lost) is answered as recorded, not kept apart. A
-- job's state follows its run's outcome in the same statement. Locks: the
-- job row before the run row, as every queue function does, so a finish and a
-- cancel of the same job queue instead of deadlocking. NOTIFY ceaseless_run /
-- ceaseless_job by trigger.

-- Planner settings: see the head of 10_jobs.sql.

-- Record the session each agent reported as it started (Claude Code's init
-- line), while the run is still going: if the listener dies mid-run, the lease
-- sweep hands the session to the job, and the next attempt resumes it instead
-- of starting over. Only open runs of p_worker are touched; an implausible
-- id is skipped. Returns how many runs gained a session.
create or replace function note_sessions(
    p_worker text,
    p_run_ids uuid[],
    p_session_ids text[]
)
returns integer
language plpgsql
as $$
declare
    v_count integer;
begin
    -- Each run probed by key and locked, the batch on the outer side (OFFSET
    -- 0 fences the probe), and judged on the locked row; the update then
    -- joins by key alone. Joined with its conditions, the update was planned
    -- for one run by a listener's first calls and then looped over the batch
    -- for each open run: a million rows discarded, 14 s, for a thousand runs
    -- (tests/sql/test_batch_plans.py).
    with noted as (
        select r.id, s.session_id
        from unnest(p_run_ids, p_session_ids) as s(run_id, session_id)
        cross join lateral (
            select r.id, r.worker, r.finished_at, r.session_id
            from agent_run r
            where r.id = s.run_id
            offset 0
            for no key update
        ) r
        where r.worker = p_worker
          and r.finished_at is null
          and _session_id_ok(s.session_id)
          and r.session_id is distinct from s.session_id
    )
    update agent_run r
    set session_id = n.session_id
    from noted n
    where r.id = n.id;
    get diagnostics v_count = row_count;
    return v_count;
end;
$$;

comment on function note_sessions(text, uuid[], text[]) is
    'Store the session id each open run of p_worker reported at its start, so a rescued job '
    'can resume it; implausible ids are skipped.';

-- What a job becomes when its run ends with p_outcome: the one outcome →
-- job state rule, for finish_runs (an agent's verdict) and expire_leases (a
-- vanished listener's run, lease_expired).
--
-- | outcome                                   | job                              |
-- |-------------------------------------------|----------------------------------|
-- | succeeded                                 | delivered                        |
-- | budget_exhausted, output_budget_exhausted | blocked: a person must add       |
-- |                                           | budget or split the work         |
-- | auth_failed                               | blocked: a person must log the   |
-- |                                           | agent in                         |
-- | needs_human                               | blocked: the agent asked for a   |
-- |                                           | person (reply_job answers it)    |
-- | cancelled                                 | cancelled                        |
-- | rate_limited with a reset time            | pending: the provider paused,    |
-- |                                           | the job did not fail             |
-- | failed, timed_out, rate_limited,          | pending while attempts are left  |
-- | lease_expired                             | (p_attempts < p_max_attempts)    |
-- | lease_expired, none left                  | abandoned: the system gave up,   |
-- |                                           | no agent said it failed          |
-- | failed, timed_out, rate_limited, none left| failed                           |
--
-- Pending is the one state a run's end can send a job back to; every other is
-- where it stays until a person acts (retry_job).
--
-- PL/pgSQL, not SQL: finish_runs calls it once per run of a batch, and a SQL
-- function with a SET clause, which cannot be inlined, costs about twice as
-- much per call (9 µs against 4 µs on PostgreSQL 15).
create or replace function _job_state_after(
    p_outcome text,
    p_attempts integer,
    p_max_attempts integer,
    p_rate_limit_reset_at timestamptz default null
)
returns text
language plpgsql immutable
as $$
begin
    return case
        when p_outcome = 'succeeded' then 'delivered'
        when p_outcome in ('budget_exhausted', 'output_budget_exhausted', 'auth_failed',
                           'needs_human') then 'blocked'
        when p_outcome = 'cancelled' then 'cancelled'
        when p_outcome = 'rate_limited' and p_rate_limit_reset_at is not null then 'pending'
        when p_attempts < p_max_attempts then 'pending'
        when p_outcome = 'lease_expired' then 'abandoned'
        else 'failed'
    end;
end;
$$;

comment on function _job_state_after(text, integer, integer, timestamptz) is
    'The state a job moves to when its run ends with p_outcome, after p_attempts of '
    'p_max_attempts attempts: delivered, blocked (budget_exhausted, output_budget_exhausted, '
    'auth_failed, needs_human), cancelled, pending (another attempt, or a rate limit''s reset), '
    'abandoned (lease_expired, none left) or failed.';

-- The results a listener reports (finish_runs' p_results), one row each.
-- A function of its own for its estimate: the planner guesses a hundred rows
-- for any set-returning function, and against a batch that size it hashed
-- the batch against a read of every run until the table held ten thousand
-- runs or so, so each finish of a young database read all the runs before
-- it. A listener reports what ended since its last report, most often a
-- handful; a drain's batches of a thousand stay linear on this estimate too
-- (tests/sql/test_batch_plans.py).
create or replace function _reported_results(p_results jsonb)
returns table (
    run_id uuid, outcome text, exit_status integer, final_message text, error text,
    session_id text, billing text, model text, tokens_in bigint, tokens_out bigint,
    cost_usd numeric, num_turns integer, rate_limit_reset_at timestamptz,
    pr_forge text, pr_owner text, pr_repo text, pr_number bigint,
    pr_head_branch text, pr_url text
)
language plpgsql
immutable
rows 10
-- PL/pgSQL: a SQL function with a SET clause is parsed and planned at every call.
as $$
begin
    return query
    select *
    from jsonb_to_recordset(p_results) as x(
        run_id uuid, outcome text, exit_status integer, final_message text, error text,
        session_id text, billing text, model text, tokens_in bigint, tokens_out bigint,
        cost_usd numeric, num_turns integer, rate_limit_reset_at timestamptz,
        pr_forge text, pr_owner text, pr_repo text, pr_number bigint,
        pr_head_branch text, pr_url text);
end;
$$;

comment on function _reported_results(jsonb) is
    'finish_runs'' p_results as rows (run_id, outcome and the fields a run reports), planned '
    'as ten.';

-- Finish runs in a batch and move each job by its run's outcome
-- (_job_state_after). Beside the state:
-- - a run whose reported usage takes its job's spend to its ceiling
--   (job.max_cost_usd, job.max_tokens, over all its runs) is
--   budget_exhausted, whatever the agent said: the job is blocked until a
--   person raises the ceiling (raise_job_budget);
-- - a reply waiting on the job (reply_job) stays while the job goes back to
--   pending, and is spent when the job ends;
-- - a succeeded run of a job that expects a reply (job.expects_reply) but
--   reported an empty final message is recorded as failed;
-- - a failed, timed-out or rate-limited job going back to pending waits for
--   a backoff (_retry_delay), a lease_expired one is due at once;
-- - a rate limit with a reported reset time waits until then, pauses the
--   whole lane until then (every job of the lane would hit the same limit),
--   and does not use up an attempt: the provider paused, the job did not
--   fail. The reset is the agent's word, and agents print what their prompt
--   asks: it is clamped to rate_limit_max_wait_secs after p_now, so no reply
--   can stop a lane for longer;
-- - an agent that could not authenticate (auth_failed) fails on every
--   attempt until a person logs it in: its job is blocked at once and its
--   attempt refunded; the job's trigger (_tg_job_ended,
--   60_notifications.sql) tells someone, as it does for needs_human;
-- - an interrupted run (lease_expired, rate_limited) hands its session to
--   the job, so the next attempt resumes it, if the id is one an agent CLI
--   can resume (_resumable); else the job keeps the session it had.
--
-- A result is recorded only on a run that is still open, is p_worker's, and
-- whose job p_worker still holds at that attempt. Any other is refused:
-- kept in late_results with the reason, audited, and reported with
-- recorded = false. The one exception is a result this worker already
-- recorded (ended_by = 'agent'): a retry after a lost reply, answered as
-- recorded.
--
-- p_results: a JSON array of objects with run_id, outcome and any of
-- exit_status, final_message, error, session_id, billing, model, tokens_in,
-- tokens_out, cost_usd, num_turns, rate_limit_reset_at, pr_forge, pr_owner,
-- pr_repo, pr_number, pr_head_branch, pr_url.
create or replace function finish_runs(
    p_worker text,
    p_results jsonb,
    p_now timestamptz default now()
)
returns table (run_id uuid, job_id uuid, job_state text, recorded boolean, refusal text)
language plpgsql
-- Planned by a listener's first finishes on a new database, while agent_run
-- is under ten pages (which the planner counts as ten), the runs' update
-- hashed the batch against a read of every run, and the session kept that
-- plan while the table grew: a finish of ten after 3,000 runs read all of
-- them (tests/sql/test_batch_plans.py, test_without_enable_seqscan_a_finish_…;
-- docs/performance.md, "Planner settings on functions").
set enable_seqscan = off
as $$
#variable_conflict use_column
begin
    perform set_config('ceaseless.actor', p_worker, true);
    return query
    -- The batch, one row per result reported.
    with reported as (
        select * from _reported_results(p_results)
    ),
    -- Each result against its run and the run's job, the job locked first
    -- (the order of every queue function), so a concurrent cancel or expiry
    -- either finished before this read — and is seen — or waits for it.
    --
    -- Every step below probes the tables by key for each row of the batch,
    -- the batch on the outer side: the reads through LATERAL subqueries that
    -- the planner cannot flatten and turn around (fenced by FOR UPDATE or
    -- OFFSET 0), the updates by joining the batch to the key (the plan tests
    -- in tests/sql/test_batch_plans.py find no scan of a table against the
    -- batch, on PostgreSQL 15 or 18). The planner cannot size the batch, and on a
    -- young table, or one whose statistics predate the burst,
    -- a filter such as "running jobs of this worker" looks empty: turned
    -- around, a join rescans the whole batch for every row, quadratic in the
    -- batch (seconds at 2,000).
    target as (
        select x.*, r.run_job_id, r.run_finished_at, r.held, r.repeat, r.refusal, r.job_state,
               -- The verdict (72_forge_verdict.sql: a human asked for, any
               -- kind; a pull request, a plan's children, forge kinds), unless
               -- the job's spend reached its ceiling with this run
               -- (_job_budget_left, with this run's own report): then the
               -- run is budget_exhausted and its job blocked until a person
               -- raises the ceiling, whatever the agent said; a failure is
               -- not retried, another attempt would spend past it too.
               case when b.spent then 'budget_exhausted'
                    else coalesce(v.outcome, x.outcome) end as verdict,
               case when b.spent
                        then format('the job''s spend reached its ceiling with this run '
                                    '(max_cost_usd %s, max_tokens %s; left before it: %s USD, '
                                    '%s tokens; this run: %s USD, %s tokens)%s',
                                    coalesce(r.max_cost_usd::text, 'none'),
                                    coalesce(r.max_tokens::text, 'none'),
                                    coalesce(b.usd::text, '-'), coalesce(b.tokens::text, '-'),
                                    coalesce(x.cost_usd, 0),
                                    coalesce(x.tokens_in, 0) + coalesce(x.tokens_out, 0),
                                    coalesce(': ' || coalesce(v.error, x.error), ''))
                    else coalesce(v.error, x.error) end as verdict_error,
               -- The reported reset, never further than the ceiling: the
               -- setting is read only for a run that reported one.
               case when x.rate_limit_reset_at is not null
                    then least(x.rate_limit_reset_at,
                               p_now + make_interval(
                                   secs => _setting_int('rate_limit_max_wait_secs')))
               end as reset_at,
               -- A job that expects a reply and got none (or only whitespace)
               -- has failed, whatever the process's exit status said.
               (r.expects_reply and x.outcome = 'succeeded'
                and _is_blank(x.final_message)) as empty_reply
        from reported x
        left join lateral (
            select r.job_id as run_job_id, r.finished_at as run_finished_at,
                   j.state as job_state, j.expects_reply,
                   j.kind as job_kind, j.max_cost_usd, j.max_tokens,
                   -- The fence: open, ours, and the job still ours at this attempt.
                   (r.finished_at is null and r.worker = p_worker
                    and j.state = 'running' and j.claimed_by = p_worker
                    and j.attempts = r.attempt) as held,
                   (r.finished_at is not null and r.ended_by = 'agent'
                    and r.worker = p_worker) as repeat,
                   case
                       when r.worker <> p_worker
                           then format('run belongs to listener %s', r.worker)
                       when r.finished_at is not null
                           then format('run already ended (%s, by %s)', r.outcome,
                                       coalesce(r.ended_by, 'an earlier version'))
                       else format('job is no longer held by this listener (%s, held by %s)',
                                   j.state, coalesce(j.claimed_by, 'nobody'))
                   end as refusal
            from agent_run r
            join job j on j.id = r.job_id
            where r.id = x.run_id
            for update of j
        ) r on true
        -- Any kind's reply may ask for a human; only a forge run is judged on
        -- more, so another kind's is read only when it holds the block.
        -- OFFSET 0 keeps this subquery whole: pulled up into the join, its
        -- WHERE would filter the function's rows after calling it for every
        -- run; kept whole, the WHERE gates the call (a one-time filter).
        left join lateral (
            select v.outcome, v.error
            from _forge_verdict(r.run_job_id, r.job_kind, x.final_message, x.pr_number) v
            where x.outcome = 'succeeded'
              and (r.job_kind in ('discover', 'plan', 'implement')
                   or strpos(x.final_message, '```ceaseless') > 0)
            offset 0
        ) v on true
        -- What was left of the job's ceilings before this run (its own
        -- cost is not on the open run yet), and whether this run's report
        -- spends it; read only for a job with a ceiling, and only for an
        -- outcome the ceiling overrides (a rate limit or a cancel is no spend
        -- verdict; budget_exhausted already is one).
        left join lateral (
            select l.usd, l.tokens,
                   coalesce(l.usd - coalesce(x.cost_usd, 0) <= 0, false)
                   or coalesce(l.tokens - coalesce(x.tokens_in, 0)
                               - coalesce(x.tokens_out, 0) <= 0, false) as spent
            from _job_budget_left(r.run_job_id, r.max_cost_usd, r.max_tokens) l
            where x.outcome in ('succeeded', 'failed', 'timed_out')
              and (r.max_cost_usd is not null or r.max_tokens is not null)
            offset 0  -- the WHERE gates the call, as above
        ) b on true
    ),
    -- The result onto its run, only where the fence holds: what a run
    -- reports is written once, by the listener that holds its job.
    finished as (
        update agent_run r
        set outcome = case when t.empty_reply then 'failed' else t.verdict end,
            finished_at = p_now,
            ended_by = 'agent',
            exit_status = t.exit_status,
            final_message = t.final_message,
            error = coalesce(t.verdict_error,
                             case when t.empty_reply then 'the agent''s reply was empty' end),
            session_id = case when t.session_id is not null and _session_id_ok(t.session_id)
                              then t.session_id
                              else r.session_id end,
            billing = case when r.billing = 'unknown' then coalesce(t.billing, r.billing)
                           else r.billing end,
            model = coalesce(t.model, r.model),
            tokens_in = t.tokens_in,
            tokens_out = t.tokens_out,
            cost_usd = t.cost_usd,
            num_turns = t.num_turns,
            rate_limit_reset_at = t.reset_at,
            pr_forge = t.pr_forge,
            pr_owner = t.pr_owner,
            pr_repo = t.pr_repo,
            pr_number = t.pr_number,
            pr_head_branch = t.pr_head_branch,
            pr_url = t.pr_url
        from target t
        where r.id = t.run_id
          and t.held
          -- Rechecked on the row as updated: a run closed since `target` read
          -- it (its job was locked, its run was not) stays as it was closed.
          -- Against what `target` read (NULL: open), not as `is null`, which
          -- let the planner read every open run through agent_run_one_open_idx
          -- and hash them against the batch: a finish of one run read all of
          -- them (tests/sql/test_batch_plans.py).
          and r.finished_at is not distinct from t.run_finished_at
        returning r.id, r.job_id, r.agent, r.outcome, r.error, r.rate_limit_reset_at,
                  r.session_id
    ),
    -- What each finished run makes of its job (_job_state_after, the rule
    -- expire_leases follows too). The job is read again, by key only: given
    -- the state too, the planner may walk a partial index of live jobs
    -- instead of the primary key.
    decided as (
        select f.id as run_id, f.job_id, f.outcome, f.error, f.rate_limit_reset_at,
               f.session_id, s.state
        from finished f
        cross join lateral (
            select j.attempts, j.max_attempts, j.agent
            from job j
            where j.id = f.job_id
            offset 0
        ) j
        join agents a on a.name = j.agent
        -- Called once per run (OFFSET 0 keeps the call here): `moved` reads
        -- the state eight times, and each read of an expression pulled up
        -- into it would call the function again.
        cross join lateral (
            select _job_state_after(f.outcome, j.attempts,
                                    coalesce(j.max_attempts, a.max_attempts),
                                    f.rate_limit_reset_at) as state
            offset 0
        ) s
    ),
    -- The job follows its run. Back to pending (another attempt, or the wait
    -- for a rate limit's reset) it is unclaimed and unfinished, as the queue's
    -- constraints require of a pending job; anywhere else it keeps who held
    -- it, and is finished now.
    moved as (
        update job j
        set state = d.state,
            claimed_by = case when d.state = 'pending' then null else j.claimed_by end,
            claim_expires_at = case when d.state = 'pending' then null else j.claim_expires_at end,
            claimed_at = case when d.state = 'pending' then null else j.claimed_at end,
            finished_at = case when d.state = 'pending' then null else p_now end,
            run_after = case
                when d.outcome = 'rate_limited' and d.rate_limit_reset_at is not null
                    then greatest(d.rate_limit_reset_at, p_now)
                when d.outcome in ('failed', 'timed_out', 'rate_limited')
                    then p_now + _retry_delay(j.attempts)
                when d.outcome = 'lease_expired' then p_now
                else j.run_after
            end,
            -- Neither a provider's pause nor a missing login is the job's
            -- failure: the attempt is given back.
            attempts = case when (d.outcome = 'rate_limited' and d.rate_limit_reset_at is not null)
                                 or d.outcome = 'auth_failed'
                            then greatest(j.attempts - 1, 0) else j.attempts end,
            resume_session_id = case when d.outcome in ('lease_expired', 'rate_limited')
                                     then coalesce(_resumable(d.session_id), j.resume_session_id)
                                     else j.resume_session_id end,
            last_error = case when d.outcome = 'succeeded' then j.last_error
                              else coalesce(d.error, d.outcome) end,
            -- A reply waits for the job's next run while the job goes on (a
            -- retry, a run cut short), and is spent once the job ends.
            reply = case when d.state = 'pending' then j.reply end,
            replied_by = case when d.state = 'pending' then j.replied_by end,
            replied_at = case when d.state = 'pending' then j.replied_at end,
            updated_at = p_now
        from decided d
        where j.id = d.job_id
        returning d.run_id, j.id, j.state
    ),
    -- A rate limit pauses its lane until the latest reset reported, in
    -- lane_pauses rather than on the agents row: a change there is a
    -- configuration change, audited and announced to every listener (NOTIFY
    -- ceaseless_config), for what is only a wait. A pause is only ever
    -- lengthened: a run that saw an earlier reset does not cut short a later
    -- one. In lane order, so two batches pausing the same lanes queue rather
    -- than deadlock.
    paused as (
        insert into lane_pauses as p (agent, paused_until, reason, updated_at)
        select f.agent, max(f.rate_limit_reset_at), 'rate limit', p_now
        from finished f
        where f.outcome = 'rate_limited' and f.rate_limit_reset_at > p_now
        group by f.agent
        order by f.agent
        on conflict (agent) do update
        set paused_until = greatest(p.paused_until, excluded.paused_until),
            reason = case when excluded.paused_until >= p.paused_until then excluded.reason
                          else p.reason end,
            updated_at = excluded.updated_at
        returning p.agent
    ),
    -- Refused results, kept whole (each text within agent_run's bounds) with
    -- the reason, so an operator can see what the fenced-off agent did.
    kept as (
        insert into late_results (run_id, job_id, worker, reason, result, received_at)
        select t.run_id, t.run_job_id, p_worker,
               coalesce(t.refusal, 'no such run'),
               jsonb_strip_nulls(jsonb_build_object(
                   'outcome', t.outcome, 'exit_status', t.exit_status,
                   'final_message', left(t.final_message, 65536),
                   'error', left(t.error, 65536),
                   'session_id', left(t.session_id, 200), 'billing', t.billing,
                   'model', left(t.model, 200), 'tokens_in', t.tokens_in,
                   'tokens_out', t.tokens_out, 'cost_usd', t.cost_usd,
                   'num_turns', t.num_turns, 'rate_limit_reset_at', t.rate_limit_reset_at,
                   'pr_url', left(t.pr_url, 2000))),
               p_now
        from target t
        where not coalesce(t.held or t.repeat, false)
        returning late_results.run_id, late_results.job_id, late_results.reason
    ),
    -- A refused result is an event an operator must be able to find: some
    -- listener ran an agent it no longer held.
    audited as (
        insert into audit_log (entity, entity_id, action, detail)
        select 'agent_run', k.run_id, 'late_result',
               jsonb_strip_nulls(jsonb_build_object('job_id', k.job_id, 'reason', k.reason))
        from kept k
        returning 1
    )
    -- Three parts rather than joins of the CTEs to one another: the planner
    -- cannot size any of them, and joined it loops over both sides, which is
    -- quadratic in the batch. A held run is always in `moved`: every path that
    -- ends a run locks its job first (cancel_job, expire_leases, release_jobs,
    -- this function), so once `target` holds the job the run cannot end before
    -- the update, and the recheck in `finished` is a guard, never a branch.
    select m.run_id, m.id, m.state, true, null::text
    from moved m
    union all
    select t.run_id, t.run_job_id, t.job_state, true, null
    from target t
    where t.repeat
    union all
    select k.run_id, k.job_id, j.state, false, k.reason
    from kept k
    left join lateral (select j.state from job j where j.id = k.job_id offset 0) j on true;
end;
$$;

comment on function finish_runs(text, jsonb, timestamptz) is
    'Finish a batch of agent runs and move each job by its outcome (_job_state_after: '
    'delivered, blocked, cancelled, retry with backoff, failed); a rate limit with a reset time '
    'pauses the lane, for at most rate_limit_max_wait_secs; an agent that could not '
    'authenticate blocks its job, attempt refunded. A succeeded run gets its verdict first '
    '(_forge_verdict: a needs_human block blocks the job, any kind; an implement run without a '
    'pull request fails, a plan needs a valid children block); a run that reaches its job''s '
    'spend ceiling (max_cost_usd, max_tokens over all its runs) is budget_exhausted. '
    'A result for a run that is no longer the reporter''s is kept in late_results, never '
    'written onto the closed run (recorded = false).';
