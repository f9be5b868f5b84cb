-- ceaseless foundation: the unified schema of the three seeds.
--
-- Three sources of work (routines, loops, tracked forge repositories) feed one
-- durable queue, `job`; every agent invocation against a job is an `agent_run`.
-- The seeds were written for three separate products, so unifying them widens a
-- few CHECK lists and makes a few columns optional. Each widening is marked
-- "Widened:" below with the reason; every other constraint is the seeds' own and
-- keeps the seeds' comment.
--
-- Enums are text with a CHECK list rather than Postgres enum types: adding a
-- value is then an ordinary migration, not an ALTER TYPE that locks every table
-- using it. Each list must match its Python enum in `listener/enums.py`; a test
-- parses this file with pglast and asserts they agree.
--
-- Constraint names say the field and the rule (`timeout_secs_positive`), so the
-- error PostgreSQL raises names both, and its DETAIL shows the bad value.
--
-- No function bodies here: functions, triggers and views live once, in
-- `functions/`, and are re-applied on every migrate.

create schema if not exists ceaseless;
set local search_path = ceaseless, pg_catalog, public;

-- ---------------------------------------------------------------------------
-- Settings: operator policy that SQL functions read (the global cap on
-- running routine runs, default lease length, retry backoff).
-- ---------------------------------------------------------------------------
create table settings (
    key text primary key,
    value jsonb not null,
    description text not null default '',
    updated_at timestamptz not null default now()
);

comment on table settings is
    'Operator policy read by the SQL functions. Changing a row NOTIFYs ceaseless_config so '
    'listeners pick it up without a restart.';

insert into settings (key, value, description) values
    ('lease_secs', '60',
     'Seconds a claim lasts before it must be extended. A listener that dies stops '
     'extending, and the job returns to the pool this long after.'),
    ('retry_base_secs', '10',
     'First retry delay after a failed run; doubles per attempt, with up to 25% jitter.'),
    ('retry_max_secs', '3600',
     'Ceiling on the retry delay, so a job with many attempts still comes back within the hour.'),
    ('routine_max_running', '100',
     'Global cap on routine runs in status running, across all users (spec 5.6).');

-- ---------------------------------------------------------------------------
-- People and places (seed 003 references both).
-- ---------------------------------------------------------------------------
create table users (
    id uuid primary key default gen_random_uuid(),
    handle text not null unique,
    created_at timestamptz not null default now(),

    -- An empty handle cannot be shown or typed, so it cannot be found again.
    constraint handle_not_empty check (handle <> '')
);

comment on table users is
    'People who own loops (seed 003 `created_by`). Routines keep their seed''s free-text user_id.';

create table workspaces (
    id uuid primary key default gen_random_uuid(),
    name text not null unique,
    -- Where agents of this workspace run, and the root that routine
    -- context_paths are read relative to. NULL: the listener's own setting.
    root_path text,
    created_at timestamptz not null default now(),

    constraint name_not_empty check (name <> ''),
    -- A relative root would resolve against whichever directory a listener
    -- happened to start in: two listeners would read different files.
    constraint root_path_absolute check (root_path is null or root_path like '/%')
);

comment on table workspaces is
    'A place agents work in; loops belong to one (seed 003).';

