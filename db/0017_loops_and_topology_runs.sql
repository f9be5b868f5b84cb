-- Loops and topology runs (seed 003, spec sections 6 and 7): what running
-- them needs beyond the foundation's tables.
--
-- Function bodies live in functions/50_topology_notify.sql (audit, NOTIFY),
-- 51_topology_graph.sql (validation), 52_topology_runs.sql (fan-out / fan-in),
-- 53_approvals.sql (gates), 54_topology_views.sql, 55_loop_validation.sql,
-- 56_loop_firing.sql (triggers, chaining, repeat policies), 57_loop_cron.sql
-- and 58_loop_status.sql.

set local search_path = ceaseless, pg_catalog, public;

-- ---------------------------------------------------------------------------
-- Owners (spec section 10): loops and runs are owned rows like routines, by
-- role name, so row-level security can show a user role only its own. The
-- seed's loops.created_by (a users row) stays; a trigger fills it from the
-- owner, so a user role never needs to write the users table.
-- ---------------------------------------------------------------------------
alter table loops add column user_id text not null default current_user;
comment on column loops.user_id is
    'The role that owns this loop; RLS shows a user role only its own. Its iterations and '
    'their jobs belong to it too.';
create index loops_user_idx on loops (user_id, created_at desc);

alter table topology_runs add column user_id text not null default current_user;
comment on column topology_runs.user_id is
    'The role that owns this run (its loop''s owner for an iteration); its node jobs are theirs.';
create index topology_runs_user_idx on topology_runs (user_id, created_at desc);

-- ---------------------------------------------------------------------------
-- What fired an iteration, and fires that were refused. A refused fire is a
-- `skipped` run, like routines' skipped rows: the operator sees every fire.
-- ---------------------------------------------------------------------------
alter table topology_runs
    add column trigger_type text
        check (trigger_type in ('cron', 'on_completion', 'webhook', 'manual')),
    add column trigger_detail text,
    add column skip_reason text
        check (skip_reason in ('live_iteration', 'disabled', 'agent_disabled')),
    -- A skipped run without a reason explains nothing; a reason on a run
    -- that ran is a contradiction.
    add constraint skip_reason_iff_skipped
        check ((skip_reason is not null) = (status = 'skipped'));

comment on column topology_runs.trigger_type is
    'What started this run: cron, on_completion, webhook or manual (run_loop); NULL for a run '
    'inserted directly.';
comment on column topology_runs.skip_reason is
    'Why a fire was refused: live_iteration (at most one live iteration per loop), disabled, '
    'agent_disabled.';

-- A skipped fire belongs to its loop but took no place in the chain, so it
-- has no iteration number: numbering it would leave a gap, or take N + 1
-- from the fire that did run.
alter table topology_runs drop constraint loop_iteration_complete;
alter table topology_runs add constraint loop_iteration_complete
    check (case when status = 'skipped' then iteration is null
                else (loop_id is null) = (iteration is null) end);

