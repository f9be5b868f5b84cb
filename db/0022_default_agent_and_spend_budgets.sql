-- The default agent, and cost and token budgets per lane.
--
-- The default agent (settings.default_agent): the lane that runs a routine,
-- a job or a topology node which names none. A routine inserted in the
-- seed's shape, with no agent column, then works.
--
-- Stored as JSON null until an operator sets it: with no default, a row that
-- names no agent is refused naming the field (functions/93_default_agent.sql),
-- never given a lane nobody chose. routines.agent and job.agent stay NOT
-- NULL (a BEFORE trigger fills them first), and the setting is checked by a
-- trigger when written, since a CHECK cannot read the agent registry.

set local search_path = ceaseless, pg_catalog, public;

insert into settings (key, value, description) values
    ('default_agent', 'null',
     'The agent (lane) for a routine, a job or a topology node that names none, filled in when '
     'the row is written. JSON null: no default, and such a row is refused. Set it with '
     'update ceaseless.settings set value = to_jsonb(''NAME''::text) '
     'where key = ''default_agent''.')
on conflict (key) do nothing;

-- Cost and token budgets per lane: what the lane's runs reported (agent_run
-- cost_usd, tokens_in + tokens_out) over its rolling window (window_secs),
-- beside the count of runs it already has (window_budget). claim_jobs admits
-- nothing into a lane whose spend in the window has reached either budget,
-- until enough of it ages out. NULL: no budget. Spend is known only when a
-- run ends, so the runs admitted before the budget is reached may together
-- overshoot it by what they cost; max_concurrent bounds how many those are.
alter table agents
    add column window_cost_usd numeric(12, 6),
    add column window_tokens bigint,
    -- Zero would stop the lane for good without saying why: disable the
    -- agent instead, which explain_job and governor_usage name as such.
    add constraint window_cost_usd_positive
        check (window_cost_usd is null or window_cost_usd > 0),
    add constraint window_tokens_positive check (window_tokens is null or window_tokens > 0);

comment on column agents.window_cost_usd is
    'Budget in USD per rolling window (window_secs): claims wait while the lane''s runs started '
    'in the window reported this much cost_usd or more. NULL: no cost budget.';
comment on column agents.window_tokens is
    'Budget in tokens (tokens_in + tokens_out) per rolling window: claims wait while the lane''s '
    'runs started in the window reported this many or more. NULL: no token budget.';