-- ---------------------------------------------------------------------------
-- The agent registry. Configuration lives in the database so every listener
-- sees the same agents and reloads them on NOTIFY ceaseless_config.
-- ---------------------------------------------------------------------------
create table agents (
    -- The lane name. Jobs name their agent; the governor budgets per name.
    name text primary key,
    adapter text not null
        check (adapter in ('claude_code', 'opencode', 'command', 'noop')),
    -- The executable and its fixed arguments, e.g. {claude} or
    -- {/usr/local/bin/my-agent,--flag}. Never a hard-coded path in code.
    argv text[] not null default '{}',
    -- Extra environment for the process, a JSON object of strings.
    env jsonb not null default '{}',
    model text,
    timeout_secs integer not null default 3600,
    kill_grace_secs integer not null default 10,

    -- Governor: concurrent runs in this lane, and runs started per rolling
    -- window (NULL budget: unlimited). Checked in the claim statement itself.
    max_concurrent integer not null default 4,
    window_secs integer not null default 3600,
    window_budget integer,
    -- Set when a run reports a provider rate limit with a reset time: every
    -- job of the lane would hit the same limit, so the lane waits, not the job.
    paused_until timestamptz,

    max_attempts integer not null default 3,
    enabled boolean not null default true,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),

    constraint name_url_safe check (name ~ '^[a-z0-9][a-z0-9_.-]*$'),
    -- A process adapter with nothing to execute fails every job it is given,
    -- one claim at a time, instead of failing once at configuration time.
    constraint argv_not_empty_for_process_adapters
        check (adapter = 'noop' or cardinality(argv) >= 1),
    constraint argv_no_empty_executable
        check (cardinality(argv) = 0 or argv[1] <> ''),
    -- The environment is handed to exec(): anything but string values would
    -- be silently stringified differently by each listener version.
    constraint env_is_object_of_strings
        check (jsonb_typeof(env) = 'object'
               and not jsonb_path_exists(env, '$.* ? (@.type() != "string")')),
    -- Zero or negative timeouts would kill every run at spawn.
    constraint timeout_secs_positive check (timeout_secs > 0),
    constraint kill_grace_secs_not_negative check (kill_grace_secs >= 0),
    -- Zero concurrency is a lane that silently never runs anything; disable
    -- the agent instead, which says so.
    constraint max_concurrent_positive check (max_concurrent > 0),
    constraint window_secs_positive check (window_secs > 0),
    constraint window_budget_positive check (window_budget is null or window_budget > 0),
    constraint max_attempts_positive check (max_attempts > 0)
);

comment on table agents is
    'The agent registry: one row per lane. Listeners cache it and reload on NOTIFY ceaseless_config.';

-- ---------------------------------------------------------------------------
-- Repos tireless polls (seed 002, unchanged).
-- ---------------------------------------------------------------------------
create table tracked_repo (
    id uuid primary key default gen_random_uuid(),

    forge text not null check (forge in ('gitea', 'github')),
    owner text not null,
    repo text not null,
    clone_url text not null,
    default_branch text not null,

    -- PollSchedule, flattened. The floor lives in config, not here: it is an
    -- operator policy that can change, and clamping is core's job. The
    -- database asserts only that the value is sane.
    interval_seconds integer not null check (interval_seconds > 0),
    quiet_from text,
    quiet_until text,
    enabled boolean not null default true,

    -- Which labels make an issue work for ceaseless, and which issue is the
    -- tracking issue that discovery runs against (spec 8.2).
    labels text[] not null default '{}',
    tracking_issue bigint,
    discover_cooldown_secs integer not null default 3600
        check (discover_cooldown_secs >= 0),

    last_etag text,
    last_polled_at timestamptz,
    created_at timestamptz not null default now(),

    unique (forge, owner, repo),

    -- Both ends of the quiet window or neither. A half-specified window runs
    -- around the clock while the operator believes otherwise, which is silently
    -- wrong rather than loudly broken.
    constraint quiet_window_complete
        check ((quiet_from is null) = (quiet_until is null)),
    -- HH:MM, so comparing against the local clock is well defined.
    constraint quiet_window_format
        check (quiet_from is null
               or (quiet_from ~ '^([01][0-9]|2[0-3]):[0-5][0-9]$'
                   and quiet_until ~ '^([01][0-9]|2[0-3]):[0-5][0-9]$'))
);

comment on table tracked_repo is
    'Forge repositories polled for labelled issues that become discover / plan / implement jobs (seed 002).';

