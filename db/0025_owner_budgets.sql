-- Spend budgets per owner (issue 13 part 6): what one role's jobs may spend, in USD and tokens,
-- over a rolling window, whichever lanes they run on. The per-lane budgets of 0022 bound a
-- provider account; these bound a tenant, so one user's runaway loop cannot spend what the
-- others were promised.
--
-- Function bodies: functions/96_owner_budgets.sql (the spend in the window, the owners over
-- budget that claim_jobs holds back, the owner_budget_usage view).

set local search_path = ceaseless, pg_catalog, public;

create table owner_budgets (
    user_id text primary key,
    window_secs integer not null default 86400,
    window_cost_usd numeric(12, 6),
    window_tokens bigint,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),

    -- A window of zero would count nothing and hold nothing back: a budget
    -- that looks set and is not.
    constraint window_secs_positive check (window_secs > 0),
    -- Zero or less would hold the owner's every job forever; to stop an owner,
    -- disable its routines or cancel its jobs, which say so.
    constraint window_cost_usd_positive check (window_cost_usd is null or window_cost_usd > 0),
    constraint window_tokens_positive check (window_tokens is null or window_tokens > 0),
    -- A row with neither budget bounds nothing, yet reads as if it did.
    constraint some_budget check (num_nonnulls(window_cost_usd, window_tokens) > 0)
);

comment on table owner_budgets is
    'Spend budgets per owner role: over window_secs, the runs of the owner''s jobs may report at '
    'most window_cost_usd USD and window_tokens tokens (tokens_in + tokens_out); a claim waits '
    'while either is reached. Set by operators.';
comment on column owner_budgets.user_id is 'The owner role (job.user_id) the budget applies to.';
comment on column owner_budgets.window_secs is 'The rolling window, in seconds (default a day).';
comment on column owner_budgets.window_cost_usd is
    'USD the owner''s runs started in the window may report; NULL: no cost budget.';
comment on column owner_budgets.window_tokens is
    'Tokens the owner''s runs started in the window may report; NULL: no token budget.';

alter table owner_budgets enable row level security;
create policy all_rows on owner_budgets to ceaseless_listener, ceaseless_operator
    using (true) with check (true);
-- A user reads its own budget (why its jobs wait), never sets it.
create policy own_rows on owner_budgets to ceaseless_user
    using (user_id = current_user);
