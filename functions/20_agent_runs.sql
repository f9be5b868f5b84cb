-- Agent runs: start and finish, and the outcome → job state machine.
--
-- Called by: listeners, in batches (one call for every run that started or
-- finished since the last call), so the hot path costs one round trip per
-- batch rather than per job.
-- Guarantees: a run starts only for a job its caller still holds; a job's
-- state follows its run's outcome in the same statement; a run finished
-- earlier (cancel_job, expire_leases) keeps that outcome and only gains the
-- details its agent reported. NOTIFY ceaseless_run / ceaseless_job by trigger.

set local search_path = ceaseless, pg_catalog, public;

-- enable_seqscan = off, jit = off: see the head of 10_jobs.sql.

-- Open one agent_run per job in p_job_ids that p_worker still holds in state
-- claimed, and move those jobs to running. Jobs it no longer holds (cancelled
-- or expired meanwhile) are left out of the result: the caller must not run
-- them.
create or replace function start_runs(
    p_worker text,
    p_job_ids uuid[],
    p_now timestamptz default now()
)
returns table (job_id uuid, run_id uuid)
language plpgsql
set search_path = ceaseless, pg_catalog
set enable_seqscan = off
set jit = off
as $$
#variable_conflict use_column
begin
    perform set_config('ceaseless.actor', p_worker, true);
    return query
    with held as (
        select j.id, j.agent, j.attempts, a.adapter, a.model
        from unnest(p_job_ids) as x(id)
        join job j on j.id = x.id
        join agents a on a.name = j.agent
        where j.state = 'claimed'
          and j.claimed_by = p_worker
        for update of j
    ),
    moved as (
        update job j
        set state = 'running', updated_at = p_now
        from held h
        where j.id = h.id
        returning j.id
    ),
    opened as (
        insert into agent_run (job_id, agent, adapter, model, worker, attempt, started_at)
        select h.id, h.agent, h.adapter, h.model, p_worker, h.attempts, p_now
        from held h
        returning agent_run.job_id, agent_run.id
    )
    select o.job_id, o.id from opened o;
end;
$$;

comment on function start_runs(text, uuid[], timestamptz) is
    'Open an agent_run for each job p_worker still holds and mark those jobs running; '
    'returns (job_id, run_id) for the ones it may run.';