-- ---------------------------------------------------------------------------
-- Topology runs and loops (seed 003). topology_runs was not in the seed; it
-- is designed here with the columns the seed's ALTER added.
-- ---------------------------------------------------------------------------
create table topology_runs (
    id uuid primary key default gen_random_uuid(),
    workspace_id uuid not null references workspaces (id) on delete cascade,
    -- Same shape as loops.graph; copied so a later edit of the loop cannot
    -- change what a running iteration does.
    graph jsonb not null,
    task text not null,
    status text not null default 'pending'
        check (status in ('pending', 'running', 'awaiting_approval',
                          'succeeded', 'failed', 'cancelled', 'skipped')),
    final_message text,
    error text,

    -- Back-refs from durable runs (seed 003). loop_id groups all iterations
    -- of a loop; iteration is 1-indexed per loop; parent_run_id chains
    -- iteration N+1 back to N so the run driver pulls prior context in one hop.
    loop_id uuid,
    iteration int,
    parent_run_id uuid references topology_runs (id) on delete set null,

    started_at timestamptz,
    finished_at timestamptz,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),

    -- An iteration number without its loop (or the reverse) cannot be
    -- chained: the next iteration would not find its parent.
    constraint loop_iteration_complete
        check ((loop_id is null) = (iteration is null)),
    constraint iteration_positive check (iteration is null or iteration >= 1),
    -- A finished run has an end time, an unfinished one does not: otherwise
    -- "at most one live iteration per loop" counts ghosts.
    constraint finished_iff_terminal
        check ((finished_at is not null)
               = (status in ('succeeded', 'failed', 'cancelled', 'skipped')))
);

comment on table topology_runs is
    'One execution of an agent topology; a loop iteration when loop_id is set (seed 003).';

create table loops (
    id uuid primary key default gen_random_uuid(),
    workspace_id uuid not null references workspaces (id) on delete cascade,
    title text not null,
    description text not null,
    -- Same shape as topology_runs.graph:
    -- {"nodes": [{"id", "agent", "prompt", "gate"?}], "edges": [{"from", "to"}]}.
    graph jsonb not null,
    -- Text prompt used as the task for every iteration, with the prior
    -- iteration's output prepended by the run driver (refine-over-time).
    task_template text not null,
    -- {cron?: '0 */6 * * *', timezone?: 'UTC', on_completion?: bool,
    --  webhook_enabled?: bool}. Any combination; whichever fires first wins.
    triggers jsonb not null default '{}'::jsonb,
    -- {kind: 'infinite' | 'iters' | 'until', spec: <kind-specific>}
    repeat_policy jsonb not null default '{"kind":"infinite"}'::jsonb,
    enabled boolean not null default true,
    -- Computed by the scheduler from triggers.cron after each fire. NULL when
    -- no cron trigger is set.
    next_fire_at timestamptz,
    last_run_id uuid references topology_runs (id) on delete set null,
    -- Why the loop stopped (repeat policy met, gave up), when it did.
    stopped_reason text,
    -- Opaque secret ID for the webhook endpoint; HMAC-SHA256 verification
    -- uses webhook_signing_key. Both NULL when the webhook trigger is off,
    -- both set when it is on. Rotation: disable, re-enable.
    webhook_token text unique,
    webhook_signing_key text,
    created_by uuid not null references users (id) on delete restrict,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),

    -- Half a webhook credential is an endpoint nobody can call, or one that
    -- accepts calls it cannot verify.
    constraint webhook_credentials_complete
        check ((webhook_token is null) = (webhook_signing_key is null)),
    constraint triggers_is_object check (jsonb_typeof(triggers) = 'object'),
    constraint repeat_policy_kind_known
        check (repeat_policy ->> 'kind' in ('infinite', 'iters', 'until'))
);

comment on table loops is
    'A recurring execution of a topology: each iteration is a topology_runs row chained to the last (seed 003).';

alter table topology_runs
    add constraint topology_runs_loop_id_fkey
        foreign key (loop_id) references loops (id) on delete set null;

