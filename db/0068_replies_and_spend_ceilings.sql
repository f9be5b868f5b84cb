-- Replies that resume a session, and spend ceilings that pause and ask.
--
-- A blocked job takes a person's reply (reply_job, functions/10_jobs.sql): the
-- reply waits on the job until a run carries it to the agent's session, and
-- each run records the reply it carried. A job may carry its own spend
-- ceiling (max_cost_usd, max_tokens) over all its runs; a lane (agents) and a
-- routine give the default a job without one gets (_tg_job_spend_ceiling,
-- functions/11_job_input.sql).

set local search_path = ceaseless, pg_catalog, public;

alter table job
    add column reply text,
    add column replied_by text,
    add column replied_at timestamptz,
    add column max_cost_usd numeric(12,6),
    add column max_tokens bigint,
    -- A reply nobody sent, or a sender without a reply, cannot be audited or
    -- shown: the three are written together by reply_job and raise_job_budget.
    add constraint reply_complete
        check (num_nonnulls(reply, replied_by, replied_at) in (0, 3)),
    -- An empty reply resumes a session with no prompt; an unbounded one is a
    -- prompt past every cap (reply_job refuses both first, naming the value).
    add constraint reply_bounded
        check (reply is null or char_length(reply) between 1 and 16000),
    -- A ceiling of zero or less blocks the job before its agent could start.
    add constraint max_cost_usd_positive check (max_cost_usd is null or max_cost_usd > 0),
    add constraint max_tokens_positive check (max_tokens is null or max_tokens > 0);

comment on column job.reply is
    'A person''s reply waiting for the job''s next run (reply_job, raise_job_budget): that run '
    'resumes the agent''s session with it as the prompt. Cleared when a run that carried it ends '
    'with a verdict; kept through an interrupted run, so a reply is never lost.';
comment on column job.replied_by is
    'Who sent job.reply: the login role, and for a listener''s dashboard the listener''s '
    '`<worker id> dashboard:<user>` (ceaseless.actor).';
comment on column job.replied_at is 'When job.reply was sent.';
comment on column job.max_cost_usd is
    'Spend ceiling in USD over all the job''s runs (agent_run.cost_usd): a run passing it stops, '
    'and the job is blocked budget_exhausted until raise_job_budget. NULL: its routine''s, else '
    'its agent''s, else none.';
comment on column job.max_tokens is
    'Spend ceiling in tokens (tokens_in + tokens_out) over all the job''s runs, as max_cost_usd. '
    'NULL: its routine''s, else its agent''s, else none.';

alter table agent_run
    add column reply text,
    add column replied_by text,
    -- A reply recorded without its sender names nobody in the run's history.
    add constraint reply_complete check (num_nonnulls(reply, replied_by) in (0, 2)),
    add constraint reply_bounded check (reply is null or char_length(reply) between 1 and 16000);

comment on column agent_run.reply is
    'The person''s reply this run carried to the agent as its prompt (job.reply when claimed).';
comment on column agent_run.replied_by is 'Who sent agent_run.reply (job.replied_by).';

alter table agents
    add column max_cost_usd numeric(12,6),
    add column max_tokens bigint,
    add constraint max_cost_usd_positive check (max_cost_usd is null or max_cost_usd > 0),
    add constraint max_tokens_positive check (max_tokens is null or max_tokens > 0);

comment on column agents.max_cost_usd is
    'Default spend ceiling in USD of each job of this lane that sets none (job.max_cost_usd); '
    'unlike window_cost_usd, it stops one job, not the lane.';
comment on column agents.max_tokens is
    'Default spend ceiling in tokens of each job of this lane that sets none (job.max_tokens).';

alter table routines
    add column max_cost_usd numeric(12,6),
    add column max_tokens bigint,
    add constraint max_cost_usd_positive check (max_cost_usd is null or max_cost_usd > 0),
    add constraint max_tokens_positive check (max_tokens is null or max_tokens > 0);

comment on column routines.max_cost_usd is
    'Spend ceiling in USD of each job this routine fires (job.max_cost_usd); NULL: the agent''s.';
comment on column routines.max_tokens is
    'Spend ceiling in tokens of each job this routine fires (job.max_tokens); NULL: the agent''s.';

-- claim_jobs returns the pending reply and what is left of the job's ceilings:
-- a new result type, which CREATE OR REPLACE cannot give; functions/ (applied
-- right after) creates it again.
drop function if exists claim_jobs(text, integer, text[], text[], timestamptz, integer, boolean);
