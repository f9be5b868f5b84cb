-- Lanes: how many jobs each lane may start now, and whose jobs wait for their
-- owner's spend budget. The one statement of each rule; whoever admits or
-- explains work calls it rather than counting again.
--
-- Called by: claim_jobs (10_jobs.sql), which admits each lane's jobs up to its
-- free slots and holds back the jobs of owners over budget; governor_usage
-- (90_views.sql), which shows the same numbers to operators; _explain_lane and
-- explain_job (92_explain.sql), which name what holds a lane or an owner;
-- owner_budget_usage (90_views.sql), which shows owners their spend;
-- operators and the dashboard, which pause and resume lanes (pause_lane,
-- resume_lane).
-- Guarantees:
-- - the capacity rules are read only: nothing is locked or written there, so
--   the caller decides what to lock (claim_jobs locks the lanes first, then
--   counts); pause_lane and resume_lane write one lane_pauses row and its
--   audit row, and take no lock a claim waits for (a claim only reads
--   lane_pauses);
-- - the claim, the view and the explanation agree by construction: a lane is
--   held for the reasons _lane_capacity names, and its free slots are what the
--   claim admits;
-- - counts come from partial indexes of live jobs and from the window's runs
--   (agent_run_lane_window_idx), never from a lane's history; a claim counts
--   only what can bind (no window read for a lane without a budget), and
--   nothing at all for owners when owner_budgets is empty;
-- - like a lane's budgets, an owner's counts what a run reported when it
--   ended, so the runs admitted before a budget was reached may overshoot it
--   by what they cost.

-- What each lane may start now, and what holds it, read against p_now:
--
-- | held_by        | when                                                     |
-- |----------------|----------------------------------------------------------|
-- | agent_disabled | the agent is disabled                                    |
-- | lane_paused    | a row of lane_pauses has not reached its time: every job |
-- |                | of the lane would hit the same provider limit            |
-- | lane_full      | claimed and running jobs reach max_concurrent            |
-- | window_budget  | runs started in the window plus claimed jobs reach       |
-- |                | window_budget (a claim not yet started counts, or a      |
-- |                | burst of claims would overrun the budget before the runs |
-- |                | exist)                                                   |
-- | cost_budget    | what the window's runs reported reaches window_cost_usd  |
-- | token_budget   | ... or window_tokens (tokens_in + tokens_out)            |
--
-- free: 0 while anything holds the lane, else the smaller of what concurrency
-- and the window's run budget allow.
--
-- p_measure_all: a claim passes false and is told only what decides free
-- slots: a disabled or paused lane is not counted (its live and window
-- columns are 0 and held_by names only why it is closed), and the window of a
-- lane without a budget is not read (0), so a lane with a long history and no
-- budget costs nothing more than its live jobs. Operators' views and the
-- explanation pass true and get every count.
--
-- PL/pgSQL for its cached plan: a SQL function with a SET clause is planned
-- again on every call, and every claim calls this.
create or replace function _lane_capacity(
    p_now timestamptz,
    p_agents text[] default null,
    p_measure_all boolean default false
)
returns table (
    agent text, live bigint, claimed bigint, started_in_window bigint,
    cost_in_window numeric, tokens_in_window numeric, paused_until timestamptz,
    pause_reason text, held_by text[], free bigint
)
language plpgsql stable
rows 10
-- Its statement runs on the generic plan, where the window's start is a
-- parameter: the planner guesses a third of the lane's runs are in the window
-- and, on a large agent_run, reads it whole instead of the index range
-- (tests/sql/test_lane_window_plan.py; 65,574 buffers at 4,000,000 runs).
set enable_seqscan = off
as $$
#variable_conflict use_column
begin
    return query
    select a.name, live.n, live.claimed, win.n, win.cost, win.tokens, p.paused_until, p.reason,
           held.reasons,
           case when cardinality(held.reasons) > 0 then 0::bigint
                -- least() passes over NULL: a lane without a window budget
                -- is bounded by concurrency alone.
                else least(a.max_concurrent - live.n, a.window_budget - live.claimed - win.n)
           end
    from agents a
    left join lane_pauses p on p.agent = a.name and p.paused_until > p_now
    -- A partial index of live jobs (job_lane_live_idx or
    -- job_claim_expiry_idx): claimed and running jobs only, never the
    -- lane's finished ones.
    cross join lateral (
        select count(*) as n, count(*) filter (where j.state = 'claimed') as claimed
        from job j
        where j.agent = a.name and j.state in ('claimed', 'running')
          and (p_measure_all or (a.enabled and p.agent is null))
    ) live
    -- agent_run_lane_window_idx: the window's runs, never the lane's history.
    -- The condition on the lane alone is tested once per lane, before any
    -- read.
    cross join lateral (
        select count(*) as n,
               coalesce(sum(r.cost_usd), 0) as cost,
               coalesce(sum(coalesce(r.tokens_in, 0) + coalesce(r.tokens_out, 0)), 0) as tokens
        from agent_run r
        where r.agent = a.name
          and r.started_at > p_now - make_interval(secs => a.window_secs)
          and (p_measure_all
               or (a.enabled and p.agent is null
                   and num_nonnulls(a.window_budget, a.window_cost_usd, a.window_tokens) > 0))
    ) win
    cross join lateral (
        select array_remove(array[
                   case when not a.enabled then 'agent_disabled' end,
                   case when p.agent is not null then 'lane_paused' end,
                   case when live.n >= a.max_concurrent then 'lane_full' end,
                   case when live.claimed + win.n >= a.window_budget then 'window_budget' end,
                   case when win.cost >= a.window_cost_usd then 'cost_budget' end,
                   case when win.tokens >= a.window_tokens then 'token_budget' end
               ], null) as reasons
    ) held
    where p_agents is null or a.name = any (p_agents);