create index loops_workspace_idx
    on loops (workspace_id, updated_at desc);

-- Scheduler tick: WHERE enabled AND next_fire_at <= now. Partial, so
-- disabled and cron-less loops stay out of the scan.
create index loops_next_fire_idx
    on loops (next_fire_at)
    where enabled and next_fire_at is not null;

-- Listing "recent iterations of loop X" hits this.
create index topology_runs_loop_idx
    on topology_runs (loop_id, iteration desc)
    where loop_id is not null;

-- Iteration N+1 is N + 1: two iterations with one number would make the
-- chain ambiguous.
create unique index topology_runs_loop_iteration_idx
    on topology_runs (loop_id, iteration)
    where loop_id is not null;

-- ---------------------------------------------------------------------------
-- Routines (seed 000).
-- ---------------------------------------------------------------------------
create table routines (
    id uuid primary key default gen_random_uuid(),
    name text not null,
    description text not null default '',
    user_id text not null,
    enabled boolean not null default true,

    trigger_type text not null
        check (trigger_type in ('cron', 'event', 'webhook', 'manual')),
    trigger_config jsonb not null default '{}',

    action_type text not null
        check (action_type in ('lightweight', 'full_job')),
    action_config jsonb not null,
    -- Which registered agent runs this routine's work.
    agent text not null references agents (name) on update cascade,

    -- Guardrails.
    cooldown_secs integer not null default 300,
    max_concurrent integer not null default 1,
    dedup_window_secs integer,           -- NULL = no dedup

    -- Notification preferences.
    notify_channel text,                 -- NULL = use default
    notify_user text,
    notify_on_success boolean not null default false,
    notify_on_failure boolean not null default true,
    notify_on_attention boolean not null default true,

    -- Runtime state (updated by the engine).
    state jsonb not null default '{}',
    last_run_at timestamptz,
    next_fire_at timestamptz,            -- pre-computed for cron triggers
    run_count bigint not null default 0,
    consecutive_failures integer not null default 0,
    -- Set when the routine was disabled by the engine (an unparseable
    -- schedule that slipped past validation), so the operator sees why.
    last_error text,

    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),

    unique (user_id, name),

    constraint cooldown_secs_not_negative check (cooldown_secs >= 0),
    -- Zero would be a routine that can never run; disable it instead.
    constraint max_concurrent_positive check (max_concurrent > 0),
    constraint dedup_window_secs_positive
        check (dedup_window_secs is null or dedup_window_secs > 0),
    constraint trigger_config_is_object check (jsonb_typeof(trigger_config) = 'object'),
    constraint action_config_is_object check (jsonb_typeof(action_config) = 'object')
);

comment on table routines is
    'Named, user-owned tasks fired by cron, events, webhooks or by hand, with guardrails (seed 000).';

-- Fast lookup: "which cron routines need to fire right now?"
create index idx_routines_next_fire
    on routines (next_fire_at)
    where enabled and next_fire_at is not null;

-- Fast lookup: event triggers for a user.
create index idx_routines_event_triggers
    on routines (user_id)
    where enabled and trigger_type = 'event';

-- A webhook path names exactly one routine, or a request could fire the
-- wrong one.
create unique index idx_routines_webhook_path
    on routines ((trigger_config ->> 'path'))
    where trigger_type = 'webhook';