-- Deleting a loop deletes its iterations. With SET NULL (the seed's), the
-- iterations kept their numbers without a loop, which loop_iteration_complete
-- refuses: no loop could be deleted at all. The audit log keeps what ran.
alter table topology_runs drop constraint topology_runs_loop_id_fkey;
alter table topology_runs
    add constraint topology_runs_loop_id_fkey
        foreign key (loop_id) references loops (id) on delete cascade;

-- At most one live iteration per loop (spec 6.4), held by the database: two
-- fires racing (a cron slot and a completion, two webhooks) cannot both
-- insert a live run; the loser is recorded as skipped.
create unique index topology_runs_one_live_iteration_idx
    on topology_runs (loop_id)
    where loop_id is not null and status in ('pending', 'running', 'awaiting_approval');

-- Skipped fires of a loop, newest first, for loop_status and the CLI.
create index topology_runs_loop_skipped_idx
    on topology_runs (loop_id, created_at desc)
    where status = 'skipped';

-- ---------------------------------------------------------------------------
-- Per-node state of a run: the fan-in counter lives on the row, so the node
-- whose last upstream succeeded is found by key, decided under that row's
-- lock, and started exactly once, whichever upstream finishes last.
-- ---------------------------------------------------------------------------
create table topology_nodes (
    topology_run_id uuid not null references topology_runs (id) on delete cascade,
    node_id text not null,
    agent text not null references agents (name) on update cascade,
    prompt text not null,
    gate text check (gate in ('approval')),
    -- Seconds an approval may wait before the run fails; NULL: forever.
    approval_timeout_secs integer,
    state text not null default 'waiting'
        check (state in ('waiting', 'awaiting_approval', 'queued', 'running',
                         'succeeded', 'failed', 'cancelled')),
    -- Upstream nodes not yet succeeded. Zero is the moment the node may run.
    upstream_left integer not null,
    job_id uuid references job (id) on delete set null,
    -- The node's output: its job's final assistant message (bounded).
    output text,
    error text,
    started_at timestamptz,
    finished_at timestamptz,
    created_at timestamptz not null default now(),

    primary key (topology_run_id, node_id),

    -- A negative count is a decrement applied twice: the node would start
    -- before one of its upstreams, or never.
    constraint upstream_left_not_negative check (upstream_left >= 0),
    -- A queued or running node has its job, or nothing could finish it. (Not
    -- the converse: a finished node outlives its job when retention prunes it.)
    constraint live_node_has_job
        check (state not in ('queued', 'running') or job_id is not null),
    constraint finished_iff_terminal
        check ((finished_at is not null) = (state in ('succeeded', 'failed', 'cancelled'))),
    constraint approval_timeout_positive
        check (approval_timeout_secs is null or approval_timeout_secs > 0)
);

comment on table topology_nodes is
    'One row per node of a topology run: its state, its job, its output and the count of '
    'upstream nodes still to succeed (the fan-in counter).';

-- A node's job finishing finds its node by the job's id.
create index topology_nodes_job_idx on topology_nodes (job_id) where job_id is not null;

-- ---------------------------------------------------------------------------
-- Approvals: a timeout, and the system's decision when it passes.
-- ---------------------------------------------------------------------------
alter table approvals add column expires_at timestamptz;
comment on column approvals.expires_at is
    'When an undecided approval expires and fails its run; NULL: it waits for a person.';

-- expired: nobody decided in time. Not `rejected`, which says somebody did.
alter table approvals drop constraint approvals_decision_check;
alter table approvals add constraint decision_known
    check (decision in ('approved', 'rejected', 'expired'));

-- The expiry sweep reads only undecided approvals that can expire.
create index approvals_expiry_idx on approvals (expires_at)
    where decision is null and expires_at is not null;

-- ---------------------------------------------------------------------------
-- Loops: why and when they stopped, what their policy counts from, what
-- went wrong.
-- ---------------------------------------------------------------------------
alter table loops
    add column stopped_at timestamptz,
    -- A repeat policy counts the iterations after this one: re-enabling a
    -- stopped loop continues its chain (iteration numbers go on) while its
    -- policy starts counting again, or an `iters {n: 3}` loop would stop
    -- again at once.
    add column policy_from_iteration integer not null default 0,
    -- Set when the engine cannot use the stored configuration (a schedule
    -- croniter rejects), so the operator sees why the loop was disabled.
    add column last_error text,
    add constraint policy_from_iteration_not_negative check (policy_from_iteration >= 0),
    -- A stop without its reason cannot be explained; a reason of an
    -- unknown kind cannot be acted on.
    add constraint stopped_reason_known
        check (stopped_reason in ('completed', 'exhausted', 'failed', 'cancelled')),
    add constraint stopped_at_iff_reason
        check ((stopped_at is null) = (stopped_reason is null));

comment on column loops.stopped_reason is
    'Why the loop stopped: completed (its policy was met), exhausted (within_iters passed '
    'without the condition), failed (an iteration failed), cancelled (an iteration was cancelled).';

-- ---------------------------------------------------------------------------
-- Notifications about loops (stopped) and approvals (pending).
-- ---------------------------------------------------------------------------
alter table notifications drop constraint source_table_known;
alter table notifications add constraint source_table_known
    check (source_table in ('routine_runs', 'topology_runs', 'job', 'loops', 'approvals'));
alter table notifications drop constraint notifications_kind_check;
alter table notifications add constraint kind_known
    check (kind in ('success', 'failure', 'attention', 'stopped', 'approval'));

-- ---------------------------------------------------------------------------
-- Bounds of what a run carries from one agent to the next.
-- ---------------------------------------------------------------------------
insert into settings (key, value, description) values
    ('topology_upstream_chars', '20000',
     'Characters of each upstream node''s output that go into a node''s prompt; the rest is cut '
     'with a marker, so one verbose agent cannot flood the next.'),
    ('loop_prior_context_chars', '20000',
     'Characters of the previous iteration''s final message that go into the next iteration''s '
     'task as prior-iteration context.')
on conflict (key) do nothing;

-- ---------------------------------------------------------------------------
-- Row-level security: loops are owned rows like routines (spec section 10).
-- ---------------------------------------------------------------------------
alter table topology_nodes enable row level security;
create policy all_rows on topology_nodes to ceaseless_listener, ceaseless_operator
    using (true) with check (true);

create policy own_rows on loops to ceaseless_user
    using (user_id = current_user) with check (user_id = current_user);
create policy own_rows on topology_runs to ceaseless_user
    using (user_id = current_user) with check (user_id = current_user);
-- Gates and nodes belong to whoever owns their run: the subquery is itself
-- under RLS, so it finds only the user's own runs. Writes go through
-- functions (decide_approval, the engine's triggers).
create policy own_rows on approvals to ceaseless_user
    using (exists (select from topology_runs r where r.id = topology_run_id));
create policy own_rows on topology_nodes to ceaseless_user
    using (exists (select from topology_runs r where r.id = topology_run_id));