end;
$$;

comment on function _lane_capacity(timestamptz, text[], boolean) is
    'Per lane (all, or those in p_agents): its live and claimed jobs, the runs, cost and tokens '
    'of its window, the pause in force, what holds it (held_by: agent_disabled, lane_paused, '
    'lane_full, window_budget, cost_budget, token_budget) and its free slots (0 while held), '
    'read against p_now: the one rule claim_jobs admits by, governor_usage shows and '
    '_explain_lane explains. With p_measure_all false (a claim), a closed lane and the window '
    'of a lane without a budget are not counted.';

-- What an owner's runs reported in its budget window: summed from the runs
-- started in the window through agent_run_lane_window_idx, one lane at a
-- time, so it costs the window's runs and never the history.
create or replace function _owner_spend(p_budget owner_budgets, p_now timestamptz)
returns table (cost numeric, tokens numeric)
language sql stable
as $$
    select coalesce(sum(r.cost_usd), 0),
           coalesce(sum(coalesce(r.tokens_in, 0) + coalesce(r.tokens_out, 0)), 0)
    from agents a
    cross join lateral (
        select r.cost_usd, r.tokens_in, r.tokens_out
        from agent_run r
        join job j on j.id = r.job_id
        where r.agent = a.name
          and r.started_at > p_now - make_interval(secs => p_budget.window_secs)
          and j.user_id = p_budget.user_id
    ) r;
$$;

comment on function _owner_spend(owner_budgets, timestamptz) is
    'USD and tokens reported by the owner''s runs started in its budget window (every lane).';