-- ---------------------------------------------------------------------------
-- The queue: one unit of work (seed 002's `job`, widened to all work).
-- ---------------------------------------------------------------------------
create table job (
    id uuid primary key default gen_random_uuid(),

    -- IssueRef, flattened. Widened: optional, because routine, loop and
    -- ad-hoc work has no issue. The forge lane's kinds still require it
    -- (issue_ref_required_for_forge_kinds).
    forge text check (forge in ('gitea', 'github')),
    owner text,
    repo text,
    number bigint,

    -- Widened: routine, loop_node and task join the forge lane's kinds so
    -- every source of work shares one queue, one claim and one governor.
    kind text not null
        check (kind in ('discover', 'plan', 'implement',
                        'routine', 'loop_node', 'task')),
    -- Widened: cancelled, so an operator's cancel is neither a failure (which
    -- retries) nor an abandonment (which says the system gave up).
    state text not null default 'pending'
        check (state in ('pending', 'claimed', 'running',
                         'delivered', 'blocked', 'failed', 'abandoned', 'cancelled')),

    -- Which lane runs it. on update cascade: renaming an agent keeps its work.
    agent text not null references agents (name) on update cascade,
    -- What the agent is asked (stdin), and structured data for the source
    -- that created the job (routine ids, node ids, issue titles).
    prompt text not null default '',
    payload jsonb not null default '{}',
    max_turns integer,
    resume_session_id text,

    -- Generalises "one live job per issue" to any source: a routine run, a
    -- loop node and an operator's one-off can each name what must not run
    -- twice at once.
    dedup_key text,

    -- When the job may next be claimed: now for new work, later for a retry
    -- in backoff or a lane waiting out a rate limit.
    run_after timestamptz not null default now(),

    claimed_by text,
    claim_expires_at timestamptz,

    -- Set when this job's issue was produced by a Plan job. Presence of a
    -- parent is what routes implementation to OpenCode, and what lets a child
    -- inherit admission.
    parent_job_id uuid references job (id),
    -- Which routine run or topology run this job does the work of, so its
    -- outcome can flow back by trigger.
    routine_run_id uuid,
    topology_run_id uuid references topology_runs (id) on delete set null,

    attempts integer not null default 0 check (attempts >= 0),
    -- NULL: the agent's max_attempts.
    max_attempts integer,
    last_error text,

    -- When the poller last reconciled this job's forge labels. Labels mirror
    -- this row; they are never read to make a decision. The runner cannot
    -- write labels at all — a separate identity does it — so this column is
    -- how the two halves stay in step.
    labels_synced_at timestamptz,

    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    finished_at timestamptz,

    -- A claim is a pair. Half a claim is a job that either cannot be released
    -- or cannot be found.
    constraint claim_complete
        check ((claimed_by is null) = (claim_expires_at is null)),

    -- A pending job holds no claim. This is what makes lease expiry correct:
    -- returning a job to the pool *must* clear its claim, and the database
    -- refuses the half-done version.
    --
    -- Deliberately not the converse. Terminal jobs keep `claimed_by` as an
    -- audit trail of which worker delivered them.
    constraint pending_holds_no_claim
        check (state <> 'pending' or claimed_by is null),

    -- A claimed or running job is held by someone. Without this, a job could
    -- be "running" with nobody whose lease can expire: stuck forever.
    constraint live_claim_held
        check (state not in ('claimed', 'running') or claimed_by is not null),

    -- All four parts of an issue reference or none: a partial reference
    -- points at no issue and defeats the one-live-job-per-issue index.
    constraint issue_ref_complete
        check (num_nonnulls(forge, owner, repo, number) in (0, 4)),
    constraint issue_ref_required_for_forge_kinds
        check (kind not in ('discover', 'plan', 'implement') or forge is not null),

    constraint max_turns_positive check (max_turns is null or max_turns > 0),
    constraint max_attempts_positive check (max_attempts is null or max_attempts > 0),
    constraint dedup_key_not_empty check (dedup_key is null or dedup_key <> ''),
    constraint payload_is_object check (jsonb_typeof(payload) = 'object'),
    -- finished_at marks the end of the job's life; a live job with one would
    -- be reported as done by every view.
    constraint finished_iff_terminal
        check ((finished_at is not null)
               = (state in ('delivered', 'blocked', 'failed', 'abandoned', 'cancelled')))
);

comment on table job is
    'The one durable queue: forge, routine, loop and ad-hoc work. INSERT a row to enqueue.';

