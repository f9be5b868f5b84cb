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
as $$
#variable_conflict use_column
begin
    perform set_config('ceaseless.actor', p_worker, true);
    return query
    with held as (
        select j.id, j.agent, j.attempts, a.adapter, a.model
        from job j
        join agents a on a.name = j.agent
        where j.id = any (p_job_ids)
          and j.state = 'claimed'
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
    target as (
        select r.id, r.finished_at is null as was_open,
               -- A job that expects a reply and got none has failed, whatever
               -- the process's exit status said.
               (j.expects_reply and x.outcome = 'succeeded'
                and coalesce(btrim(x.final_message), '') = '') as empty_reply
        from agent_run r
        join reported x on x.run_id = r.id
        join job j on j.id = r.job_id
        -- Probe by primary key: jsonb_to_recordset hides the batch's size
        -- from the planner, which would otherwise hash-join it against a
        -- scan of every run ever recorded.
        where r.id = any (array(select reported.run_id from reported))
        for update of r
    ),
    finished as (
        update agent_run r
        set outcome = coalesce(r.outcome, case when t.empty_reply then 'failed' else x.outcome end),
            finished_at = coalesce(r.finished_at, p_now),
            exit_status = coalesce(r.exit_status, x.exit_status),
            final_message = coalesce(r.final_message, x.final_message),
            error = coalesce(r.error, x.error,
                             case when t.empty_reply then 'the agent''s reply was empty' end),
            session_id = coalesce(r.session_id, x.session_id),
            billing = case when r.billing = 'unknown' then coalesce(x.billing, r.billing)
                           else r.billing end,
            model = coalesce(x.model, r.model),
            tokens_in = coalesce(r.tokens_in, x.tokens_in),
            tokens_out = coalesce(r.tokens_out, x.tokens_out),
            cost_usd = coalesce(r.cost_usd, x.cost_usd),
            num_turns = coalesce(r.num_turns, x.num_turns),
            rate_limit_reset_at = coalesce(r.rate_limit_reset_at, x.rate_limit_reset_at),
            pr_forge = coalesce(r.pr_forge, x.pr_forge),
            pr_owner = coalesce(r.pr_owner, x.pr_owner),
            pr_repo = coalesce(r.pr_repo, x.pr_repo),
            pr_number = coalesce(r.pr_number, x.pr_number),
            pr_head_branch = coalesce(r.pr_head_branch, x.pr_head_branch),
            pr_url = coalesce(r.pr_url, x.pr_url)
        from reported x, target t
        where r.id = x.run_id and t.id = r.id
        returning r.id, r.job_id, r.agent, r.outcome, r.error, r.rate_limit_reset_at, t.was_open
    ),
    decided as (
        select f.id as run_id, f.job_id, f.outcome, f.error, f.rate_limit_reset_at,
               j.attempts < coalesce(j.max_attempts, a.max_attempts) as attempts_left
        from finished f
        join job j on j.id = f.job_id
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
        returning j.id, j.state
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
    select f.id, f.job_id, coalesce(m.state, j.state)
    from finished f
    join job j on j.id = f.job_id
    left join moved m on m.id = f.job_id;
end;
$$;

comment on function finish_runs(text, jsonb, timestamptz) is
    'Finish a batch of agent runs and move each job by its outcome (delivered, blocked, '
    'cancelled, retry with backoff, failed); a rate limit with a reset time pauses the lane.';