-- When spend that reached a budget is under it again: the runs of p_agents
-- (one lane's, or every lane's for an owner) started after p_since, of
-- p_user_id's jobs when one is given, age out of the window in start order,
-- and the budget clears once the spend of those gone exceeds p_over (the
-- window's spend less the budget): p_window_secs after the start of the last
-- of them. p_tokens counts tokens (in and out), else USD. Assumes nothing
-- else starts meanwhile; NULL when the window's runs alone cannot clear it.
create or replace function _spend_clears(
    p_agents text[], p_user_id text, p_since timestamptz, p_window_secs integer,
    p_tokens boolean, p_over numeric
)
returns timestamptz
language sql stable
as $$
    select o.started_at + make_interval(secs => p_window_secs)
    from (select r.started_at,
                 sum(case when p_tokens then coalesce(r.tokens_in, 0) + coalesce(r.tokens_out, 0)
                          else coalesce(r.cost_usd, 0) end)
                     over (order by r.started_at, r.id) as spent
          from unnest(p_agents) as a (name)
          -- agent_run_lane_window_idx, one lane at a time: the window's runs,
          -- never the history.
          cross join lateral (
              select r.started_at, r.id, r.cost_usd, r.tokens_in, r.tokens_out
              from agent_run r
              join job j on j.id = r.job_id
              where r.agent = a.name
                and r.started_at > p_since
                and (p_user_id is null or j.user_id = p_user_id)
          ) r) o
    where o.spent > p_over
    order by o.started_at
    limit 1;
$$;

comment on function _spend_clears(text[], text, timestamptz, integer, boolean, numeric) is
    'When a spend budget reached in a window clears: the runs of p_agents (of p_user_id''s jobs '
    'when given) since p_since age out in start order until the spend gone exceeds p_over; '
    'USD, or tokens with p_tokens. NULL when they cannot.';

-- When an owner over budget is under it again: the later of the times its
-- cost and its tokens clear (_spend_clears), for the budgets reached. NULL
-- when it is not over budget.
create or replace function _owner_budget_clears(p_budget owner_budgets, p_now timestamptz)
returns timestamptz
language sql stable
as $$
    select greatest(
        case when s.cost >= p_budget.window_cost_usd
             then _spend_clears(a.names, p_budget.user_id,
                                p_now - make_interval(secs => p_budget.window_secs),
                                p_budget.window_secs, false, s.cost - p_budget.window_cost_usd)
        end,
        case when s.tokens >= p_budget.window_tokens
             then _spend_clears(a.names, p_budget.user_id,
                                p_now - make_interval(secs => p_budget.window_secs),
                                p_budget.window_secs, true, s.tokens - p_budget.window_tokens)
        end)
    from _owner_spend(p_budget, p_now) s
    cross join (select array_agg(a.name) as names from agents a) a;
$$;

comment on function _owner_budget_clears(owner_budgets, timestamptz) is
    'When an owner over its spend budget is under it again (enough of its window''s spend aged '
    'out); NULL when it is not over.';

create or replace function _owners_over_budget(p_now timestamptz)
returns text[]
language sql stable
as $$
    select coalesce(array_agg(b.user_id), '{}')
    from owner_budgets b
    cross join lateral _owner_spend(b, p_now) s
    where s.cost >= b.window_cost_usd or s.tokens >= b.window_tokens;
$$;

comment on function _owners_over_budget(timestamptz) is
    'The owners whose runs in their window reported their cost or token budget: claim_jobs '
    'claims none of their jobs until it clears.';


-- The check every lane verb starts with: a lane is every owner's, so only
-- operators and listeners act on one (_acts_for_everyone, which reads the
-- session's login role, not a setting), and the lane must exist. The agents
-- row is locked FOR KEY SHARE, as a foreign key would: a lane deleted
-- meanwhile is reported as unknown rather than as a key error.
-- Raises: 42501 a caller that is no operator or listener; CE404 unknown lane.
create or replace function _lane_for_operator(p_verb text, p_agent text)
returns void
language plpgsql
as $$
begin
    if not _acts_for_everyone() then
        raise exception '%: only operators and listeners act on lanes, which every owner shares',
            p_verb using errcode = '42501';
    end if;
    perform from agents a where a.name = p_agent for key share;
    if not found then
        raise exception '%: no lane %', p_verb, to_jsonb(p_agent) using errcode = 'CE404';
    end if;
end;
$$;

comment on function _lane_for_operator(text, text) is
    'Refuse a lane verb (p_verb names it in the error) to a caller that is no operator or '
    'listener (42501), or for an unknown lane (CE404); lock the lane''s agents row FOR KEY SHARE.';

-- An operator's pause of a lane: claims skip it until p_until, for the reason
-- given, as they skip a lane a rate limit paused (_lane_capacity). It replaces
-- the lane's pause in force, whichever it is: the person who sets an end
-- means that end. A pause is state, not configuration, so the agents row is
-- untouched and no listener reloads; the audit row (entity lane, keyed by the
-- agent) records who paused it, until when and why.
--
-- Security definer: operators read lane_pauses but do not write it; the
-- check below lets only operators and listeners through (_acts_for_everyone),
-- since a lane is every owner's.
-- Raises: CE404 unknown lane; CE422 a blank reason or an end that is not
-- after p_now; 42501 a caller that is no operator or listener.
create or replace function pause_lane(
    p_agent text, p_until timestamptz, p_reason text, p_now timestamptz default now()
)
returns timestamptz
language plpgsql
as $$
declare
    v_old lane_pauses;
begin
    perform _lane_for_operator('pause_lane', p_agent);
    perform _check_not_blank('lane_pauses.reason', p_reason);
    if p_until is null or p_until <= p_now then
        perform _invalid_value('lane_pauses.paused_until', 'must be after now ('
                               || p_now::text || ')', to_jsonb(p_until));
    end if;
    select * into v_old from lane_pauses p where p.agent = p_agent and p.paused_until > p_now;
    insert into lane_pauses as p (agent, paused_until, reason, updated_at)
    values (p_agent, p_until, left(_trim_blank(p_reason), 500), p_now)
    on conflict (agent) do update
    set paused_until = excluded.paused_until, reason = excluded.reason,
        updated_at = excluded.updated_at;
    insert into audit_log (entity, entity_key, action, old_state, new_state, detail)
    values ('lane', p_agent, 'pause', case when v_old.agent is null then 'open' else 'paused' end,
            'paused',
            jsonb_strip_nulls(jsonb_build_object(
                'paused_until', p_until, 'reason', left(_trim_blank(p_reason), 500),
                'replaced_until', v_old.paused_until, 'replaced_reason', v_old.reason)));
    return p_until;
end;
$$;

comment on function pause_lane(text, timestamptz, text, timestamptz) is
    'Pause a lane until p_until for p_reason (operators and listeners): claims skip it until '
    'then; replaces the pause in force; audited as entity lane. CE404 unknown lane, CE422 a '
    'blank reason or a past end.';

-- Lift a lane's pause, whoever set it (an operator, or a provider's rate limit
-- whose reset the operator knows has come): claims take the lane's jobs again
-- at once. NOTIFY ceaseless_config wakes the listeners, which would otherwise
-- claim from the lane only at their next poll; the audit row records who
-- resumed it and the pause it lifted.
--
-- Security definer, as pause_lane.
-- Raises: CE404 unknown lane; CE409 the lane is not paused; 42501 a caller
-- that is no operator or listener.
create or replace function resume_lane(p_agent text, p_now timestamptz default now())
returns void
language plpgsql
as $$
declare
    v_old lane_pauses;
begin
    perform _lane_for_operator('resume_lane', p_agent);
    delete from lane_pauses p where p.agent = p_agent returning * into v_old;
    if v_old.agent is null or v_old.paused_until <= p_now then
        raise exception 'resume_lane: lane % is not paused', to_jsonb(p_agent)
            using errcode = 'CE409', hint = 'ceaseless.governor_usage shows the pauses in force.';
    end if;
    insert into audit_log (entity, entity_key, action, old_state, new_state, detail)
    values ('lane', p_agent, 'resume', 'paused', 'open',
            jsonb_build_object('paused_until', v_old.paused_until, 'reason', v_old.reason));
    perform _announce('ceaseless_config',
                      jsonb_build_object('table', 'lane_pauses', 'agent', p_agent)::text);
end;
$$;

comment on function resume_lane(text, timestamptz) is
    'Lift a lane''s pause (operators and listeners), whoever set it; audited as entity lane, and '
    'NOTIFY ceaseless_config so listeners claim from it at once. CE404 unknown lane, CE409 not '
    'paused.';