-- At most one *live* job per issue, and any number of historical ones.
--
-- A plain unique constraint would be wrong in both directions. It would forbid
-- re-running a job after it reached a terminal state; and it would forbid the
-- discovery lane entirely, since discovery recurs against the same tracking
-- issue on a cooldown.
create unique index job_live_issue_idx
    on job (forge, owner, repo, number)
    where state in ('pending', 'claimed', 'running');

-- The same rule for any source of work that names a dedup key.
create unique index job_live_dedup_idx
    on job (dedup_key)
    where state in ('pending', 'claimed', 'running') and dedup_key is not null;

-- The claim query: per lane, the earliest claimable pending job.
--
-- Led by `agent` because admission is per lane: the claim walks each lane
-- with free capacity and stops after that lane's free slots, so one full lane
-- with a deep backlog never hides another lane's work. Then `run_after`, not
-- the seed's `created_at`: a fresh job's run_after is its created_at (so this
-- is still oldest first), and a job in retry backoff sorts where it becomes
-- due instead of sitting at the head of the index where every claim would
-- have to step over it. `kind` stays a filter, as in the seed. Partial on
-- `pending` because that is a small slice of a table that only grows.
create index job_claimable_idx
    on job (agent, run_after)
    where state = 'pending';

-- The governor's concurrency count: live jobs per lane.
create index job_lane_live_idx
    on job (agent)
    where state in ('claimed', 'running');

-- Lease expiry sweeps held claims looking for passed deadlines.
create index job_claim_expiry_idx
    on job (claim_expires_at)
    where state in ('claimed', 'running');

