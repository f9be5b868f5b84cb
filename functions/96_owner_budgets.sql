-- Spend budgets per owner: what an owner's runs reported in its window, and who is over.
--
-- Called by: claim_jobs (10_jobs.sql), which holds back the pending jobs of an owner over
-- budget; explain_job (92_explain.sql), which names it; operators (owner_budget_usage).
-- Guarantees: nothing is read when owner_budgets is empty (claim_jobs asks only then); the
-- spend is summed from the runs started in the window through agent_run_lane_window_idx, one
-- lane at a time, so it costs the window's runs and never the history; like the lane budgets,
-- a run counts what it reported when it ended, so the runs admitted before the budget was
-- reached may overshoot it by what they cost.

set local search_path = ceaseless, pg_catalog, pg_temp;

create or replace function _owner_spend(p_budget owner_budgets, p_now timestamptz)
returns table (cost numeric, tokens numeric)
language sql stable
set search_path = pg_catalog, ceaseless, pg_temp
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

-- When an owner over budget is under it again: when enough of the spend in
-- its window has aged out (the later of the cost's and the tokens' times,
-- for the budgets reached). NULL when it is not over budget.
create or replace function _owner_budget_clears(p_budget owner_budgets, p_now timestamptz)
returns timestamptz
language sql stable
set search_path = pg_catalog, ceaseless, pg_temp
as $$
    with runs as (
        select r.started_at, r.id, coalesce(r.cost_usd, 0) as cost,
               coalesce(r.tokens_in, 0) + coalesce(r.tokens_out, 0) as tokens
        from agents a
        cross join lateral (
            select r.started_at, r.id, r.cost_usd, r.tokens_in, r.tokens_out
            from agent_run r
            join job j on j.id = r.job_id
            where r.agent = a.name
              and r.started_at > p_now - make_interval(secs => p_budget.window_secs)
              and j.user_id = p_budget.user_id
        ) r
    ),
    running as (
        select started_at,
               sum(cost) over (order by started_at, id) as cost_so_far,
               sum(tokens) over (order by started_at, id) as tokens_so_far,
               sum(cost) over () as cost_total,
               sum(tokens) over () as tokens_total
        from runs
    )
    select greatest(
        (select min(started_at) from running
         where cost_total >= p_budget.window_cost_usd
           and cost_so_far > cost_total - p_budget.window_cost_usd),
        (select min(started_at) from running
         where tokens_total >= p_budget.window_tokens
           and tokens_so_far > tokens_total - p_budget.window_tokens))
        + make_interval(secs => p_budget.window_secs);
$$;

comment on function _owner_budget_clears(owner_budgets, timestamptz) is
    'When an owner over its spend budget is under it again (enough of its window''s spend aged '
    'out); NULL when it is not over.';

create or replace function _owners_over_budget(p_now timestamptz)
returns text[]
language sql stable
set search_path = pg_catalog, ceaseless, pg_temp
as $$
    select coalesce(array_agg(b.user_id), '{}')
    from owner_budgets b
    cross join lateral _owner_spend(b, p_now) s
    where s.cost >= b.window_cost_usd or s.tokens >= b.window_tokens;
$$;

comment on function _owners_over_budget(timestamptz) is
    'The owners whose runs in their window reported their cost or token budget: claim_jobs '
    'claims none of their jobs until it clears.';

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