-- Finish runs in a batch and move their jobs by outcome:
--   succeeded                                   → delivered
--   budget_exhausted, output_budget_exhausted   → blocked (a person must add budget or split the work)
--   cancelled                                   → cancelled
--   failed, timed_out, rate_limited             → pending after backoff while attempts remain, else failed
-- A succeeded run of a job that expects a reply (job.expects_reply) but
-- reported an empty final message is recorded as failed.
-- A rate limit with a reported reset time waits until then, pauses the whole
-- lane until then (every job of the lane would hit the same limit), and does
-- not use up an attempt: the provider paused, the job did not fail.
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
returns table (run_id uuid, job_id uuid, job_state text)
language plpgsql
set search_path = ceaseless, pg_catalog
set enable_seqscan = off
set jit = off
as $$
#variable_conflict use_column
begin
    perform set_config('ceaseless.actor', p_worker, true);

    return query
    with reported as (
        select *
        from jsonb_to_recordset(p_results) as x(
            run_id uuid, outcome text, exit_status integer, final_message text, error text,
            session_id text, billing text, model text, tokens_in bigint, tokens_out bigint,
            cost_usd numeric, num_turns integer, rate_limit_reset_at timestamptz,
            pr_forge text, pr_owner text, pr_repo text, pr_number bigint,
            pr_head_branch text, pr_url text)
    ),
    -- Whether each run was still open decides whether its outcome moves the
    -- job; read under lock so a concurrent cancel or expiry is seen.
    --
    -- Every step below probes the tables by key for each row of the batch,
    -- the batch on the outer side: the reads through LATERAL subqueries that
    -- the planner cannot flatten and turn around (fenced by FOR UPDATE or
    -- OFFSET 0), the two updates because no table may be scanned here
    -- (enable_seqscan, at the head of this file). The planner cannot size the
    -- batch, and on a young table, or one whose statistics predate the burst,
    -- a filter such as "running jobs of this worker" looks empty: turned
    -- around, a join rescans the whole batch for every row, quadratic in the
    -- batch (seconds at 2,000).
    target as (
        select x.*, r.was_open,
               -- A job that expects a reply and got none has failed, whatever
               -- the process's exit status said.
               (r.expects_reply and x.outcome = 'succeeded'
                and coalesce(btrim(x.final_message), '') = '') as empty_reply
        from reported x
        cross join lateral (
            select r.finished_at is null as was_open, j.expects_reply
            from agent_run r
            join job j on j.id = r.job_id
            where r.id = x.run_id
            for update of r
        ) r
    ),
    finished as (
        update agent_run r
        set outcome = coalesce(r.outcome, case when t.empty_reply then 'failed' else t.outcome end),
            finished_at = coalesce(r.finished_at, p_now),
            exit_status = coalesce(r.exit_status, t.exit_status),
            final_message = coalesce(r.final_message, t.final_message),
            error = coalesce(r.error, t.error,
                             case when t.empty_reply then 'the agent''s reply was empty' end),
            session_id = coalesce(r.session_id, t.session_id),
            billing = case when r.billing = 'unknown' then coalesce(t.billing, r.billing)
                           else r.billing end,
            model = coalesce(t.model, r.model),
            tokens_in = coalesce(r.tokens_in, t.tokens_in),
            tokens_out = coalesce(r.tokens_out, t.tokens_out),
            cost_usd = coalesce(r.cost_usd, t.cost_usd),
            num_turns = coalesce(r.num_turns, t.num_turns),
            rate_limit_reset_at = coalesce(r.rate_limit_reset_at, t.rate_limit_reset_at),
            pr_forge = coalesce(r.pr_forge, t.pr_forge),
            pr_owner = coalesce(r.pr_owner, t.pr_owner),
            pr_repo = coalesce(r.pr_repo, t.pr_repo),
            pr_number = coalesce(r.pr_number, t.pr_number),
            pr_head_branch = coalesce(r.pr_head_branch, t.pr_head_branch),
            pr_url = coalesce(r.pr_url, t.pr_url)
        from target t
        where r.id = t.run_id
        returning r.id, r.job_id, r.agent, r.outcome, r.error, r.rate_limit_reset_at, t.was_open
    ),
    decided as (
        select f.id as run_id, f.job_id, f.outcome, f.error, f.rate_limit_reset_at,
               j.attempts < coalesce(j.max_attempts, a.max_attempts) as attempts_left
        from finished f
        cross join lateral (
            -- Only the key inside the fence: given the state too, the planner
            -- may walk a partial index of live jobs instead of the primary key.
            select j.attempts, j.max_attempts, j.agent, j.state, j.claimed_by
            from job j
            where j.id = f.job_id
            offset 0
        ) j
        join agents a on a.name = j.agent
        where f.was_open and j.state = 'running' and j.claimed_by = p_worker
    ),
    moved as (
        update job j
        set state = case
                when d.outcome = 'succeeded' then 'delivered'
                when d.outcome in ('budget_exhausted', 'output_budget_exhausted') then 'blocked'
                when d.outcome = 'cancelled' then 'cancelled'
                when d.outcome = 'rate_limited' and d.rate_limit_reset_at is not null then 'pending'
                when d.attempts_left then 'pending'
                else 'failed'
            end,
            claimed_by = case when d.outcome in ('failed', 'timed_out', 'rate_limited', 'lease_expired')
                                   and (d.attempts_left or d.rate_limit_reset_at is not null)
                              then null else j.claimed_by end,
            claim_expires_at = case when d.outcome in ('failed', 'timed_out', 'rate_limited', 'lease_expired')
                                         and (d.attempts_left or d.rate_limit_reset_at is not null)
                                    then null else j.claim_expires_at end,
            finished_at = case when d.outcome in ('failed', 'timed_out', 'rate_limited', 'lease_expired')
                                    and (d.attempts_left or d.rate_limit_reset_at is not null)
                               then null else p_now end,
            run_after = case
                when d.outcome = 'rate_limited' and d.rate_limit_reset_at is not null
                    then greatest(d.rate_limit_reset_at, p_now)
                when d.outcome in ('failed', 'timed_out', 'rate_limited')
                    then p_now + _retry_delay(j.attempts)
                else j.run_after
            end,
            attempts = case when d.outcome = 'rate_limited' and d.rate_limit_reset_at is not null
                            then greatest(j.attempts - 1, 0) else j.attempts end,
            last_error = case when d.outcome = 'succeeded' then j.last_error
                              else coalesce(d.error, d.outcome) end,
            updated_at = p_now
        from decided d
        where j.id = d.job_id
        returning d.run_id, j.id, j.state
    ),
    paused as (
        update agents a
        set paused_until = greatest(coalesce(a.paused_until, p_now), d.reset_at),
            updated_at = p_now
        from (select f.agent, max(f.rate_limit_reset_at) as reset_at
              from finished f
              where f.outcome = 'rate_limited' and f.rate_limit_reset_at > p_now
              group by f.agent) d
        where a.name = d.agent
        returning a.name
    )
    -- Moved jobs report their new state; the rest (already ended by a
    -- cancel or an expiry, or held by another listener now) report the state
    -- they keep. Two halves rather than a join of `finished` to `moved`: the
    -- planner cannot size either, and joined it loops over both, which is
    -- quadratic in the batch.
    select m.run_id, m.id, m.state
    from moved m
    union all
    select f.id, f.job_id, j.state
    from finished f
    cross join lateral (
        select j.state, j.claimed_by from job j where j.id = f.job_id offset 0
    ) j
    where not (f.was_open and j.state = 'running' and j.claimed_by = p_worker);
end;
$$;

comment on function finish_runs(text, jsonb, timestamptz) is
    'Finish a batch of agent runs and move each job by its outcome (delivered, blocked, '
    'cancelled, retry with backoff, failed); a rate limit with a reset time pauses the lane.';