-- History for one issue: powers the discovery cooldown ("when did a discover
-- job for this issue last finish?") and the operator asking what was tried.
create index job_issue_history_idx
    on job (forge, owner, repo, number, kind, created_at desc)
    where forge is not null;

-- Children of a plan job (admission inheritance, operator drill-down).
create index job_parent_idx on job (parent_job_id) where parent_job_id is not null;
create index job_routine_run_idx on job (routine_run_id) where routine_run_id is not null;
create index job_topology_run_idx on job (topology_run_id) where topology_run_id is not null;

-- ---------------------------------------------------------------------------
-- One invocation of one agent against one job (seed 002's agent_run).
--
-- A job may have several: a retry after a rate limit, or a follow-up turn
-- resuming the same agent session.
-- ---------------------------------------------------------------------------
create table agent_run (
    id uuid primary key default gen_random_uuid(),
    job_id uuid not null references job (id) on delete cascade,

    -- Widened: the lane (registry name) instead of a fixed list of two
    -- agents, so the governor's window index counts per configured lane; the
    -- adapter kind the seed stored here moves to `adapter`.
    agent text not null references agents (name) on update cascade,
    adapter text not null
        check (adapter in ('claude_code', 'opencode', 'command', 'noop')),
    model text,

    -- Read from Claude Code's own `apiKeySource`, so the dashboard reports
    -- what actually happened rather than what was intended.
    billing text not null default 'unknown'
        check (billing in ('subscription', 'api_key', 'unknown')),

    session_id text,

    -- Widened: lease_expired, for the run whose listener vanished. The
    -- expiry sweep must finish it with *some* outcome (finished_has_outcome),
    -- and calling it failed or timed_out would blame the agent.
    outcome text
        check (outcome in ('succeeded', 'failed', 'rate_limited',
                           'budget_exhausted', 'output_budget_exhausted',
                           'timed_out', 'cancelled', 'lease_expired')),

    -- PullRequestRef, flattened. All six or none.
    pr_forge text check (pr_forge in ('gitea', 'github')),
    pr_owner text,
    pr_repo text,
    pr_number bigint,
    pr_head_branch text,
    pr_url text,

    -- Which listener ran it and which attempt of the job this was.
    worker text not null,
    attempt integer not null,

    exit_status integer,
    -- The final assistant message, bounded so one chatty agent cannot bloat
    -- every query that reads runs.
    final_message text,
    error text,
    tokens_in bigint,
    tokens_out bigint,
    cost_usd numeric(12, 6),
    num_turns integer,
    rate_limit_reset_at timestamptz,

    started_at timestamptz not null default now(),
    finished_at timestamptz,

    constraint pull_request_complete
        check (num_nonnulls(pr_forge, pr_owner, pr_repo,
                            pr_number, pr_head_branch, pr_url) in (0, 6)),

    -- A finished run has an outcome and an unfinished one does not. Without
    -- this, a crashed writer leaves runs that look in-flight forever and the
    -- governor counts them against concurrency.
    constraint finished_has_outcome
        check ((finished_at is null) = (outcome is null)),

    constraint final_message_bounded
        check (final_message is null or char_length(final_message) <= 65536),
    constraint error_bounded check (error is null or char_length(error) <= 65536),
    constraint tokens_not_negative
        check (coalesce(tokens_in, 0) >= 0 and coalesce(tokens_out, 0) >= 0),
    constraint cost_usd_not_negative check (cost_usd is null or cost_usd >= 0),
    constraint attempt_positive check (attempt >= 1)
);

comment on table agent_run is
    'One invocation of one agent against one job: who ran it, what it cost, how it ended.';

create index agent_run_job_idx
    on agent_run (job_id, started_at desc);

-- The governor's window budget: runs started per lane inside a rolling
-- window. Asked on every admission decision, so it is the one index that has
-- to be right from the start.
create index agent_run_lane_window_idx
    on agent_run (agent, started_at desc);

-- At most one open run per job: two open runs would be two agents working
-- one job at once, which leases exist to prevent. The database refuses it
-- even if a listener's bookkeeping goes wrong.
create unique index agent_run_one_open_idx
    on agent_run (job_id)
    where finished_at is null;

-- ---------------------------------------------------------------------------
-- Routine runs (seed 000), widened with the guardrail record.
-- ---------------------------------------------------------------------------
create table routine_runs (
    id uuid primary key default gen_random_uuid(),
    routine_id uuid not null references routines (id) on delete cascade,
    trigger_type text not null
        check (trigger_type in ('cron', 'event', 'webhook', 'manual')),
    trigger_detail text,                  -- e.g. matched message preview, cron expression
    started_at timestamptz not null default now(),
    completed_at timestamptz,
    -- Widened: skipped, so a refused fire leaves a row with its reason
    -- instead of vanishing (spec 5.7).
    status text not null default 'running'
        check (status in ('running', 'ok', 'attention', 'failed', 'skipped')),
    skip_reason text
        check (skip_reason in ('cooldown', 'concurrency', 'dedup', 'global_cap',
                               'missed_slots', 'disabled')),
    -- Cron: how many slots were missed and collapsed into this fire.
    missed_slots integer not null default 0 check (missed_slots >= 0),
    -- The event content or webhook body hash, for dedup_window_secs.
    content_hash text,
    -- The event content or webhook body the run reacts to (bounded preview
    -- lives in trigger_detail; this is the whole context handed to the agent).
    context text,
    result_summary text,
    tokens_used integer,
    job_id uuid references job (id),     -- the job doing the work
    created_at timestamptz not null default now(),

    constraint skip_reason_iff_skipped
        check ((status = 'skipped') = (skip_reason is not null)),
    constraint completed_iff_not_running
        check ((completed_at is null) = (status = 'running'))
);

comment on table routine_runs is
    'Every fire of a routine, and every refused fire with its reason (seed 000).';

alter table job
    add constraint job_routine_run_id_fkey
        foreign key (routine_run_id) references routine_runs (id) on delete set null;

create index idx_routine_runs_routine on routine_runs (routine_id, started_at desc);
create index idx_routine_runs_status on routine_runs (status) where status = 'running';
create index idx_routine_runs_dedup
    on routine_runs (routine_id, content_hash, started_at desc)
    where content_hash is not null;

-- ---------------------------------------------------------------------------
-- Events: INSERT one row = emit an event; matching routines fire in the same
-- transaction.
-- ---------------------------------------------------------------------------
create table events (
    id uuid primary key default gen_random_uuid(),
    user_id text not null,
    channel text,
    content text not null,
    payload jsonb not null default '{}',
    -- How many routines this event fired, filled by the matching trigger.
    fired_count integer not null default 0,
    created_at timestamptz not null default now(),

    constraint payload_is_object check (jsonb_typeof(payload) = 'object')
);

comment on table events is
    'INSERT a row to emit an event; enabled event routines of that user whose pattern matches fire in the same transaction.';

create index events_user_created_idx on events (user_id, created_at desc);

-- ---------------------------------------------------------------------------
-- Notifications outbox: written by SQL in the transaction that decided to
-- notify, delivered by a listener afterwards, so a crash between the two
-- loses nothing.
-- ---------------------------------------------------------------------------
create table notifications (
    id uuid primary key default gen_random_uuid(),
    source_table text not null check (source_table in ('routine_runs', 'topology_runs')),
    source_id uuid not null,
    kind text not null check (kind in ('success', 'failure', 'attention', 'stopped')),
    channel text,
    recipient text,
    subject text not null,
    body text not null default '',
    status text not null default 'pending'
        check (status in ('pending', 'delivered', 'failed')),
    attempts integer not null default 0 check (attempts >= 0),
    next_attempt_at timestamptz not null default now(),
    last_error text,
    created_at timestamptz not null default now(),
    delivered_at timestamptz,

    constraint delivered_at_iff_delivered
        check ((delivered_at is not null) = (status = 'delivered'))
);

comment on table notifications is
    'Outbox of routine and loop notifications; listeners deliver them through configured sinks.';

create index notifications_pending_idx
    on notifications (next_attempt_at)
    where status = 'pending';

-- ---------------------------------------------------------------------------
-- Approvals: gates of topology nodes.
-- ---------------------------------------------------------------------------
create table approvals (
    id uuid primary key default gen_random_uuid(),
    topology_run_id uuid not null references topology_runs (id) on delete cascade,
    node_id text not null,
    requested_at timestamptz not null default now(),
    decision text check (decision in ('approved', 'rejected')),
    decided_by text,
    decided_at timestamptz,
    note text,

    -- A decision without who and when cannot be audited; who and when
    -- without a decision is a half-written row.
    constraint decision_complete
        check ((decision is null) = (decided_by is null)
               and (decision is null) = (decided_at is null)),

    unique (topology_run_id, node_id)
);

comment on table approvals is
    'Gated approvals of topology nodes: a request, then one decision with who, when and a note.';

create index approvals_open_idx on approvals (requested_at) where decision is null;

-- ---------------------------------------------------------------------------
-- Audit log: append-only record of every state change and operator action.
-- ---------------------------------------------------------------------------
create table audit_log (
    -- bigint, not serial: an append-only log of every state change outgrows
    -- 32 bits.
    id bigint generated always as identity primary key,
    at timestamptz not null default now(),
    -- The database role, or the listener id when a listener acted.
    actor text not null default current_user,
    entity text not null,
    -- uuid-keyed rows (jobs, runs, routines, loops) fill entity_id; rows
    -- keyed by name (agents, settings) fill entity_key.
    entity_id uuid,
    entity_key text,
    action text not null,
    old_state text,
    new_state text,
    detail jsonb not null default '{}',

    -- An audit row that names no entity cannot be found from the entity.
    constraint entity_named check (num_nonnulls(entity_id, entity_key) >= 1)
);

comment on table audit_log is
    'Append-only: every state change of jobs, runs, routines and loops, and every operator action.';

create index audit_log_entity_idx on audit_log (entity, entity_id, id) where entity_id is not null;
create index audit_log_entity_key_idx on audit_log (entity, entity_key, id) where entity_key is not null;
