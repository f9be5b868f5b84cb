-- The schema a fresh install creates: every role, table, column, constraint, index,
-- trigger, policy, grant, sequence, view and function of schema ceaseless, and every
-- comment. Generated from the catalog by bin/regen-sql-reference; do not edit by hand.
-- tests/sql/test_schema_dump.py compares a fresh install with it, so every schema change
-- shows here in review, as the net effect of db/ and functions/.
--
-- A function's body is not repeated here: it lives once, in the file of functions/ named
-- above it, and its digest (md5 of the source text) stands for it, so a changed body
-- shows as a changed line.
-- Privileges the owning role holds are left out: the owner is whoever ran the migrations.

-- Roles (created by the migrations, granted the schema; cluster-wide, so a second
-- database on the server reuses them)

create role ceaseless_listener nologin inherit;
create role ceaseless_operator nologin inherit;
create role ceaseless_user nologin inherit;

create schema ceaseless;
grant usage on schema ceaseless to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- Tables

create table ceaseless.agent_run (
    id uuid default gen_random_uuid() not null,
    job_id uuid not null,
    agent text not null,
    adapter text not null,
    model text,
    billing text default 'unknown'::text not null,
    session_id text,
    outcome text,
    pr_forge text,
    pr_owner text,
    pr_repo text,
    pr_number bigint,
    pr_head_branch text,
    pr_url text,
    worker text not null,
    attempt integer not null,
    exit_status integer,
    final_message text,
    error text,
    tokens_in bigint,
    tokens_out bigint,
    cost_usd numeric(12,6),
    num_turns integer,
    rate_limit_reset_at timestamp with time zone,
    started_at timestamp with time zone default now() not null,
    finished_at timestamp with time zone,
    ended_by text,
    reply text,
    replied_by text,
    constraint agent_run_adapter_check CHECK ((adapter = ANY ('{claude_code,opencode,command,noop}'::text[]))),
    constraint agent_run_agent_fkey FOREIGN KEY (agent) REFERENCES ceaseless.agents(name) ON UPDATE CASCADE,
    constraint agent_run_billing_check CHECK ((billing = ANY ('{subscription,api_key,unknown}'::text[]))),
    constraint agent_run_job_id_fkey FOREIGN KEY (job_id) REFERENCES ceaseless.job(id) ON DELETE CASCADE,
    constraint agent_run_pkey PRIMARY KEY (id),
    constraint agent_run_pr_forge_check CHECK ((pr_forge = ANY ('{gitea,github}'::text[]))),
    constraint attempt_positive CHECK ((attempt >= 1)),
    constraint cost_usd_not_negative CHECK ((cost_usd >= (0)::numeric)),
    constraint ended_by_known CHECK ((ended_by = ANY ('{agent,lease_expiry,release,cancel}'::text[]))),
    constraint ended_by_only_when_finished CHECK (((ended_by IS NULL) OR (finished_at IS NOT NULL))),
    constraint error_bounded CHECK ((char_length(error) <= 65536)),
    constraint final_message_bounded CHECK ((char_length(final_message) <= 65536)),
    constraint finished_has_outcome CHECK (((finished_at IS NULL) = (outcome IS NULL))),
    constraint outcome_known CHECK ((outcome = ANY ('{succeeded,failed,rate_limited,budget_exhausted,output_budget_exhausted,timed_out,cancelled,lease_expired,auth_failed,needs_human}'::text[]))) NOT VALID,
    constraint pull_request_complete CHECK ((num_nonnulls(pr_forge, pr_owner, pr_repo, pr_number, pr_head_branch, pr_url) = ANY ('{0,6}'::integer[]))),
    constraint reply_bounded CHECK (((char_length(reply) >= 1) AND (char_length(reply) <= 16000))),
    constraint reply_complete CHECK ((num_nonnulls(reply, replied_by) = ANY ('{0,2}'::integer[]))),
    constraint session_id_plausible CHECK ((session_id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$'::text)),
    constraint tokens_not_negative CHECK (((tokens_in >= 0) AND (tokens_out >= 0)))
) with (autovacuum_vacuum_scale_factor=0.01, autovacuum_vacuum_threshold=1000, autovacuum_vacuum_insert_scale_factor=0.05, autovacuum_analyze_scale_factor=0.02, autovacuum_vacuum_cost_delay=0);
alter table ceaseless.agent_run enable row level security;
CREATE INDEX agent_run_job_idx ON ceaseless.agent_run USING btree (job_id, started_at DESC);
CREATE INDEX agent_run_lane_window_idx ON ceaseless.agent_run USING btree (agent, started_at DESC);
CREATE UNIQUE INDEX agent_run_one_open_idx ON ceaseless.agent_run USING btree (job_id) WHERE (finished_at IS NULL);
CREATE TRIGGER agent_run_insert AFTER INSERT ON ceaseless.agent_run REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ceaseless._tg_agent_run_insert();
CREATE TRIGGER agent_run_metrics AFTER UPDATE ON ceaseless.agent_run REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ceaseless._tg_agent_run_metrics();
CREATE TRIGGER agent_run_update AFTER UPDATE ON ceaseless.agent_run REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ceaseless._tg_agent_run_update();
create policy all_rows on ceaseless.agent_run for all to ceaseless_listener, ceaseless_operator
    using (true)
    with check (true);
create policy own_rows on ceaseless.agent_run for all to ceaseless_user
    using ((EXISTS ( SELECT
   FROM ceaseless.job j
  WHERE (j.id = agent_run.job_id))));
comment on table ceaseless.agent_run is 'One invocation of one agent against one job: who ran it, what it cost, how it ended.';
comment on column ceaseless.agent_run.ended_by is 'Who ended the run: agent (its listener reported the result), lease_expiry (the lease passed and a sweep closed it), release (its listener shut down and gave the job back) or cancel (cancel_job). NULL while open, and on runs ended before this column existed.';
comment on column ceaseless.agent_run.reply is 'The person''s reply this run carried to the agent as its prompt (job.reply when claimed).';
comment on column ceaseless.agent_run.replied_by is 'Who sent agent_run.reply (job.replied_by).';
grant select on table ceaseless.agent_run to ceaseless_operator, ceaseless_user;
grant select, insert, update, delete on table ceaseless.agent_run to ceaseless_listener;

create table ceaseless.agents (
    name text not null,
    adapter text not null,
    argv text[] default '{}'::text[] not null,
    env jsonb default '{}'::jsonb not null,
    model text,
    timeout_secs integer default 3600 not null,
    kill_grace_secs integer default 10 not null,
    max_concurrent integer default 4 not null,
    window_secs integer default 3600 not null,
    window_budget integer,
    max_attempts integer default 3 not null,
    enabled boolean default true not null,
    created_at timestamp with time zone default now() not null,
    updated_at timestamp with time zone default now() not null,
    env_passthrough text[] default '{}'::text[] not null,
    window_cost_usd numeric(12,6),
    window_tokens bigint,
    egress text[] default '{api.anthropic.com,platform.claude.com,claude.ai,console.anthropic.com,models.dev,models.opencode.ai,opencode.ai,registry.npmjs.org,api.openai.com,auth.openai.com,chatgpt.com,openrouter.ai}'::text[] not null,
    notify_on_failed boolean default true not null,
    notify_on_blocked boolean default true not null,
    notify_on_abandoned boolean default false not null,
    notify_channel text,
    fairness text default 'fifo'::text not null,
    max_cost_usd numeric(12,6),
    max_tokens bigint,
    constraint agents_adapter_check CHECK ((adapter = ANY ('{claude_code,opencode,command,noop}'::text[]))),
    constraint agents_pkey PRIMARY KEY (name),
    constraint argv_no_empty_executable CHECK (((cardinality(argv) = 0) OR (argv[1] <> ''::text))),
    constraint argv_not_empty_for_process_adapters CHECK (((adapter = 'noop'::text) OR (cardinality(argv) >= 1))),
    constraint env_is_object_of_strings CHECK (((jsonb_typeof(env) = 'object'::text) AND (NOT jsonb_path_exists(env, '$.*?(@.type() != "string")'::jsonpath)))),
    constraint env_passthrough_names CHECK (((cardinality(env_passthrough) = 0) OR ((cardinality(env_passthrough) <= 100) AND (array_position(env_passthrough, NULL::text) IS NULL) AND (array_to_string(env_passthrough, ','::text) ~ '^[A-Za-z_][A-Za-z0-9_]*(,[A-Za-z_][A-Za-z0-9_]*)*$'::text) AND (string_to_array(array_to_string(env_passthrough, ','::text), ','::text) = env_passthrough)))),
    constraint env_passthrough_not_database CHECK ((NOT (((','::text || upper(array_to_string(env_passthrough, ','::text))) || ','::text) ~ ',(DATABASE_URL|PG[A-Z0-9_]*|CEASELESS_[A-Z0-9_]*),'::text))),
    constraint fairness_known CHECK ((fairness = ANY ('{fifo,round_robin}'::text[]))),
    constraint kill_grace_secs_not_negative CHECK ((kill_grace_secs >= 0)),
    constraint max_attempts_positive CHECK ((max_attempts > 0)),
    constraint max_concurrent_positive CHECK ((max_concurrent > 0)),
    constraint max_cost_usd_positive CHECK ((max_cost_usd > (0)::numeric)),
    constraint max_tokens_positive CHECK ((max_tokens > 0)),
    constraint name_url_safe CHECK ((name ~ '^[a-z0-9][a-z0-9_.-]*$'::text)),
    constraint notify_channel_not_empty CHECK ((notify_channel <> ''::text)),
    constraint timeout_secs_positive CHECK ((timeout_secs > 0)),
    constraint window_budget_positive CHECK ((window_budget > 0)),
    constraint window_cost_usd_positive CHECK ((window_cost_usd > (0)::numeric)),
    constraint window_secs_positive CHECK ((window_secs > 0)),
    constraint window_tokens_positive CHECK ((window_tokens > 0))
);
CREATE TRIGGER agents_bounded_json BEFORE INSERT OR UPDATE OF env ON ceaseless.agents FOR EACH ROW WHEN (jsonb_path_exists(new.env, 'strict $.**{65}'::jsonpath)) EXECUTE FUNCTION ceaseless._tg_bounded_json('env');
CREATE TRIGGER agents_changed AFTER INSERT OR DELETE OR UPDATE ON ceaseless.agents FOR EACH ROW EXECUTE FUNCTION ceaseless._tg_config_changed();
CREATE TRIGGER agents_disabled AFTER UPDATE OF enabled ON ceaseless.agents FOR EACH ROW WHEN ((old.enabled AND (NOT new.enabled))) EXECUTE FUNCTION ceaseless._tg_agents_disabled();
CREATE TRIGGER agents_enabled AFTER UPDATE ON ceaseless.agents REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ceaseless._tg_agents_enabled();
CREATE TRIGGER agents_validate_egress BEFORE INSERT OR UPDATE OF egress ON ceaseless.agents FOR EACH ROW EXECUTE FUNCTION ceaseless._tg_agents_validate_egress();
CREATE TRIGGER agents_zz_quiet_checks BEFORE INSERT OR UPDATE ON ceaseless.agents FOR EACH ROW WHEN (true) EXECUTE FUNCTION ceaseless._tg_agents_quiet_checks();
comment on table ceaseless.agents is 'The agent registry: one row per lane. Listeners cache it and reload on NOTIFY ceaseless_config.';
comment on column ceaseless.agents.env_passthrough is 'Names of the listener''s environment variables this agent also gets (never DATABASE_URL, PG* or CEASELESS_*).';
comment on column ceaseless.agents.window_cost_usd is 'Budget in USD per rolling window (window_secs): claims wait while the lane''s runs started in the window reported this much cost_usd or more. NULL: no cost budget.';
comment on column ceaseless.agents.window_tokens is 'Budget in tokens (tokens_in + tokens_out) per rolling window: claims wait while the lane''s runs started in the window reported this many or more. NULL: no token budget.';
comment on column ceaseless.agents.egress is 'Where a sandboxed agent may connect, through its egress proxy: {none}, {open} (any public address) or host[:port] entries (*.domain for its subdomains, IP literals, port 443 when none is given).';
comment on column ceaseless.agents.notify_on_failed is 'Queue a failure notification when a plain job of this lane (no routine, no topology run) fails for good, its attempts used up.';
comment on column ceaseless.agents.notify_on_blocked is 'Queue an attention notification when a job of this lane is blocked on what only a person can fix: its agent could not authenticate, or a forge run asks for a human.';
comment on column ceaseless.agents.notify_on_abandoned is 'Queue a failure notification when a plain job of this lane is abandoned: every attempt''s lease expired without an agent''s verdict. Off by default: a listener going away is the operator''s to see first.';
comment on column ceaseless.agents.notify_channel is 'The notification sink (a key of the notification_sinks setting) of this lane''s job notifications; NULL: "default".';
comment on column ceaseless.agents.fairness is 'How the lane orders its due jobs: fifo (by priority, then by when they fell due) or round_robin (one job per owner in turn, and within an owner one per fairness key in turn, each key''s jobs by priority then due time).';
comment on column ceaseless.agents.max_cost_usd is 'Default spend ceiling in USD of each job of this lane that sets none (job.max_cost_usd); unlike window_cost_usd, it stops one job, not the lane.';
comment on column ceaseless.agents.max_tokens is 'Default spend ceiling in tokens of each job of this lane that sets none (job.max_tokens).';
grant select, insert, update, delete on table ceaseless.agents to ceaseless_listener, ceaseless_operator;
grant select (name, adapter, argv, model, timeout_secs, kill_grace_secs, max_concurrent, window_secs, window_budget, max_attempts, enabled, created_at, updated_at, window_cost_usd, window_tokens, egress, notify_on_failed, notify_on_blocked, notify_on_abandoned, notify_channel, fairness, max_cost_usd, max_tokens) on table ceaseless.agents to ceaseless_user;

create unlogged table ceaseless.announcements (
    id bigint generated always as identity not null,
    channel text not null,
    payload text not null,
    created_at timestamp with time zone default now() not null,
    constraint announcement_channel_sendable CHECK (((channel <> ''::text) AND (octet_length(channel) < 64))),
    constraint announcement_payload_sendable CHECK ((octet_length(payload) < 8000)),
    constraint announcements_pkey PRIMARY KEY (id)
);
comment on table ceaseless.announcements is 'Announcements written by sessions with ceaseless.notify = ''relay'', waiting for a listener to send them (relay_announcements), oldest first. Unlogged: lost in a crash, like a NOTIFY.';
comment on column ceaseless.announcements.id is 'Write order: the order a listener sends them in.';
grant select on table ceaseless.announcements to ceaseless_operator;
grant select, insert, update, delete on table ceaseless.announcements to ceaseless_listener;

create table ceaseless.approvals (
    id uuid default gen_random_uuid() not null,
    topology_run_id uuid not null,
    node_id text not null,
    requested_at timestamp with time zone default now() not null,
    decision text,
    decided_by text,
    decided_at timestamp with time zone,
    note text,
    expires_at timestamp with time zone,
    decided_by_role text,
    remind_at timestamp with time zone,
    reminded_at timestamp with time zone,
    constraint approvals_pkey PRIMARY KEY (id),
    constraint approvals_topology_run_id_fkey FOREIGN KEY (topology_run_id) REFERENCES ceaseless.topology_runs(id) ON DELETE CASCADE,
    constraint approvals_topology_run_id_node_id_key UNIQUE (topology_run_id, node_id),
    constraint decision_complete CHECK ((((decision IS NULL) = (decided_by IS NULL)) AND ((decision IS NULL) = (decided_at IS NULL)))),
    constraint decision_known CHECK ((decision = ANY ('{approved,rejected,expired}'::text[])))
);
alter table ceaseless.approvals enable row level security;
CREATE INDEX approvals_expiry_idx ON ceaseless.approvals USING btree (expires_at) WHERE ((decision IS NULL) AND (expires_at IS NOT NULL));
CREATE INDEX approvals_open_idx ON ceaseless.approvals USING btree (requested_at) WHERE (decision IS NULL);
CREATE INDEX approvals_reminder_idx ON ceaseless.approvals USING btree (remind_at) WHERE ((decision IS NULL) AND (reminded_at IS NULL) AND (remind_at IS NOT NULL));
CREATE TRIGGER approvals_changed AFTER INSERT OR UPDATE OF decision ON ceaseless.approvals FOR EACH ROW EXECUTE FUNCTION ceaseless._tg_approvals_changed();
create policy all_rows on ceaseless.approvals for all to ceaseless_listener, ceaseless_operator
    using (true)
    with check (true);
create policy own_rows on ceaseless.approvals for all to ceaseless_user
    using ((EXISTS ( SELECT
   FROM ceaseless.topology_runs r
  WHERE (r.id = approvals.topology_run_id))));
comment on table ceaseless.approvals is 'Gated approvals of topology nodes: a request, then one decision with who, when and a note.';
comment on column ceaseless.approvals.expires_at is 'When an undecided approval expires and fails its run; NULL: it waits for a person.';
comment on column ceaseless.approvals.decided_by_role is 'The login role that decided the approval (session_user), filled by decide_approval; decided_by is the name the caller gave.';
comment on column ceaseless.approvals.remind_at is 'When the reminder of this approval is due (expires_at less the node''s remind_before_secs).';
comment on column ceaseless.approvals.reminded_at is 'When the reminder was sent; NULL until then. One reminder per request.';
grant select on table ceaseless.approvals to ceaseless_operator, ceaseless_user;
grant select, insert, update, delete on table ceaseless.approvals to ceaseless_listener;

create table ceaseless.audit_log (
    id bigint generated always as identity not null,
    at timestamp with time zone default now() not null,
    actor text default SESSION_USER not null,
    entity text not null,
    entity_id uuid,
    entity_key text,
    action text not null,
    old_state text,
    new_state text,
    detail jsonb default '{}'::jsonb not null,
    worker text default 
CASE
    WHEN pg_has_role(SESSION_USER, 'ceaseless_listener'::name, 'usage'::text) THEN NULLIF(current_setting('ceaseless.actor'::text, true), ''::text)
    ELSE NULL::text
END,
    constraint audit_log_pkey PRIMARY KEY (id),
    constraint entity_named CHECK ((num_nonnulls(entity_id, entity_key) >= 1))
) with (autovacuum_vacuum_insert_scale_factor=0.05, autovacuum_vacuum_cost_delay=0);
CREATE INDEX audit_log_entity_idx ON ceaseless.audit_log USING btree (entity, entity_id, id) WHERE (entity_id IS NOT NULL);
CREATE INDEX audit_log_entity_key_idx ON ceaseless.audit_log USING btree (entity, entity_key, id) WHERE (entity_key IS NOT NULL);
CREATE INDEX audit_log_run_loop_idx ON ceaseless.audit_log USING btree (((detail ->> 'loop_id'::text)), id) WHERE (entity = 'topology_run'::text);
CREATE TRIGGER audit_log_actor_is_session BEFORE INSERT ON ceaseless.audit_log FOR EACH ROW WHEN (((new.actor IS DISTINCT FROM (SESSION_USER)::text) OR ((new.worker IS NOT NULL) AND (NOT pg_has_role(SESSION_USER, 'ceaseless_listener'::name, 'usage'::text))))) EXECUTE FUNCTION ceaseless._tg_audit_log_actor();
CREATE TRIGGER audit_log_append_only BEFORE DELETE OR UPDATE ON ceaseless.audit_log FOR EACH ROW EXECUTE FUNCTION ceaseless._tg_audit_log_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON ceaseless.audit_log FOR EACH STATEMENT EXECUTE FUNCTION ceaseless._tg_audit_log_append_only();
comment on table ceaseless.audit_log is 'Append-only: every state change of jobs, runs, routines and loops, and every operator action.';
comment on column ceaseless.audit_log.actor is 'The login role (session_user) whose session made the change. A row naming any other is refused (audit_log_actor_is_session).';
comment on column ceaseless.audit_log.worker is 'For a member of ceaseless_listener, the worker id its functions claimed for the transaction (--worker-id): which listener process acted, as that role says. NULL for every other role.';
grant select on table ceaseless.audit_log to ceaseless_operator;
grant select, insert on table ceaseless.audit_log to ceaseless_listener;

create table ceaseless.events (
    id uuid default gen_random_uuid() not null,
    user_id text default CURRENT_USER not null,
    channel text,
    content text not null,
    payload jsonb default '{}'::jsonb not null,
    fired_count integer default 0 not null,
    created_at timestamp with time zone default now() not null,
    constraint events_pkey PRIMARY KEY (id),
    constraint payload_is_object CHECK ((jsonb_typeof(payload) = 'object'::text))
);
alter table ceaseless.events enable row level security;
CREATE INDEX events_created_idx ON ceaseless.events USING btree (created_at);
CREATE INDEX events_user_created_idx ON ceaseless.events USING btree (user_id, created_at DESC);
CREATE TRIGGER events_bounded_json BEFORE INSERT OR UPDATE OF payload ON ceaseless.events FOR EACH ROW WHEN (jsonb_path_exists(new.payload, 'strict $.**{65}'::jsonpath)) EXECUTE FUNCTION ceaseless._tg_bounded_json('payload');
CREATE TRIGGER events_fire BEFORE INSERT ON ceaseless.events FOR EACH ROW EXECUTE FUNCTION ceaseless._tg_events_fire();
create policy all_rows on ceaseless.events for all to ceaseless_listener, ceaseless_operator
    using (true)
    with check (true);
create policy own_rows on ceaseless.events for all to ceaseless_user
    using ((user_id = CURRENT_USER))
    with check ((user_id = CURRENT_USER));
comment on table ceaseless.events is 'INSERT a row to emit an event; enabled event routines of that user whose pattern matches fire in the same transaction.';
grant select on table ceaseless.events to ceaseless_operator, ceaseless_user;
grant select, insert, update, delete on table ceaseless.events to ceaseless_listener;
grant insert (id, user_id, channel, content, payload) on table ceaseless.events to ceaseless_user;

create table ceaseless.forge_child_issue (
    id uuid default gen_random_uuid() not null,
    plan_job_id uuid not null,
    repo_id uuid not null,
    parent_number bigint not null,
    key text not null,
    position integer not null,
    title text not null,
    body text not null,
    marker text not null,
    attempts integer default 0 not null,
    next_attempt_at timestamp with time zone default now() not null,
    last_error text,
    number bigint,
    html_url text,
    implement_job_id uuid,
    created_at timestamp with time zone default now() not null,
    created_on_forge_at timestamp with time zone,
    user_id text not null,
    constraint attempts_not_negative CHECK ((attempts >= 0)),
    constraint body_bounded CHECK ((char_length(body) <= 60000)),
    constraint created_complete CHECK ((((number IS NULL) = (created_on_forge_at IS NULL)) AND ((number IS NULL) OR (html_url IS NOT NULL)))),
    constraint forge_child_issue_implement_job_id_fkey FOREIGN KEY (implement_job_id) REFERENCES ceaseless.job(id) ON DELETE SET NULL,
    constraint forge_child_issue_pkey PRIMARY KEY (id),
    constraint forge_child_issue_plan_job_id_fkey FOREIGN KEY (plan_job_id) REFERENCES ceaseless.job(id) ON DELETE CASCADE,
    constraint forge_child_issue_repo_id_fkey FOREIGN KEY (repo_id) REFERENCES ceaseless.tracked_repo(id) ON DELETE CASCADE,
    constraint forge_child_issue_repo_id_parent_number_key_key UNIQUE (repo_id, parent_number, key),
    constraint key_format CHECK ((key ~ '^[A-Za-z0-9._-]{1,64}$'::text)),
    constraint last_error_bounded CHECK ((char_length(last_error) <= 1000)),
    constraint title_bounded CHECK (((char_length(title) >= 1) AND (char_length(title) <= 256)))
);
alter table ceaseless.forge_child_issue enable row level security;
CREATE INDEX forge_child_issue_due_idx ON ceaseless.forge_child_issue USING btree (next_attempt_at) WHERE (number IS NULL);
CREATE INDEX forge_child_issue_implement_idx ON ceaseless.forge_child_issue USING btree (implement_job_id) WHERE (implement_job_id IS NOT NULL);
CREATE INDEX forge_child_issue_plan_idx ON ceaseless.forge_child_issue USING btree (plan_job_id);
create policy all_rows on ceaseless.forge_child_issue for all to ceaseless_listener, ceaseless_operator
    using (true)
    with check (true);
create policy own_rows on ceaseless.forge_child_issue for all to ceaseless_user
    using ((user_id = CURRENT_USER));
comment on table ceaseless.forge_child_issue is 'Child issues a plan job reported, one row per (repo, plan issue, key): created on the forge by a listener (number, html_url), then enqueued as an implement job with the plan job as parent (implement_job_id).';
grant select on table ceaseless.forge_child_issue to ceaseless_operator, ceaseless_user;
grant select, insert, update, delete on table ceaseless.forge_child_issue to ceaseless_listener;

create table ceaseless.forge_issue (
    repo_id uuid not null,
    number bigint not null,
    title text not null,
    author text not null,
    labels text[] default '{}'::text[] not null,
    labelled_by jsonb default '{}'::jsonb not null,
    html_url text,
    seen_at timestamp with time zone not null,
    constraint author_bounded CHECK (((char_length(author) >= 1) AND (char_length(author) <= 100))),
    constraint forge_issue_pkey PRIMARY KEY (repo_id, number),
    constraint forge_issue_repo_id_fkey FOREIGN KEY (repo_id) REFERENCES ceaseless.tracked_repo(id) ON DELETE CASCADE,
    constraint labelled_by_is_object CHECK ((jsonb_typeof(labelled_by) = 'object'::text)),
    constraint labels_bounded CHECK ((cardinality(labels) <= 100)),
    constraint number_positive CHECK ((number > 0)),
    constraint title_bounded CHECK ((char_length(title) <= 1000))
);
alter table ceaseless.forge_issue enable row level security;
create policy all_rows on ceaseless.forge_issue for all to ceaseless_listener, ceaseless_operator
    using (true)
    with check (true);
create policy own_rows on ceaseless.forge_issue for all to ceaseless_user
    using ((EXISTS ( SELECT
   FROM ceaseless.tracked_repo r
  WHERE (r.id = forge_issue.repo_id))));
comment on table ceaseless.forge_issue is 'The open issues of each tracked repo as its last listing showed them (title, author, labels, who added the work labels); replaced by ingest_issues on every listing, kept across 304 answers. Text from the forge: bounded, and read only for the work labels and admission.';
grant select on table ceaseless.forge_issue to ceaseless_operator, ceaseless_user;
grant select, insert, update, delete on table ceaseless.forge_issue to ceaseless_listener;

create table ceaseless.held_fires (
    id uuid default gen_random_uuid() not null,
    routine_id uuid,
    loop_id uuid,
    user_id text not null,
    reason text not null,
    blocked_by text,
    policy text not null,
    trigger_type text not null,
    trigger_detail text,
    context text,
    slot_at timestamp with time zone,
    first_at timestamp with time zone not null,
    last_at timestamp with time zone not null,
    fire_at timestamp with time zone,
    collapsed integer default 1 not null,
    seq bigint generated always as identity not null,
    created_at timestamp with time zone default now() not null,
    constraint held_fires_collapsed_positive CHECK ((collapsed >= 1)),
    constraint held_fires_detail_bounded CHECK ((char_length(trigger_detail) <= 200)),
    constraint held_fires_loop_id_fkey FOREIGN KEY (loop_id) REFERENCES ceaseless.loops(id) ON DELETE CASCADE,
    constraint held_fires_one_target CHECK ((num_nonnulls(routine_id, loop_id) = 1)),
    constraint held_fires_pkey PRIMARY KEY (id),
    constraint held_fires_policy_known CHECK ((policy = ANY ('{skip,buffer_one,buffer_all,cancel_other,allow_all}'::text[]))),
    constraint held_fires_reason_known CHECK ((reason = ANY ('{buffered,debounced}'::text[]))),
    constraint held_fires_routine_id_fkey FOREIGN KEY (routine_id) REFERENCES ceaseless.routines(id) ON DELETE CASCADE
);
alter table ceaseless.held_fires enable row level security;
CREATE INDEX held_fires_fire_at_idx ON ceaseless.held_fires USING btree (fire_at) WHERE (fire_at IS NOT NULL);
CREATE INDEX held_fires_loop_idx ON ceaseless.held_fires USING btree (loop_id, seq) WHERE (loop_id IS NOT NULL);
CREATE INDEX held_fires_routine_idx ON ceaseless.held_fires USING btree (routine_id, seq) WHERE (routine_id IS NOT NULL);
CREATE TRIGGER held_fires_inserted AFTER INSERT ON ceaseless.held_fires REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ceaseless._tg_held_fires_inserted();
create policy all_rows on ceaseless.held_fires for all to ceaseless_listener, ceaseless_operator
    using (true)
    with check (true);
create policy own_rows on ceaseless.held_fires for all to ceaseless_user
    using ((user_id = CURRENT_USER));
comment on table ceaseless.held_fires is 'Fires of routines and loops that wait: buffered (refused by cooldown, max_concurrent or a live iteration under a buffer policy) or debounced (collapsing into one). fire_held starts them through the one firing path; they survive restarts.';
comment on column ceaseless.held_fires.reason is 'buffered or debounced.';
comment on column ceaseless.held_fires.blocked_by is 'The skip reason that refused it (cooldown, concurrency, live_iteration), or min_interval for a loop''s fire that came sooner than its min_interval_secs; NULL before any.';
comment on column ceaseless.held_fires.slot_at is 'The cron slot a held cron or backfill fire stands for (its run''s slot_at); NULL otherwise.';
comment on column ceaseless.held_fires.fire_at is 'The earliest moment fire_held tries it (a debounce window''s end, a cooldown''s end, the end of a loop''s min_interval_secs); NULL: when a run of its target ends.';
comment on column ceaseless.held_fires.collapsed is 'How many fires this row stands for (debounce).';
comment on column ceaseless.held_fires.seq is 'Release order within a routine or loop.';
grant select on table ceaseless.held_fires to ceaseless_operator, ceaseless_user;
grant select, insert, update, delete on table ceaseless.held_fires to ceaseless_listener;

create table ceaseless.job (
    id uuid default gen_random_uuid() not null,
    forge text,
    owner text,
    repo text,
    number bigint,
    kind text not null,
    state text default 'pending'::text not null,
    agent text not null,
    prompt text default ''::text not null,
    payload jsonb default '{}'::jsonb not null,
    max_turns integer,
    resume_session_id text,
    dedup_key text,
    run_after timestamp with time zone default now() not null,
    claimed_by text,
    claim_expires_at timestamp with time zone,
    parent_job_id uuid,
    routine_run_id uuid,
    topology_run_id uuid,
    attempts integer default 0 not null,
    max_attempts integer,
    last_error text,
    labels_synced_at timestamp with time zone,
    created_at timestamp with time zone default now() not null,
    updated_at timestamp with time zone default now() not null,
    finished_at timestamp with time zone,
    expects_reply boolean default false not null,
    claimed_at timestamp with time zone,
    user_id text default CURRENT_USER not null,
    labels_synced_label text,
    labels_retry_at timestamp with time zone,
    labels_error text,
    priority integer default 0 not null,
    fairness_key text default CURRENT_USER not null,
    reply text,
    replied_by text,
    replied_at timestamp with time zone,
    max_cost_usd numeric(12,6),
    max_tokens bigint,
    constraint claim_complete CHECK (((claimed_by IS NULL) = (claim_expires_at IS NULL))),
    constraint dedup_key_not_empty CHECK ((dedup_key <> ''::text)),
    constraint fairness_key_bounded CHECK (((char_length(fairness_key) >= 1) AND (char_length(fairness_key) <= 200))),
    constraint finished_iff_terminal CHECK (((finished_at IS NOT NULL) = (state = ANY ('{delivered,blocked,failed,abandoned,cancelled}'::text[])))),
    constraint issue_ref_complete CHECK ((num_nonnulls(forge, owner, repo, number) = ANY ('{0,4}'::integer[]))),
    constraint issue_ref_required_for_forge_kinds CHECK (((kind <> ALL ('{discover,plan,implement}'::text[])) OR (forge IS NOT NULL))),
    constraint job_agent_fkey FOREIGN KEY (agent) REFERENCES ceaseless.agents(name) ON UPDATE CASCADE,
    constraint job_attempts_check CHECK ((attempts >= 0)),
    constraint job_forge_check CHECK ((forge = ANY ('{gitea,github}'::text[]))),
    constraint job_kind_check CHECK ((kind = ANY ('{discover,plan,implement,routine,loop_node,task}'::text[]))),
    constraint job_parent_job_id_fkey FOREIGN KEY (parent_job_id) REFERENCES ceaseless.job(id),
    constraint job_pkey PRIMARY KEY (id),
    constraint job_routine_run_id_fkey FOREIGN KEY (routine_run_id) REFERENCES ceaseless.routine_runs(id) ON DELETE SET NULL,
    constraint job_state_check CHECK ((state = ANY ('{pending,claimed,running,delivered,blocked,failed,abandoned,cancelled}'::text[]))),
    constraint job_topology_run_id_fkey FOREIGN KEY (topology_run_id) REFERENCES ceaseless.topology_runs(id) ON DELETE SET NULL,
    constraint labels_error_bounded CHECK ((char_length(labels_error) <= 1000)),
    constraint live_claim_held CHECK (((state <> ALL ('{claimed,running}'::text[])) OR (claimed_by IS NOT NULL))),
    constraint max_attempts_positive CHECK ((max_attempts > 0)),
    constraint max_cost_usd_positive CHECK ((max_cost_usd > (0)::numeric)),
    constraint max_tokens_positive CHECK ((max_tokens > 0)),
    constraint max_turns_positive CHECK ((max_turns > 0)),
    constraint payload_is_object CHECK ((jsonb_typeof(payload) = 'object'::text)),
    constraint pending_holds_no_claim CHECK (((state <> 'pending'::text) OR (claimed_by IS NULL))),
    constraint priority_bounded CHECK (((priority >= '-1000'::integer) AND (priority <= 1000))),
    constraint reply_bounded CHECK (((char_length(reply) >= 1) AND (char_length(reply) <= 16000))),
    constraint reply_complete CHECK ((num_nonnulls(reply, replied_by, replied_at) = ANY ('{0,3}'::integer[]))),
    constraint resume_session_id_resumable CHECK ((resume_session_id ~ '^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|ses_[0-9A-Za-z]{26})$'::text)) NOT VALID
) with (autovacuum_vacuum_scale_factor=0.01, autovacuum_vacuum_threshold=1000, autovacuum_vacuum_insert_scale_factor=0.05, autovacuum_analyze_scale_factor=0.02, autovacuum_vacuum_cost_delay=0);
alter table ceaseless.job enable row level security;
CREATE INDEX job_blocked_idx ON ceaseless.job USING btree (agent) WHERE (state = 'blocked'::text);
CREATE INDEX job_claim_expiry_idx ON ceaseless.job USING btree (claim_expires_at) WHERE (state = ANY (ARRAY['claimed'::text, 'running'::text]));
CREATE INDEX job_claimable_idx ON ceaseless.job USING btree (agent, priority DESC, run_after) WHERE (state = 'pending'::text);
CREATE INDEX job_created_idx ON ceaseless.job USING btree (created_at DESC);
CREATE INDEX job_fair_claim_idx ON ceaseless.job USING btree (agent, user_id COLLATE "C", fairness_key COLLATE "C", priority DESC, run_after) WHERE (state = 'pending'::text);
CREATE INDEX job_issue_history_idx ON ceaseless.job USING btree (forge, owner, repo, number, kind, created_at DESC) WHERE (forge IS NOT NULL);
CREATE INDEX job_labels_due_idx ON ceaseless.job USING btree (labels_retry_at NULLS FIRST) WHERE ((forge IS NOT NULL) AND (labels_synced_label IS DISTINCT FROM
CASE state
    WHEN 'pending'::text THEN 'ceaseless:pending'::text
    WHEN 'claimed'::text THEN 'ceaseless:running'::text
    WHEN 'running'::text THEN 'ceaseless:running'::text
    WHEN 'delivered'::text THEN 'ceaseless:delivered'::text
    WHEN 'blocked'::text THEN 'ceaseless:blocked'::text
    ELSE 'ceaseless:failed'::text
END));
CREATE INDEX job_lane_live_idx ON ceaseless.job USING btree (agent) WHERE (state = ANY (ARRAY['claimed'::text, 'running'::text]));
CREATE UNIQUE INDEX job_live_dedup_idx ON ceaseless.job USING btree (dedup_key) WHERE ((state = ANY (ARRAY['pending'::text, 'claimed'::text, 'running'::text])) AND (dedup_key IS NOT NULL));
CREATE UNIQUE INDEX job_live_issue_idx ON ceaseless.job USING btree (forge, owner, repo, number) WHERE ((state = ANY (ARRAY['pending'::text, 'claimed'::text, 'running'::text])) AND (forge IS NOT NULL));
CREATE INDEX job_parent_idx ON ceaseless.job USING btree (parent_job_id) WHERE (parent_job_id IS NOT NULL);
CREATE INDEX job_routine_run_idx ON ceaseless.job USING btree (routine_run_id) WHERE (routine_run_id IS NOT NULL);
CREATE INDEX job_topology_run_idx ON ceaseless.job USING btree (topology_run_id) WHERE (topology_run_id IS NOT NULL);
CREATE INDEX job_user_idx ON ceaseless.job USING btree (user_id, created_at DESC);
CREATE TRIGGER job_bounded_json BEFORE INSERT OR UPDATE OF payload ON ceaseless.job FOR EACH ROW WHEN (jsonb_path_exists(new.payload, 'strict $.**{65}'::jsonpath)) EXECUTE FUNCTION ceaseless._tg_bounded_json('payload');
CREATE TRIGGER job_default_agent BEFORE INSERT OR UPDATE OF agent ON ceaseless.job FOR EACH ROW WHEN ((new.agent IS NULL)) EXECUTE FUNCTION ceaseless._tg_default_agent();
CREATE TRIGGER job_ended AFTER UPDATE ON ceaseless.job REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ceaseless._tg_job_ended();
CREATE TRIGGER job_input BEFORE INSERT OR UPDATE OF prompt, payload ON ceaseless.job FOR EACH ROW WHEN (((char_length(new.prompt) > 2000000) OR (char_length((new.payload)::text) > 1000000) OR COALESCE(((new.payload -> 'context_paths'::text) <> '[]'::jsonb), false) OR ceaseless._is_blank(new.prompt))) EXECUTE FUNCTION ceaseless._tg_job_input();
CREATE TRIGGER job_insert AFTER INSERT ON ceaseless.job REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ceaseless._tg_job_insert();
CREATE TRIGGER job_plan_children AFTER UPDATE ON ceaseless.job REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ceaseless._tg_job_plan_children();
CREATE TRIGGER job_routine_outcome AFTER UPDATE ON ceaseless.job REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ceaseless._tg_job_routine_outcome();
CREATE TRIGGER job_spend_ceiling BEFORE INSERT ON ceaseless.job FOR EACH ROW WHEN ((((new.max_cost_usd IS NULL) OR (new.max_tokens IS NULL)) AND (new.routine_run_id IS NULL))) EXECUTE FUNCTION ceaseless._tg_job_spend_ceiling();
CREATE TRIGGER job_topology_outcome AFTER UPDATE ON ceaseless.job REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ceaseless._tg_job_topology_outcome();
CREATE TRIGGER job_update AFTER UPDATE ON ceaseless.job REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ceaseless._tg_job_update();
CREATE TRIGGER job_user_due BEFORE INSERT ON ceaseless.job FOR EACH ROW WHEN ((new.run_after < now())) EXECUTE FUNCTION ceaseless._tg_job_user_due();
CREATE TRIGGER job_validate BEFORE INSERT OR UPDATE OF resume_session_id ON ceaseless.job FOR EACH ROW WHEN ((new.resume_session_id IS NOT NULL)) EXECUTE FUNCTION ceaseless._tg_job_validate();
create policy all_rows on ceaseless.job for all to ceaseless_listener, ceaseless_operator
    using (true)
    with check (true);
create policy own_rows on ceaseless.job for all to ceaseless_user
    using ((user_id = CURRENT_USER))
    with check ((user_id = CURRENT_USER));
comment on table ceaseless.job is 'The one durable queue: forge, routine, loop and ad-hoc work. INSERT a row to enqueue.';
comment on column ceaseless.job.expects_reply is 'An empty final message counts as a failure (retried while attempts remain): set for lightweight routine runs, whose whole product is the reply.';
comment on column ceaseless.job.claimed_at is 'When the job was last claimed (claim_jobs). Read while the job is claimed or running; claim_expires_at cannot say it, since every heartbeat moves it.';
comment on column ceaseless.job.user_id is 'The role that owns this job (enqueued it, or owns its routine or loop); RLS shows a user role only its own.';
comment on column ceaseless.job.labels_synced_label is 'The state label the mirror last wrote on the forge issue (ceaseless:<state>); NULL before the first sync. Written by the label identity, never read to decide anything.';
comment on column ceaseless.job.labels_retry_at is 'When the label mirror may next try this job: set when handed out (so two listeners do not write the same labels) and after a failed sync (backoff).';
comment on column ceaseless.job.labels_error is 'Why the last label sync failed; cleared by the next that succeeds. Never changes the job.';
comment on column ceaseless.job.priority is 'Higher first within a lane (and, in a round_robin lane, within the job''s fairness key); between -1000 and 1000, default 0. Ties go to the job due first.';
comment on column ceaseless.job.fairness_key is 'Whose turn the job waits for in a round_robin lane: the lane takes turns across owners (user_id) first, then across each owner''s fairness keys, so a key can only share out its owner''s turns. Default: the owner.';
comment on column ceaseless.job.reply is 'A person''s reply waiting for the job''s next run (reply_job, raise_job_budget): that run resumes the agent''s session with it as the prompt. Cleared when a run that carried it ends with a verdict; kept through an interrupted run, so a reply is never lost.';
comment on column ceaseless.job.replied_by is 'Who sent job.reply: the login role, and for a listener''s dashboard the listener''s `<worker id> dashboard:<user>` (ceaseless.actor).';
comment on column ceaseless.job.replied_at is 'When job.reply was sent.';
comment on column ceaseless.job.max_cost_usd is 'Spend ceiling in USD over all the job''s runs (agent_run.cost_usd): a run passing it stops, and the job is blocked budget_exhausted until raise_job_budget. NULL: its routine''s, else its agent''s, else none.';
comment on column ceaseless.job.max_tokens is 'Spend ceiling in tokens (tokens_in + tokens_out) over all the job''s runs, as max_cost_usd. NULL: its routine''s, else its agent''s, else none.';
grant select on table ceaseless.job to ceaseless_operator, ceaseless_user;
grant select, insert, update, delete on table ceaseless.job to ceaseless_listener;
grant insert (id, kind, agent, prompt, payload, max_turns, dedup_key, run_after, max_attempts, user_id, priority, fairness_key, max_cost_usd, max_tokens) on table ceaseless.job to ceaseless_user;

create table ceaseless.lane_pauses (
    agent text not null,
    paused_until timestamp with time zone not null,
    reason text not null,
    updated_at timestamp with time zone default now() not null,
    constraint lane_pauses_agent_fkey FOREIGN KEY (agent) REFERENCES ceaseless.agents(name) ON UPDATE CASCADE ON DELETE CASCADE,
    constraint lane_pauses_pkey PRIMARY KEY (agent),
    constraint reason_not_blank CHECK ((reason ~ '[^\u0009-\u000d\u001c-\u0020\u0085\u00a0\u1680\u180e\u2000-\u200b\u2028\u2029\u202f\u205f\u2060\u3000\ufeff]'::text))
);
comment on table ceaseless.lane_pauses is 'Agent lanes paused until a time (a provider rate limit, or an operator): claim_jobs skips them until then. Not configuration: a change here audits nothing and NOTIFYs no listener. Delete the row to lift a pause.';
grant select on table ceaseless.lane_pauses to ceaseless_operator, ceaseless_user;
grant select, insert, update, delete on table ceaseless.lane_pauses to ceaseless_listener;

create table ceaseless.lane_turns (
    agent text not null,
    user_id text not null,
    constraint lane_turns_pkey PRIMARY KEY (agent)
) with (fillfactor=50);
comment on table ceaseless.lane_turns is 'The owner a round_robin lane served last; the next claim starts with the owner after it (written by claim_jobs under the lane lock).';
grant select on table ceaseless.lane_turns to ceaseless_operator;
grant select, insert, update, delete on table ceaseless.lane_turns to ceaseless_listener;

create table ceaseless.late_results (
    id bigint generated always as identity not null,
    run_id uuid not null,
    job_id uuid,
    worker text not null,
    reason text not null,
    result jsonb not null,
    received_at timestamp with time zone default now() not null,
    constraint late_results_pkey PRIMARY KEY (id),
    constraint reason_not_empty CHECK ((reason <> ''::text)),
    constraint result_is_object CHECK ((jsonb_typeof(result) = 'object'::text))
);
CREATE INDEX late_results_received_idx ON ceaseless.late_results USING btree (received_at DESC);
CREATE INDEX late_results_run_idx ON ceaseless.late_results USING btree (run_id);
comment on table ceaseless.late_results is 'Agent results refused because their run had already ended (lease expired, released, cancelled) or was not the reporter''s: kept apart, never written onto the closed run.';
grant select on table ceaseless.late_results to ceaseless_operator;
grant select, insert, update, delete on table ceaseless.late_results to ceaseless_listener;

create table ceaseless.listener_reports (
    worker text not null,
    started_at timestamp with time zone default now() not null,
    host text not null,
    pid integer not null,
    sandbox text not null,
    agent_user text,
    isolation_warning text,
    db_auth text not null,
    http text,
    constraint bounded CHECK (((length(worker) <= 200) AND (length(host) <= 255) AND (length(agent_user) <= 64) AND (length(isolation_warning) <= 2000) AND (length(http) <= 300))),
    constraint db_auth_word CHECK ((db_auth ~ '^[a-z0-9-]{1,32}$'::text)),
    constraint listener_reports_pkey PRIMARY KEY (worker),
    constraint sandbox_known CHECK ((sandbox = ANY ('{bwrap,none}'::text[])))
);
comment on table ceaseless.listener_reports is 'What each running listener reports about itself at start (its agents'' sandbox and OS user, how its database connection authenticated, the HTTP address it serves), removed when it stops. Written by listeners only; read through listener_status.';
comment on column ceaseless.listener_reports.worker is 'The listener''s worker id (job.claimed_by).';
comment on column ceaseless.listener_reports.sandbox is 'How its agents are confined: bwrap (bubblewrap), or none.';
comment on column ceaseless.listener_reports.agent_user is 'The OS user its agents run as; NULL: the listener''s own.';
comment on column ceaseless.listener_reports.isolation_warning is 'Why its agents are not fully isolated, as the listener logged it at start; NULL: they are.';
comment on column ceaseless.listener_reports.db_auth is 'How its own database connection authenticated: password, trust (no password, and the server says none was asked), unknown (no password, on a server before PostgreSQL 16 that cannot say why), or the method system_user names (peer, cert, …).';
comment on column ceaseless.listener_reports.http is 'The HOST:PORT its HTTP server (webhooks, dashboard) listens on; NULL: none. Never its token.';
grant select on table ceaseless.listener_reports to ceaseless_operator;
grant select, insert, update, delete on table ceaseless.listener_reports to ceaseless_listener;

create table ceaseless.loops (
    id uuid default gen_random_uuid() not null,
    workspace_id uuid not null,
    title text not null,
    description text not null,
    graph jsonb not null,
    task_template text not null,
    triggers jsonb default '{}'::jsonb not null,
    repeat_policy jsonb default '{"kind": "infinite"}'::jsonb not null,
    enabled boolean default true not null,
    next_fire_at timestamp with time zone,
    last_run_id uuid,
    stopped_reason text,
    webhook_token text,
    webhook_signing_key text,
    created_by uuid not null,
    created_at timestamp with time zone default now() not null,
    updated_at timestamp with time zone default now() not null,
    user_id text default CURRENT_USER not null,
    stopped_at timestamp with time zone,
    policy_from_iteration integer default 0 not null,
    last_error text,
    overlap_policy text default 'skip'::text not null,
    debounce_secs integer,
    debounce_max_secs integer,
    job_priority integer default 0 not null,
    job_fairness_key text,
    min_interval_secs integer default 1 not null,
    constraint job_fairness_key_bounded CHECK (((char_length(job_fairness_key) >= 1) AND (char_length(job_fairness_key) <= 200))),
    constraint job_priority_bounded CHECK (((job_priority >= '-1000'::integer) AND (job_priority <= 1000))),
    constraint loops_created_by_fkey FOREIGN KEY (created_by) REFERENCES ceaseless.users(id) ON DELETE RESTRICT,
    constraint loops_debounce_max_at_least_secs CHECK ((debounce_max_secs >= debounce_secs)),
    constraint loops_debounce_max_needs_secs CHECK (((debounce_max_secs IS NULL) OR (debounce_secs IS NOT NULL))),
    constraint loops_debounce_max_secs_positive CHECK ((debounce_max_secs > 0)),
    constraint loops_debounce_secs_positive CHECK ((debounce_secs > 0)),
    constraint loops_last_run_id_fkey FOREIGN KEY (last_run_id) REFERENCES ceaseless.topology_runs(id) ON DELETE SET NULL,
    constraint loops_min_interval_secs_bounded CHECK (((min_interval_secs >= 0) AND (min_interval_secs <= 86400))),
    constraint loops_overlap_policy_known CHECK ((overlap_policy = ANY ('{skip,buffer_one,buffer_all,cancel_other}'::text[]))),
    constraint loops_pkey PRIMARY KEY (id),
    constraint loops_webhook_token_key UNIQUE (webhook_token),
    constraint loops_workspace_id_fkey FOREIGN KEY (workspace_id) REFERENCES ceaseless.workspaces(id) ON DELETE CASCADE,
    constraint policy_from_iteration_not_negative CHECK ((policy_from_iteration >= 0)),
    constraint repeat_policy_kind_known CHECK (((repeat_policy ->> 'kind'::text) = ANY ('{infinite,iters,until}'::text[]))),
    constraint stopped_at_iff_reason CHECK (((stopped_at IS NULL) = (stopped_reason IS NULL))),
    constraint stopped_reason_known CHECK ((stopped_reason = ANY ('{completed,exhausted,failed,cancelled}'::text[]))),
    constraint triggers_is_object CHECK ((jsonb_typeof(triggers) = 'object'::text)),
    constraint webhook_credentials_complete CHECK (((webhook_token IS NULL) = (webhook_signing_key IS NULL)))
);
alter table ceaseless.loops enable row level security;
CREATE INDEX loops_event_idx ON ceaseless.loops USING btree (user_id) WHERE (triggers ? 'event'::text);
CREATE INDEX loops_last_run_idx ON ceaseless.loops USING btree (last_run_id) WHERE (last_run_id IS NOT NULL);
CREATE INDEX loops_next_fire_idx ON ceaseless.loops USING btree (next_fire_at) WHERE (enabled AND (next_fire_at IS NOT NULL));
CREATE INDEX loops_user_idx ON ceaseless.loops USING btree (user_id, created_at DESC);
CREATE INDEX loops_workspace_idx ON ceaseless.loops USING btree (workspace_id, updated_at DESC);
CREATE TRIGGER loops_bounded_json BEFORE INSERT OR UPDATE OF graph, repeat_policy, triggers ON ceaseless.loops FOR EACH ROW WHEN ((jsonb_path_exists(new.graph, 'strict $.**{65}'::jsonpath) OR jsonb_path_exists(new.repeat_policy, 'strict $.**{65}'::jsonpath) OR jsonb_path_exists(new.triggers, 'strict $.**{65}'::jsonpath))) EXECUTE FUNCTION ceaseless._tg_bounded_json('graph', 'repeat_policy', 'triggers');
CREATE TRIGGER loops_changed AFTER INSERT OR DELETE OR UPDATE OF id, workspace_id, title, description, graph, task_template, triggers, repeat_policy, enabled, stopped_reason, webhook_token, webhook_signing_key, created_by, created_at, updated_at, user_id, stopped_at, policy_from_iteration, last_error, overlap_policy, debounce_secs, debounce_max_secs, job_priority, job_fairness_key, min_interval_secs ON ceaseless.loops FOR EACH ROW EXECUTE FUNCTION ceaseless._tg_loops_changed();
CREATE TRIGGER loops_default_agent BEFORE INSERT OR UPDATE OF graph ON ceaseless.loops FOR EACH ROW EXECUTE FUNCTION ceaseless._tg_graph_default_agent();
CREATE TRIGGER loops_delete BEFORE DELETE ON ceaseless.loops FOR EACH ROW EXECUTE FUNCTION ceaseless._tg_loops_delete();
CREATE TRIGGER loops_graph_validate BEFORE INSERT OR UPDATE OF graph ON ceaseless.loops FOR EACH ROW EXECUTE FUNCTION ceaseless._tg_loops_graph_validate();
CREATE TRIGGER loops_schedule AFTER INSERT OR UPDATE OF id, workspace_id, title, description, graph, task_template, triggers, repeat_policy, enabled, stopped_reason, webhook_token, webhook_signing_key, created_by, created_at, updated_at, user_id, stopped_at, policy_from_iteration, last_error, overlap_policy, debounce_secs, debounce_max_secs, job_priority, job_fairness_key, min_interval_secs ON ceaseless.loops FOR EACH ROW EXECUTE FUNCTION ceaseless._tg_loops_schedule();
CREATE TRIGGER loops_validate BEFORE INSERT OR UPDATE OF id, workspace_id, title, description, graph, task_template, triggers, repeat_policy, enabled, stopped_reason, webhook_token, webhook_signing_key, created_by, created_at, updated_at, user_id, stopped_at, policy_from_iteration, last_error, overlap_policy, debounce_secs, debounce_max_secs, job_priority, job_fairness_key, min_interval_secs ON ceaseless.loops FOR EACH ROW EXECUTE FUNCTION ceaseless._tg_loops_validate();
CREATE TRIGGER loops_zz_quiet_checks BEFORE INSERT OR UPDATE ON ceaseless.loops FOR EACH ROW WHEN ((new.webhook_token IS NOT NULL)) EXECUTE FUNCTION ceaseless._tg_loops_quiet_checks();
create policy all_rows on ceaseless.loops for all to ceaseless_listener, ceaseless_operator
    using (true)
    with check (true);
create policy own_rows on ceaseless.loops for all to ceaseless_user
    using ((user_id = CURRENT_USER))
    with check ((user_id = CURRENT_USER));
comment on table ceaseless.loops is 'A recurring execution of a topology: each iteration is a topology_runs row chained to the last (seed 003).';
comment on column ceaseless.loops.stopped_reason is 'Why the loop stopped: completed (its policy was met), exhausted (within_iters passed without the condition), failed (an iteration failed), cancelled (an iteration was cancelled).';
comment on column ceaseless.loops.user_id is 'The role that owns this loop; RLS shows a user role only its own. Its iterations and their jobs belong to it too.';
comment on column ceaseless.loops.overlap_policy is 'What a fire refused because an iteration is live becomes: skip, buffer_one, buffer_all or cancel_other (as routines.overlap_policy; no allow_all: iterations form one chain).';
comment on column ceaseless.loops.debounce_secs is 'Event and webhook fires closer together than this collapse into one, started this many seconds after the last of them; NULL: no debounce.';
comment on column ceaseless.loops.debounce_max_secs is 'A debounced fire starts at the latest this many seconds after the first fire it collapses; NULL: no ceiling.';
comment on column ceaseless.loops.job_priority is 'The priority of the jobs of every node of this loop''s iterations (job.priority).';
comment on column ceaseless.loops.job_fairness_key is 'The fairness key of the jobs of every node of this loop''s iterations; NULL: the loop''s owner.';
comment on column ceaseless.loops.min_interval_secs is 'The least seconds between two fires of this loop''s iterations (0: unpaced): a fire sooner after the latest iteration was fired waits in held_fires (blocked_by min_interval) until then. run_loop is not paced.';
grant select on table ceaseless.loops to ceaseless_operator;
grant select, delete on table ceaseless.loops to ceaseless_user;
grant select, insert, update, delete on table ceaseless.loops to ceaseless_listener;
grant insert (id, user_id) on table ceaseless.loops to ceaseless_user;
grant insert, update (workspace_id, title, description, graph, task_template, triggers, repeat_policy, enabled, overlap_policy, debounce_secs, debounce_max_secs, job_priority, job_fairness_key, min_interval_secs) on table ceaseless.loops to ceaseless_user;

create table ceaseless.metric_deltas (
    id bigint generated always as identity not null,
    metric text not null,
    labels jsonb not null,
    value double precision not null,
    constraint labels_is_object CHECK ((jsonb_typeof(labels) = 'object'::text)),
    constraint metric_deltas_pkey PRIMARY KEY (id),
    constraint metric_name_valid CHECK ((metric ~ '^ceaseless_[a-z_]+$'::text)),
    constraint value_not_negative CHECK ((value >= (0)::double precision))
) with (autovacuum_vacuum_scale_factor=0.01, autovacuum_vacuum_threshold=1000, autovacuum_vacuum_cost_delay=0);
comment on table ceaseless.metric_deltas is 'Counter increments written by triggers (insert-only, so counting never waits on a lock), folded into metric_totals by _metrics_fold() on every lease sweep.';
grant select on table ceaseless.metric_deltas to ceaseless_operator;
grant select, insert, update, delete on table ceaseless.metric_deltas to ceaseless_listener;

create table ceaseless.metric_totals (
    metric text not null,
    labels jsonb not null,
    value double precision not null,
    constraint labels_is_object CHECK ((jsonb_typeof(labels) = 'object'::text)),
    constraint metric_name_valid CHECK ((metric ~ '^ceaseless_[a-z_]+$'::text)),
    constraint metric_totals_pkey PRIMARY KEY (metric, labels),
    constraint value_not_negative CHECK ((value >= (0)::double precision))
) with (fillfactor=50);
comment on table ceaseless.metric_totals is 'Prometheus counters folded from metric_deltas: one row per series (metric, labels).';
grant select on table ceaseless.metric_totals to ceaseless_operator;
grant select, insert, update, delete on table ceaseless.metric_totals to ceaseless_listener;

create table ceaseless.notifications (
    id uuid default gen_random_uuid() not null,
    source_table text not null,
    source_id uuid not null,
    kind text not null,
    channel text,
    recipient text,
    subject text not null,
    body text default ''::text not null,
    status text default 'pending'::text not null,
    attempts integer default 0 not null,
    next_attempt_at timestamp with time zone default now() not null,
    last_error text,
    created_at timestamp with time zone default now() not null,
    delivered_at timestamp with time zone,
    user_id text default CURRENT_USER not null,
    constraint delivered_at_iff_delivered CHECK (((delivered_at IS NOT NULL) = (status = 'delivered'::text))),
    constraint kind_known CHECK ((kind = ANY ('{success,failure,attention,stopped,approval}'::text[]))),
    constraint notifications_attempts_check CHECK ((attempts >= 0)),
    constraint notifications_pkey PRIMARY KEY (id),
    constraint notifications_status_check CHECK ((status = ANY ('{pending,delivered,failed}'::text[]))),
    constraint source_table_known CHECK ((source_table = ANY ('{routine_runs,topology_runs,job,loops,approvals}'::text[])))
) with (autovacuum_vacuum_scale_factor=0.02, autovacuum_vacuum_cost_delay=0);
alter table ceaseless.notifications enable row level security;
CREATE INDEX notifications_delivered_idx ON ceaseless.notifications USING btree (delivered_at) WHERE (status = 'delivered'::text);
CREATE INDEX notifications_failed_idx ON ceaseless.notifications USING btree (created_at) WHERE (status = 'failed'::text);
CREATE INDEX notifications_pending_idx ON ceaseless.notifications USING btree (next_attempt_at) WHERE (status = 'pending'::text);
CREATE TRIGGER notifications_insert AFTER INSERT ON ceaseless.notifications REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ceaseless._tg_notifications_insert();
CREATE TRIGGER notifications_update_metrics AFTER UPDATE ON ceaseless.notifications REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ceaseless._tg_notifications_update_metrics();
create policy all_rows on ceaseless.notifications for all to ceaseless_listener, ceaseless_operator
    using (true)
    with check (true);
create policy own_rows on ceaseless.notifications for all to ceaseless_user
    using ((user_id = CURRENT_USER));
comment on table ceaseless.notifications is 'Outbox of routine and loop notifications; listeners deliver them through configured sinks.';
comment on column ceaseless.notifications.user_id is 'The owner of the routine or loop this notification reports on.';
grant select on table ceaseless.notifications to ceaseless_operator, ceaseless_user;
grant select, insert, update, delete on table ceaseless.notifications to ceaseless_listener;

create table ceaseless.owner_budgets (
    user_id text not null,
    window_secs integer default 86400 not null,
    window_cost_usd numeric(12,6),
    window_tokens bigint,
    created_at timestamp with time zone default now() not null,
    updated_at timestamp with time zone default now() not null,
    constraint owner_budgets_pkey PRIMARY KEY (user_id),
    constraint some_budget CHECK ((num_nonnulls(window_cost_usd, window_tokens) > 0)),
    constraint window_cost_usd_positive CHECK ((window_cost_usd > (0)::numeric)),
    constraint window_secs_positive CHECK ((window_secs > 0)),
    constraint window_tokens_positive CHECK ((window_tokens > 0))
);
alter table ceaseless.owner_budgets enable row level security;
create policy all_rows on ceaseless.owner_budgets for all to ceaseless_listener, ceaseless_operator
    using (true)
    with check (true);
create policy own_rows on ceaseless.owner_budgets for all to ceaseless_user
    using ((user_id = CURRENT_USER));
comment on table ceaseless.owner_budgets is 'Spend budgets per owner role: over window_secs, the runs of the owner''s jobs may report at most window_cost_usd USD and window_tokens tokens (tokens_in + tokens_out); a claim waits while either is reached. Set by operators.';
comment on column ceaseless.owner_budgets.user_id is 'The owner role (job.user_id) the budget applies to.';
comment on column ceaseless.owner_budgets.window_secs is 'The rolling window, in seconds (default a day).';
comment on column ceaseless.owner_budgets.window_cost_usd is 'USD the owner''s runs started in the window may report; NULL: no cost budget.';
comment on column ceaseless.owner_budgets.window_tokens is 'Tokens the owner''s runs started in the window may report; NULL: no token budget.';
grant select on table ceaseless.owner_budgets to ceaseless_user;
grant select, insert, update, delete on table ceaseless.owner_budgets to ceaseless_listener, ceaseless_operator;

create table ceaseless.owner_turns (
    agent text not null,
    user_id text not null,
    fairness_key text not null,
    constraint owner_turns_pkey PRIMARY KEY (agent, user_id)
) with (fillfactor=50);
comment on table ceaseless.owner_turns is 'The fairness key a round_robin lane served last for each owner; that owner''s next turn goes to the key after it.';
grant select on table ceaseless.owner_turns to ceaseless_operator;
grant select, insert, update, delete on table ceaseless.owner_turns to ceaseless_listener;

create table ceaseless.routine_run_shards (
    shard smallint not null,
    running integer default 0 not null,
    xact xid8,
    constraint routine_run_shards_pkey PRIMARY KEY (shard),
    constraint shard_in_range CHECK (((shard >= 0) AND (shard <= 63)))
) with (fillfactor=50);
comment on table ceaseless.routine_run_shards is 'Running routine_runs, counted in 64 shards kept by trigger; the sum is the global cap''s measure. A single shard may be negative: only the sum means anything.';
comment on column ceaseless.routine_run_shards.xact is 'The transaction that last moved this shard: while it runs, its later moves go to the same shard, so it holds one at most.';
grant select on table ceaseless.routine_run_shards to ceaseless_operator;
grant select, insert, update, delete on table ceaseless.routine_run_shards to ceaseless_listener;

create table ceaseless.routine_runs (
    id uuid default gen_random_uuid() not null,
    routine_id uuid not null,
    trigger_type text not null,
    trigger_detail text,
    started_at timestamp with time zone default now() not null,
    completed_at timestamp with time zone,
    status text default 'running'::text not null,
    skip_reason text,
    missed_slots integer default 0 not null,
    content_hash text,
    context text,
    result_summary text,
    tokens_used integer,
    job_id uuid,
    created_at timestamp with time zone default now() not null,
    slot_at timestamp with time zone,
    constraint completed_iff_not_running CHECK (((completed_at IS NULL) = (status = 'running'::text))),
    constraint routine_runs_job_id_fkey FOREIGN KEY (job_id) REFERENCES ceaseless.job(id),
    constraint routine_runs_missed_slots_check CHECK ((missed_slots >= 0)),
    constraint routine_runs_pkey PRIMARY KEY (id),
    constraint routine_runs_routine_id_fkey FOREIGN KEY (routine_id) REFERENCES ceaseless.routines(id) ON DELETE CASCADE,
    constraint routine_runs_status_check CHECK ((status = ANY ('{running,ok,attention,failed,skipped}'::text[]))),
    constraint routine_runs_trigger_type_check CHECK ((trigger_type = ANY ('{cron,event,webhook,manual,backfill}'::text[]))),
    constraint skip_reason_iff_skipped CHECK (((status = 'skipped'::text) = (skip_reason IS NOT NULL))),
    constraint skip_reason_known CHECK ((skip_reason = ANY ('{cooldown,concurrency,dedup,global_cap,missed_slots,disabled,agent_disabled}'::text[])))
);
alter table ceaseless.routine_runs enable row level security;
CREATE INDEX idx_routine_runs_dedup ON ceaseless.routine_runs USING btree (routine_id, content_hash, started_at DESC) WHERE (content_hash IS NOT NULL);
CREATE INDEX idx_routine_runs_routine ON ceaseless.routine_runs USING btree (routine_id, started_at DESC);
CREATE INDEX idx_routine_runs_running ON ceaseless.routine_runs USING btree (routine_id) WHERE (status = 'running'::text);
CREATE INDEX idx_routine_runs_status ON ceaseless.routine_runs USING btree (status) WHERE (status = 'running'::text);
CREATE INDEX routine_runs_completed_idx ON ceaseless.routine_runs USING btree (completed_at) WHERE (completed_at IS NOT NULL);
CREATE INDEX routine_runs_job_idx ON ceaseless.routine_runs USING btree (job_id) WHERE (job_id IS NOT NULL);
CREATE INDEX routine_runs_last_ok_idx ON ceaseless.routine_runs USING btree (routine_id, completed_at DESC) WHERE (status = 'ok'::text);
CREATE INDEX routine_runs_skipped_idx ON ceaseless.routine_runs USING btree (routine_id, started_at DESC) WHERE (status = 'skipped'::text);
CREATE INDEX routine_runs_slot_idx ON ceaseless.routine_runs USING btree (routine_id, slot_at) WHERE ((slot_at IS NOT NULL) AND (status <> 'skipped'::text));
CREATE TRIGGER routine_runs_deleted AFTER DELETE ON ceaseless.routine_runs REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION ceaseless._tg_routine_runs_deleted();
CREATE TRIGGER routine_runs_held_wake AFTER UPDATE ON ceaseless.routine_runs REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ceaseless._tg_routine_runs_held_wake();
CREATE TRIGGER routine_runs_insert AFTER INSERT ON ceaseless.routine_runs REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ceaseless._tg_routine_runs_insert();
CREATE TRIGGER routine_runs_insert_metrics AFTER INSERT ON ceaseless.routine_runs REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ceaseless._tg_routine_runs_insert_metrics();
CREATE TRIGGER routine_runs_update AFTER UPDATE ON ceaseless.routine_runs REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ceaseless._tg_routine_runs_update();
CREATE TRIGGER routine_runs_update_metrics AFTER UPDATE ON ceaseless.routine_runs REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ceaseless._tg_routine_runs_update_metrics();
create policy all_rows on ceaseless.routine_runs for all to ceaseless_listener, ceaseless_operator
    using (true)
    with check (true);
create policy own_rows on ceaseless.routine_runs for all to ceaseless_user
    using ((EXISTS ( SELECT
   FROM ceaseless.routines r
  WHERE (r.id = routine_runs.routine_id))));
comment on table ceaseless.routine_runs is 'Every fire of a routine, and every refused fire with its reason (seed 000).';
comment on column ceaseless.routine_runs.trigger_detail is 'What fired the run: the cron schedule, a preview of the event content, or the webhook path.';
comment on column ceaseless.routine_runs.skip_reason is 'Why a fire was refused: cooldown, concurrency (max_concurrent), dedup, global_cap (routine_max_running), disabled (the routine), agent_disabled (its agent), or missed_slots (cron slots that passed while no listener ran, collapsed into one fire).';
comment on column ceaseless.routine_runs.slot_at is 'The cron slot this run stands for: the slot a cron fire was due at, or the slot a backfill fired; NULL for other fires and for the row counting missed slots.';
grant select on table ceaseless.routine_runs to ceaseless_operator, ceaseless_user;
grant select, insert, update, delete on table ceaseless.routine_runs to ceaseless_listener;

create table ceaseless.routines (
    id uuid default gen_random_uuid() not null,
    name text not null,
    description text default ''::text not null,
    user_id text default CURRENT_USER not null,
    enabled boolean default true not null,
    trigger_type text not null,
    trigger_config jsonb default '{}'::jsonb not null,
    action_type text not null,
    action_config jsonb not null,
    agent text not null,
    cooldown_secs integer default 300 not null,
    max_concurrent integer default 1 not null,
    dedup_window_secs integer,
    notify_channel text,
    notify_user text,
    notify_on_success boolean default false not null,
    notify_on_failure boolean default true not null,
    notify_on_attention boolean default true not null,
    state jsonb default '{}'::jsonb not null,
    last_run_at timestamp with time zone,
    next_fire_at timestamp with time zone,
    run_count bigint default 0 not null,
    consecutive_failures integer default 0 not null,
    last_error text,
    created_at timestamp with time zone default now() not null,
    updated_at timestamp with time zone default now() not null,
    event_literal text default ''::text not null,
    overlap_policy text default 'skip'::text not null,
    debounce_secs integer,
    debounce_max_secs integer,
    job_priority integer default 0 not null,
    job_fairness_key text,
    max_cost_usd numeric(12,6),
    max_tokens bigint,
    constraint action_config_is_object CHECK ((jsonb_typeof(action_config) = 'object'::text)),
    constraint cooldown_secs_not_negative CHECK ((cooldown_secs >= 0)),
    constraint dedup_window_secs_positive CHECK ((dedup_window_secs > 0)),
    constraint job_fairness_key_bounded CHECK (((char_length(job_fairness_key) >= 1) AND (char_length(job_fairness_key) <= 200))),
    constraint job_priority_bounded CHECK (((job_priority >= '-1000'::integer) AND (job_priority <= 1000))),
    constraint max_concurrent_positive CHECK ((max_concurrent > 0)),
    constraint max_cost_usd_positive CHECK ((max_cost_usd > (0)::numeric)),
    constraint max_tokens_positive CHECK ((max_tokens > 0)),
    constraint routines_action_type_check CHECK ((action_type = ANY ('{lightweight,full_job}'::text[]))),
    constraint routines_agent_fkey FOREIGN KEY (agent) REFERENCES ceaseless.agents(name) ON UPDATE CASCADE,
    constraint routines_debounce_max_at_least_secs CHECK ((debounce_max_secs >= debounce_secs)),
    constraint routines_debounce_max_needs_secs CHECK (((debounce_max_secs IS NULL) OR (debounce_secs IS NOT NULL))),
    constraint routines_debounce_max_secs_positive CHECK ((debounce_max_secs > 0)),
    constraint routines_debounce_secs_positive CHECK ((debounce_secs > 0)),
    constraint routines_overlap_policy_known CHECK ((overlap_policy = ANY ('{skip,buffer_one,buffer_all,cancel_other,allow_all}'::text[]))),
    constraint routines_pkey PRIMARY KEY (id),
    constraint routines_trigger_type_check CHECK ((trigger_type = ANY ('{cron,event,webhook,manual}'::text[]))),
    constraint routines_user_id_name_key UNIQUE (user_id, name),
    constraint trigger_config_is_object CHECK ((jsonb_typeof(trigger_config) = 'object'::text))
);
alter table ceaseless.routines enable row level security;
CREATE INDEX idx_routines_next_fire ON ceaseless.routines USING btree (next_fire_at) WHERE (enabled AND (next_fire_at IS NOT NULL));
CREATE UNIQUE INDEX idx_routines_webhook_path ON ceaseless.routines USING btree (((trigger_config ->> 'path'::text))) WHERE (trigger_type = 'webhook'::text);
CREATE INDEX routines_event_key_idx ON ceaseless.routines USING btree (user_id, "right"(event_literal, 4)) WHERE (enabled AND (trigger_type = 'event'::text) AND (char_length(event_literal) >= 4));
CREATE INDEX routines_event_keyless_idx ON ceaseless.routines USING btree (user_id) WHERE (enabled AND (trigger_type = 'event'::text) AND (char_length(event_literal) < 4));
CREATE TRIGGER routines_bounded_json BEFORE INSERT OR UPDATE OF trigger_config, action_config, state ON ceaseless.routines FOR EACH ROW WHEN ((jsonb_path_exists(new.trigger_config, 'strict $.**{65}'::jsonpath) OR jsonb_path_exists(new.action_config, 'strict $.**{65}'::jsonpath) OR jsonb_path_exists(new.state, 'strict $.**{65}'::jsonpath))) EXECUTE FUNCTION ceaseless._tg_bounded_json('trigger_config', 'action_config', 'state');
CREATE TRIGGER routines_changed AFTER INSERT OR DELETE OR UPDATE OF id, name, description, user_id, enabled, trigger_type, trigger_config, action_type, action_config, agent, cooldown_secs, max_concurrent, dedup_window_secs, notify_channel, notify_user, notify_on_success, notify_on_failure, notify_on_attention, last_error, created_at, updated_at, event_literal, overlap_policy, debounce_secs, debounce_max_secs, job_priority, job_fairness_key, max_cost_usd, max_tokens ON ceaseless.routines FOR EACH ROW EXECUTE FUNCTION ceaseless._tg_routines_changed();
CREATE TRIGGER routines_default_agent BEFORE INSERT OR UPDATE OF agent ON ceaseless.routines FOR EACH ROW WHEN ((new.agent IS NULL)) EXECUTE FUNCTION ceaseless._tg_default_agent();
CREATE TRIGGER routines_validate BEFORE INSERT OR UPDATE OF id, name, description, user_id, enabled, trigger_type, trigger_config, action_type, action_config, agent, cooldown_secs, max_concurrent, dedup_window_secs, notify_channel, notify_user, notify_on_success, notify_on_failure, notify_on_attention, last_error, created_at, updated_at, event_literal, overlap_policy, debounce_secs, debounce_max_secs, job_priority, job_fairness_key, max_cost_usd, max_tokens ON ceaseless.routines FOR EACH ROW EXECUTE FUNCTION ceaseless._tg_routines_validate();
CREATE TRIGGER routines_zz_quiet_checks BEFORE INSERT OR UPDATE ON ceaseless.routines FOR EACH ROW WHEN ((new.trigger_config ? 'secret'::text)) EXECUTE FUNCTION ceaseless._tg_routines_quiet_checks();
create policy all_rows on ceaseless.routines for all to ceaseless_listener, ceaseless_operator
    using (true)
    with check (true);
create policy own_rows on ceaseless.routines for all to ceaseless_user
    using ((user_id = CURRENT_USER))
    with check ((user_id = CURRENT_USER));
comment on table ceaseless.routines is 'Named, user-owned tasks fired by cron, events, webhooks or by hand, with guardrails (seed 000).';
comment on column ceaseless.routines.last_run_at is 'When the last run finished (ok, attention or failed); cooldown_secs counts from here.';
comment on column ceaseless.routines.event_literal is 'For event routines: a string every content matching the pattern contains (or '''' when none is known), derived by _regex_required_literal at validation; checked before the regex.';
comment on column ceaseless.routines.overlap_policy is 'What a fire refused by cooldown or max_concurrent becomes: skip (recorded as skipped), buffer_one (the newest waits in held_fires), buffer_all (every one waits, in order, up to settings.overlap_buffer_max), cancel_other (the live runs are cancelled and it starts), allow_all (max_concurrent not judged; the global cap still is).';
comment on column ceaseless.routines.debounce_secs is 'Event and webhook fires closer together than this collapse into one, started this many seconds after the last of them; NULL: no debounce.';
comment on column ceaseless.routines.debounce_max_secs is 'A debounced fire starts at the latest this many seconds after the first fire it collapses; NULL: no ceiling.';
comment on column ceaseless.routines.job_priority is 'The priority of the jobs this routine''s fires create (job.priority).';
comment on column ceaseless.routines.job_fairness_key is 'The fairness key of the jobs this routine''s fires create; NULL: the routine''s owner.';
comment on column ceaseless.routines.max_cost_usd is 'Spend ceiling in USD of each job this routine fires (job.max_cost_usd); NULL: the agent''s.';
comment on column ceaseless.routines.max_tokens is 'Spend ceiling in tokens of each job this routine fires (job.max_tokens); NULL: the agent''s.';
grant select on table ceaseless.routines to ceaseless_operator;
grant select, delete on table ceaseless.routines to ceaseless_user;
grant select, insert, update, delete on table ceaseless.routines to ceaseless_listener;
grant insert (id, user_id) on table ceaseless.routines to ceaseless_user;
grant insert, update (name, description, enabled, trigger_type, trigger_config, action_type, action_config, agent, cooldown_secs, max_concurrent, dedup_window_secs, notify_channel, notify_user, notify_on_success, notify_on_failure, notify_on_attention, overlap_policy, debounce_secs, debounce_max_secs, job_priority, job_fairness_key, max_cost_usd, max_tokens) on table ceaseless.routines to ceaseless_user;

create table ceaseless.schema_functions (
    singleton boolean default true not null,
    checksum text not null,
    migration_count integer not null,
    files text[] not null,
    applied_at timestamp with time zone default now() not null,
    constraint one_row CHECK (singleton),
    constraint schema_functions_pkey PRIMARY KEY (singleton)
);
comment on table ceaseless.schema_functions is 'The functions/ set last applied by `ceaseless migrate`: its checksum, so an unchanged set is not re-applied. Delete the row to force a re-apply.';
grant select on table ceaseless.schema_functions to ceaseless_operator;
grant select, insert, update, delete on table ceaseless.schema_functions to ceaseless_listener;

create table ceaseless.schema_migrations (
    version integer not null,
    name text not null,
    checksum text not null,
    applied_at timestamp with time zone default now() not null,
    constraint schema_migrations_pkey PRIMARY KEY (version)
);
comment on table ceaseless.schema_migrations is 'Migrations applied by `ceaseless migrate`, with the checksum of the file as applied.';
grant select on table ceaseless.schema_migrations to ceaseless_operator;
grant select, insert, update, delete on table ceaseless.schema_migrations to ceaseless_listener;

create table ceaseless.settings (
    key text not null,
    value jsonb not null,
    description text default ''::text not null,
    updated_at timestamp with time zone default now() not null,
    constraint settings_pkey PRIMARY KEY (key)
);
CREATE TRIGGER settings_bounded_json BEFORE INSERT OR UPDATE OF value ON ceaseless.settings FOR EACH ROW WHEN (jsonb_path_exists(new.value, 'strict $.**{65}'::jsonpath)) EXECUTE FUNCTION ceaseless._tg_bounded_json('value');
CREATE TRIGGER settings_changed AFTER INSERT OR DELETE OR UPDATE ON ceaseless.settings FOR EACH ROW EXECUTE FUNCTION ceaseless._tg_config_changed();
CREATE TRIGGER settings_default_agent BEFORE INSERT OR UPDATE ON ceaseless.settings FOR EACH ROW WHEN ((new.key = 'default_agent'::text)) EXECUTE FUNCTION ceaseless._tg_settings_default_agent();
CREATE TRIGGER settings_validate BEFORE INSERT OR UPDATE ON ceaseless.settings FOR EACH ROW EXECUTE FUNCTION ceaseless._tg_settings_validate();
CREATE TRIGGER settings_zz_quiet_checks BEFORE INSERT OR UPDATE ON ceaseless.settings FOR EACH ROW WHEN (true) EXECUTE FUNCTION ceaseless._tg_settings_quiet_checks();
comment on table ceaseless.settings is 'Operator policy read by the SQL functions. Changing a row NOTIFYs ceaseless_config so listeners pick it up without a restart.';
grant select, insert, update, delete on table ceaseless.settings to ceaseless_listener, ceaseless_operator;

create table ceaseless.timezone_names (
    name text not null,
    constraint timezone_names_pkey PRIMARY KEY (name)
);
comment on table ceaseless.timezone_names is 'IANA zone names the server knew when migrated (no posix/ or right/ copies); a name missing here is looked up in pg_timezone_names.';
grant select on table ceaseless.timezone_names to ceaseless_operator;
grant select, insert, update, delete on table ceaseless.timezone_names to ceaseless_listener;

create table ceaseless.topology_nodes (
    topology_run_id uuid not null,
    node_id text not null,
    agent text not null,
    prompt text not null,
    gate text,
    approval_timeout_secs integer,
    state text default 'waiting'::text not null,
    upstream_left integer not null,
    job_id uuid,
    output text,
    error text,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    created_at timestamp with time zone default now() not null,
    on_expiry text default 'fail'::text not null,
    remind_before_secs integer,
    constraint approval_timeout_positive CHECK ((approval_timeout_secs > 0)),
    constraint finished_iff_terminal CHECK (((finished_at IS NOT NULL) = (state = ANY ('{succeeded,skipped,failed,cancelled}'::text[])))),
    constraint live_node_has_job CHECK (((state <> ALL ('{queued,running}'::text[])) OR (job_id IS NOT NULL))),
    constraint on_expiry_known CHECK ((on_expiry = ANY ('{fail,skip,approve}'::text[]))),
    constraint remind_before_positive CHECK ((remind_before_secs > 0)),
    constraint reminder_needs_expiry CHECK (((remind_before_secs IS NULL) OR (approval_timeout_secs IS NOT NULL))),
    constraint topology_nodes_agent_fkey FOREIGN KEY (agent) REFERENCES ceaseless.agents(name) ON UPDATE CASCADE,
    constraint topology_nodes_gate_check CHECK ((gate = 'approval'::text)),
    constraint topology_nodes_job_id_fkey FOREIGN KEY (job_id) REFERENCES ceaseless.job(id) ON DELETE SET NULL,
    constraint topology_nodes_pkey PRIMARY KEY (topology_run_id, node_id),
    constraint topology_nodes_state_check CHECK ((state = ANY ('{waiting,awaiting_approval,queued,running,blocked,succeeded,skipped,failed,cancelled}'::text[]))),
    constraint topology_nodes_topology_run_id_fkey FOREIGN KEY (topology_run_id) REFERENCES ceaseless.topology_runs(id) ON DELETE CASCADE,
    constraint upstream_left_not_negative CHECK ((upstream_left >= 0))
);
alter table ceaseless.topology_nodes enable row level security;
CREATE INDEX topology_nodes_job_idx ON ceaseless.topology_nodes USING btree (job_id) WHERE (job_id IS NOT NULL);
CREATE TRIGGER topology_nodes_changed AFTER UPDATE OF state ON ceaseless.topology_nodes FOR EACH ROW EXECUTE FUNCTION ceaseless._tg_topology_nodes_changed();
create policy all_rows on ceaseless.topology_nodes for all to ceaseless_listener, ceaseless_operator
    using (true)
    with check (true);
create policy own_rows on ceaseless.topology_nodes for all to ceaseless_user
    using ((EXISTS ( SELECT
   FROM ceaseless.topology_runs r
  WHERE (r.id = topology_nodes.topology_run_id))));
comment on table ceaseless.topology_nodes is 'One row per node of a topology run: its state, its job, its output and the count of upstream nodes still to succeed (the fan-in counter).';
comment on column ceaseless.topology_nodes.state is 'waiting, awaiting_approval, queued, running, blocked (its job waits for a person: reply_job or raise_job_budget), then succeeded, skipped (its approval expired under on_expiry skip: done, without an output), failed or cancelled.';
comment on column ceaseless.topology_nodes.on_expiry is 'What an undecided approval of this gated node does at its expiry: fail (the node and run fail), skip (the node is skipped and its downstream nodes run without its output) or approve (it is approved by ceaseless and the node runs).';
comment on column ceaseless.topology_nodes.remind_before_secs is 'Seconds before an approval of this node expires that its owner is reminded; NULL: no reminder.';
grant select on table ceaseless.topology_nodes to ceaseless_operator, ceaseless_user;
grant select, insert, update, delete on table ceaseless.topology_nodes to ceaseless_listener;

create table ceaseless.topology_runs (
    id uuid default gen_random_uuid() not null,
    workspace_id uuid not null,
    graph jsonb not null,
    task text not null,
    status text default 'pending'::text not null,
    final_message text,
    error text,
    loop_id uuid,
    iteration integer,
    parent_run_id uuid,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    created_at timestamp with time zone default now() not null,
    updated_at timestamp with time zone default now() not null,
    user_id text default CURRENT_USER not null,
    trigger_type text,
    trigger_detail text,
    skip_reason text,
    slot_at timestamp with time zone,
    constraint finished_iff_terminal CHECK (((finished_at IS NOT NULL) = (status = ANY ('{succeeded,failed,cancelled,skipped}'::text[])))),
    constraint iteration_positive CHECK ((iteration >= 1)),
    constraint loop_iteration_complete CHECK (
CASE
    WHEN (status = 'skipped'::text) THEN (iteration IS NULL)
    ELSE ((loop_id IS NULL) = (iteration IS NULL))
END),
    constraint skip_reason_iff_skipped CHECK (((skip_reason IS NOT NULL) = (status = 'skipped'::text))),
    constraint topology_runs_loop_id_fkey FOREIGN KEY (loop_id) REFERENCES ceaseless.loops(id) ON DELETE CASCADE,
    constraint topology_runs_parent_run_id_fkey FOREIGN KEY (parent_run_id) REFERENCES ceaseless.topology_runs(id) ON DELETE SET NULL,
    constraint topology_runs_pkey PRIMARY KEY (id),
    constraint topology_runs_skip_reason_check CHECK ((skip_reason = ANY ('{live_iteration,disabled,agent_disabled}'::text[]))),
    constraint topology_runs_status_check CHECK ((status = ANY ('{pending,running,awaiting_approval,succeeded,failed,cancelled,skipped}'::text[]))),
    constraint topology_runs_trigger_type_check CHECK ((trigger_type = ANY ('{cron,on_completion,webhook,manual,event,backfill}'::text[]))),
    constraint topology_runs_workspace_id_fkey FOREIGN KEY (workspace_id) REFERENCES ceaseless.workspaces(id) ON DELETE CASCADE
);
alter table ceaseless.topology_runs enable row level security;
CREATE INDEX topology_runs_finished_idx ON ceaseless.topology_runs USING btree (finished_at) WHERE (finished_at IS NOT NULL);
CREATE INDEX topology_runs_loop_idx ON ceaseless.topology_runs USING btree (loop_id, iteration DESC) WHERE (loop_id IS NOT NULL);
CREATE UNIQUE INDEX topology_runs_loop_iteration_idx ON ceaseless.topology_runs USING btree (loop_id, iteration) WHERE (loop_id IS NOT NULL);
CREATE INDEX topology_runs_loop_skipped_idx ON ceaseless.topology_runs USING btree (loop_id, created_at DESC) WHERE (status = 'skipped'::text);
CREATE UNIQUE INDEX topology_runs_one_live_iteration_idx ON ceaseless.topology_runs USING btree (loop_id) WHERE ((loop_id IS NOT NULL) AND (status = ANY (ARRAY['pending'::text, 'running'::text, 'awaiting_approval'::text])));
CREATE INDEX topology_runs_parent_idx ON ceaseless.topology_runs USING btree (parent_run_id) WHERE (parent_run_id IS NOT NULL);
CREATE INDEX topology_runs_slot_idx ON ceaseless.topology_runs USING btree (loop_id, slot_at) WHERE ((slot_at IS NOT NULL) AND (status <> 'skipped'::text));
CREATE INDEX topology_runs_user_idx ON ceaseless.topology_runs USING btree (user_id, created_at DESC);
CREATE TRIGGER topology_runs_bounded_json BEFORE INSERT OR UPDATE OF graph ON ceaseless.topology_runs FOR EACH ROW WHEN (jsonb_path_exists(new.graph, 'strict $.**{65}'::jsonpath)) EXECUTE FUNCTION ceaseless._tg_bounded_json('graph');
CREATE TRIGGER topology_runs_changed AFTER INSERT OR UPDATE OF status ON ceaseless.topology_runs FOR EACH ROW EXECUTE FUNCTION ceaseless._tg_topology_runs_changed();
CREATE TRIGGER topology_runs_default_agent BEFORE INSERT ON ceaseless.topology_runs FOR EACH ROW EXECUTE FUNCTION ceaseless._tg_graph_default_agent();
CREATE TRIGGER topology_runs_held_wake AFTER UPDATE OF status ON ceaseless.topology_runs FOR EACH ROW WHEN (((new.loop_id IS NOT NULL) AND (old.status = ANY (ARRAY['pending'::text, 'running'::text, 'awaiting_approval'::text])) AND (new.status <> ALL (ARRAY['pending'::text, 'running'::text, 'awaiting_approval'::text])))) EXECUTE FUNCTION ceaseless._tg_topology_runs_held_wake();
CREATE TRIGGER topology_runs_insert_metrics AFTER INSERT ON ceaseless.topology_runs REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ceaseless._tg_topology_runs_insert_metrics();
CREATE TRIGGER topology_runs_loop_lock BEFORE INSERT ON ceaseless.topology_runs FOR EACH ROW WHEN (((new.loop_id IS NOT NULL) AND (new.status <> 'skipped'::text))) EXECUTE FUNCTION ceaseless._tg_topology_runs_loop_lock();
CREATE TRIGGER topology_runs_loop_outcome AFTER UPDATE OF status ON ceaseless.topology_runs FOR EACH ROW WHEN (((new.loop_id IS NOT NULL) AND (new.iteration IS NOT NULL) AND (old.status = ANY (ARRAY['pending'::text, 'running'::text, 'awaiting_approval'::text])) AND (new.status = ANY (ARRAY['succeeded'::text, 'failed'::text, 'cancelled'::text])))) EXECUTE FUNCTION ceaseless._tg_topology_runs_loop_outcome();
CREATE TRIGGER topology_runs_start AFTER INSERT ON ceaseless.topology_runs FOR EACH ROW WHEN ((new.status = 'pending'::text)) EXECUTE FUNCTION ceaseless._tg_topology_runs_start();
CREATE TRIGGER topology_runs_update_metrics AFTER UPDATE ON ceaseless.topology_runs REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ceaseless._tg_topology_runs_update_metrics();
CREATE TRIGGER topology_runs_validate BEFORE INSERT OR UPDATE OF graph ON ceaseless.topology_runs FOR EACH ROW EXECUTE FUNCTION ceaseless._tg_topology_runs_validate();
create policy all_rows on ceaseless.topology_runs for all to ceaseless_listener, ceaseless_operator
    using (true)
    with check (true);
create policy own_rows on ceaseless.topology_runs for all to ceaseless_user
    using ((user_id = CURRENT_USER))
    with check ((user_id = CURRENT_USER));
comment on table ceaseless.topology_runs is 'One execution of an agent topology; a loop iteration when loop_id is set (seed 003).';
comment on column ceaseless.topology_runs.user_id is 'The role that owns this run (its loop''s owner for an iteration); its node jobs are theirs.';
comment on column ceaseless.topology_runs.trigger_type is 'What started this run: cron, on_completion, webhook or manual (run_loop); NULL for a run inserted directly.';
comment on column ceaseless.topology_runs.skip_reason is 'Why a fire was refused: live_iteration (at most one live iteration per loop), disabled, agent_disabled.';
comment on column ceaseless.topology_runs.slot_at is 'The cron slot this iteration stands for: the slot a cron fire was due at, or the slot a backfill fired; NULL for other fires.';
grant select on table ceaseless.topology_runs to ceaseless_operator, ceaseless_user;
grant select, insert, update, delete on table ceaseless.topology_runs to ceaseless_listener;
grant insert (id, workspace_id, graph, task, user_id) on table ceaseless.topology_runs to ceaseless_user;

create table ceaseless.tracked_repo (
    id uuid default gen_random_uuid() not null,
    forge text not null,
    owner text not null,
    repo text not null,
    clone_url text not null,
    default_branch text not null,
    interval_seconds integer not null,
    quiet_from text,
    quiet_until text,
    enabled boolean default true not null,
    tracking_issue bigint,
    discover_cooldown_secs integer default 3600 not null,
    last_etag text,
    last_polled_at timestamp with time zone,
    created_at timestamp with time zone default now() not null,
    api_url text not null,
    discover_label text default 'ceaseless:discover'::text not null,
    plan_label text default 'ceaseless:plan'::text not null,
    implement_label text default 'ceaseless:implement'::text not null,
    allowed_authors text[] default '{}'::text[] not null,
    quiet_timezone text default 'UTC'::text not null,
    next_poll_at timestamp with time zone default now() not null,
    last_error text,
    last_error_at timestamp with time zone,
    user_id text default CURRENT_USER not null,
    tokens_allowed boolean default true not null,
    constraint labels_distinct CHECK (((discover_label <> plan_label) AND (discover_label <> implement_label) AND (plan_label <> implement_label))),
    constraint last_error_complete CHECK (((last_error IS NULL) = (last_error_at IS NULL))),
    constraint quiet_window_complete CHECK (((quiet_from IS NULL) = (quiet_until IS NULL))),
    constraint quiet_window_format CHECK (((quiet_from IS NULL) OR ((quiet_from ~ '^([01][0-9]|2[0-3]):[0-5][0-9]$'::text) AND (quiet_until ~ '^([01][0-9]|2[0-3]):[0-5][0-9]$'::text)))),
    constraint tracked_repo_discover_cooldown_secs_check CHECK ((discover_cooldown_secs >= 0)),
    constraint tracked_repo_forge_check CHECK ((forge = ANY ('{gitea,github}'::text[]))),
    constraint tracked_repo_forge_owner_repo_key UNIQUE (forge, owner, repo),
    constraint tracked_repo_interval_seconds_check CHECK ((interval_seconds > 0)),
    constraint tracked_repo_pkey PRIMARY KEY (id)
);
alter table ceaseless.tracked_repo enable row level security;
CREATE INDEX tracked_repo_due_idx ON ceaseless.tracked_repo USING btree (next_poll_at) WHERE enabled;
CREATE INDEX tracked_repo_user_idx ON ceaseless.tracked_repo USING btree (user_id, created_at DESC);
CREATE TRIGGER tracked_repo_validate BEFORE INSERT OR UPDATE ON ceaseless.tracked_repo FOR EACH ROW EXECUTE FUNCTION ceaseless._tg_tracked_repo_validate();
create policy all_rows on ceaseless.tracked_repo for all to ceaseless_listener, ceaseless_operator
    using (true)
    with check (true);
create policy own_rows on ceaseless.tracked_repo for all to ceaseless_user
    using ((user_id = CURRENT_USER))
    with check ((user_id = CURRENT_USER));
comment on table ceaseless.tracked_repo is 'Forge repositories polled for labelled issues that become discover / plan / implement jobs (seed 002).';
comment on column ceaseless.tracked_repo.api_url is 'Base URL of the forge''s REST API, without a trailing slash and without credentials: https://api.github.com (the default for forge github), https://ghe.example.com/api/v3, https://gitea.example.com/api/v1.';
comment on column ceaseless.tracked_repo.discover_label is 'The label on the tracking issue that asks for a discover job (default ceaseless:discover).';
comment on column ceaseless.tracked_repo.plan_label is 'The label on an issue that asks for a plan job (default ceaseless:plan).';
comment on column ceaseless.tracked_repo.implement_label is 'The label on an issue that asks for an implement job (default ceaseless:implement).';
comment on column ceaseless.tracked_repo.allowed_authors is 'Forge logins whose issues (opened or labelled by them) get work; empty admits nobody. A child issue created by a plan inherits its parent job''s admission.';
comment on column ceaseless.tracked_repo.quiet_timezone is 'IANA time zone of quiet_from / quiet_until (default UTC); the window follows its daylight-saving changes.';
comment on column ceaseless.tracked_repo.next_poll_at is 'When the repo is next due (due_repos); a new repo is due at once. due_repos moves it one interval on when it hands the repo out, finish_repo_poll sets it from the poll''s end.';
comment on column ceaseless.tracked_repo.last_error is 'Why the last poll failed (HTTP status, timeout, bad JSON), as the poller recorded it; cleared by the next successful poll. Never holds a token.';
comment on column ceaseless.tracked_repo.last_error_at is 'When last_error was recorded.';
comment on column ceaseless.tracked_repo.user_id is 'The role that owns this repo; RLS shows a user role only its own.';
comment on column ceaseless.tracked_repo.tokens_allowed is 'May the listener use its forge tokens (forge_token_source) for this repo? Set by an operator (always false on a row a user role wrote or retargeted); without it the repo is polled, cloned and written to anonymously.';
grant select on table ceaseless.tracked_repo to ceaseless_operator;
grant select, delete on table ceaseless.tracked_repo to ceaseless_user;
grant select, insert, update, delete on table ceaseless.tracked_repo to ceaseless_listener;
grant insert, update (forge, owner, repo, clone_url, default_branch, interval_seconds, quiet_from, quiet_until, enabled, tracking_issue, discover_cooldown_secs, api_url, discover_label, plan_label, implement_label, allowed_authors, quiet_timezone) on table ceaseless.tracked_repo to ceaseless_user;
grant insert (id, user_id) on table ceaseless.tracked_repo to ceaseless_user;
grant update (tokens_allowed) on table ceaseless.tracked_repo to ceaseless_operator;

create unlogged table ceaseless.transaction_state (
    backend_pid integer not null,
    xact xid8 not null,
    fire_mode text,
    fire_room bigint,
    loop_fire uuid,
    held_fire uuid,
    constraint transaction_state_pkey PRIMARY KEY (backend_pid)
);
comment on table ceaseless.transaction_state is 'What the engine''s functions remember within one transaction (fire admission, the loop run being fired): one row per backend, read only while xact is the backend''s current transaction. Written by the engine alone; never a setting a session could forge.';
comment on column ceaseless.transaction_state.xact is 'The transaction the row belongs to (pg_current_xact_id()); any other transaction reads no row.';
comment on column ceaseless.transaction_state.held_fire is 'The held fire fire_held is releasing in this transaction (its refusal keeps the row).';
grant select on table ceaseless.transaction_state to ceaseless_operator;
grant select, insert, update, delete on table ceaseless.transaction_state to ceaseless_listener;

create table ceaseless.users (
    id uuid default gen_random_uuid() not null,
    handle text not null,
    created_at timestamp with time zone default now() not null,
    constraint handle_not_empty CHECK ((handle <> ''::text)),
    constraint users_handle_key UNIQUE (handle),
    constraint users_pkey PRIMARY KEY (id)
);
comment on table ceaseless.users is 'People who own loops (seed 003 `created_by`). Routines keep their seed''s free-text user_id.';
grant select on table ceaseless.users to ceaseless_operator;
grant select, insert, update, delete on table ceaseless.users to ceaseless_listener;

create table ceaseless.webhook_deliveries (
    id bigint generated always as identity not null,
    target text not null,
    target_id uuid not null,
    signature text not null,
    sent_at timestamp with time zone not null,
    received_at timestamp with time zone default now() not null,
    constraint signature_seen_once UNIQUE (target, target_id, signature),
    constraint webhook_deliveries_pkey PRIMARY KEY (id),
    constraint webhook_deliveries_target_check CHECK ((target = ANY ('{routine,loop}'::text[])))
);
CREATE INDEX webhook_deliveries_received_idx ON ceaseless.webhook_deliveries USING btree (received_at);
comment on table ceaseless.webhook_deliveries is 'Replay keys of accepted webhook requests (per scheme: the signature, a Standard Webhooks webhook-id, or a GitHub delivery id and signature), kept for the timestamp window to refuse replays.';
comment on column ceaseless.webhook_deliveries.signature is 'The replay key: the ceaseless signature as received (sha256=<hex>), stripe:<v1 hex>, webhook-id:<id> (standard), or github-delivery:<id> and the sha256=<hex> signature (github).';
comment on column ceaseless.webhook_deliveries.sent_at is 'The signed timestamp of the request; for github, which signs none, the time it was received.';
grant select on table ceaseless.webhook_deliveries to ceaseless_operator;
grant select, insert, update, delete on table ceaseless.webhook_deliveries to ceaseless_listener;

create table ceaseless.workspaces (
    id uuid default gen_random_uuid() not null,
    name text not null,
    root_path text,
    created_at timestamp with time zone default now() not null,
    constraint name_not_empty CHECK ((name <> ''::text)),
    constraint root_path_absolute CHECK ((root_path ~~ '/%'::text)),
    constraint workspaces_name_key UNIQUE (name),
    constraint workspaces_pkey PRIMARY KEY (id)
);
comment on table ceaseless.workspaces is 'A place agents work in; loops belong to one (seed 003).';
grant select on table ceaseless.workspaces to ceaseless_operator;
grant select, insert, update, delete on table ceaseless.workspaces to ceaseless_listener;

-- Sequences

create sequence ceaseless.announcements_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1 owned by ceaseless.announcements.id;
grant usage on sequence ceaseless.announcements_id_seq to ceaseless_listener;

create sequence ceaseless.audit_log_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1 owned by ceaseless.audit_log.id;
grant usage on sequence ceaseless.audit_log_id_seq to ceaseless_listener;

create sequence ceaseless.held_fires_seq_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1 owned by ceaseless.held_fires.seq;
grant usage on sequence ceaseless.held_fires_seq_seq to ceaseless_listener;

create sequence ceaseless.late_results_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1 owned by ceaseless.late_results.id;
grant usage on sequence ceaseless.late_results_id_seq to ceaseless_listener;

create sequence ceaseless.metric_deltas_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1 owned by ceaseless.metric_deltas.id;
grant usage on sequence ceaseless.metric_deltas_id_seq to ceaseless_listener;

create sequence ceaseless.webhook_deliveries_id_seq as bigint start 1 increment 1 minvalue 1 maxvalue 9223372036854775807 cache 1 owned by ceaseless.webhook_deliveries.id;
grant usage on sequence ceaseless.webhook_deliveries_id_seq to ceaseless_listener;

-- Views

create view ceaseless.forge_pipeline with (security_invoker=true) as
 SELECT r.id AS repo_id,
    j.user_id AS owner_role,
    j.forge,
    j.owner,
    j.repo,
    j.number,
    COALESCE(i.title, j.payload #>> '{forge,title}'::text[]) AS title,
    j.kind,
    j.id AS job_id,
    j.state,
    j.agent,
    j.attempts,
    j.last_error,
    j.parent_job_id,
    p.number AS parent_number,
    pr.pr_number,
    pr.pr_url,
    ch.asked AS children_asked,
    ch.created AS children_created,
    j.labels_synced_label,
    j.labels_synced_at,
    j.labels_error,
    j.created_at,
    j.finished_at
   FROM ceaseless.job j
     LEFT JOIN ceaseless.tracked_repo r ON r.forge = j.forge AND r.owner = j.owner AND r.repo = j.repo
     LEFT JOIN ceaseless.forge_issue i ON i.repo_id = r.id AND i.number = j.number
     LEFT JOIN ceaseless.job p ON p.id = j.parent_job_id
     LEFT JOIN LATERAL ( SELECT ar.pr_number,
            ar.pr_url
           FROM ceaseless.agent_run ar
          WHERE ar.job_id = j.id AND ar.pr_number IS NOT NULL
          ORDER BY ar.started_at DESC
         LIMIT 1) pr ON true
     LEFT JOIN LATERAL ( SELECT count(*)::integer AS asked,
            count(c.number)::integer AS created
           FROM ceaseless.forge_child_issue c
          WHERE c.plan_job_id = j.id) ch ON j.kind = 'plan'::text
  WHERE j.forge IS NOT NULL;
comment on view ceaseless.forge_pipeline is 'One row per forge job: its repo and issue, kind, state, lane, parent, pull request, children (plans), mirrored label; newest last. Filter by owner, repo, number.';
grant select on table ceaseless.forge_pipeline to ceaseless_operator, ceaseless_user;
grant select, insert, update, delete on table ceaseless.forge_pipeline to ceaseless_listener;

create view ceaseless.governor_usage with (security_invoker=true) as
 SELECT a.name AS agent,
    a.adapter,
    a.enabled,
    a.max_concurrent,
    l.live,
    a.window_secs,
    a.window_budget,
    l.started_in_window,
    l.free AS free_slots,
    l.paused_until,
    due.n AS pending_due,
    l.pause_reason,
    a.window_cost_usd,
    l.cost_in_window,
    a.window_tokens,
    l.tokens_in_window,
    l.held_by,
    a.fairness
   FROM ceaseless._lane_capacity(now(), NULL::text[], true) l(agent, live, claimed, started_in_window, cost_in_window, tokens_in_window, paused_until, pause_reason, held_by, free)
     JOIN ceaseless.agents a ON a.name = l.agent
     CROSS JOIN LATERAL ( SELECT count(*) AS n
           FROM ceaseless.job j
          WHERE j.agent = a.name AND j.state = 'pending'::text AND j.run_after <= now()) due;
comment on view ceaseless.governor_usage is 'Per agent lane: live runs against max_concurrent, starts in the rolling window against window_budget, free slots (none while disabled, paused or over a cost or token budget), the pause in force and why, due work waiting, the cost and tokens the window''s runs reported against window_cost_usd and window_tokens, and what holds the lane (held_by, as explain_job names it), and the order its claims take due jobs in (fairness).';
grant select on table ceaseless.governor_usage to ceaseless_operator, ceaseless_user;
grant select, insert, update, delete on table ceaseless.governor_usage to ceaseless_listener;

create view ceaseless.job_queue with (security_invoker=true) as
 SELECT j.id,
    j.kind,
    j.agent,
    j.state,
    j.attempts,
    COALESCE(j.max_attempts, a.max_attempts) AS max_attempts,
    j.run_after,
    j.state = 'pending'::text AND j.run_after <= now() AS due,
    j.claimed_by,
        CASE
            WHEN j.state = ANY (ARRAY['claimed'::text, 'running'::text]) THEN j.claim_expires_at - now()
            ELSE NULL::interval
        END AS lease_remaining,
    now() - j.created_at AS age,
    j.dedup_key,
        CASE
            WHEN j.forge IS NOT NULL THEN format('%s:%s/%s#%s'::text, j.forge, j.owner, j.repo, j.number)
            ELSE NULL::text
        END AS issue,
    j.last_error,
    j.created_at,
        CASE
            WHEN j.state = ANY (ARRAY['claimed'::text, 'running'::text]) THEN j.claimed_at
            ELSE NULL::timestamp with time zone
        END AS claimed_at,
    j.priority,
    j.fairness_key
   FROM ceaseless.job j
     JOIN ceaseless.agents a ON a.name = j.agent
  WHERE j.state = 'pending'::text OR (j.state = ANY (ARRAY['claimed'::text, 'running'::text]));
comment on view ceaseless.job_queue is 'Live jobs (pending, claimed, running): who holds each and since when, how long its lease has left, whether it is due, its priority and fairness key.';
grant select on table ceaseless.job_queue to ceaseless_operator, ceaseless_user;
grant select, insert, update, delete on table ceaseless.job_queue to ceaseless_listener;

create view ceaseless.listener_status as
 WITH held AS (
         SELECT j.claimed_by AS worker,
            count(*) AS held,
            count(*) FILTER (WHERE j.state = 'running'::text) AS running,
            min(j.claim_expires_at) - now() AS next_lease_ends_in
           FROM ceaseless.job j
          WHERE j.state = ANY (ARRAY['claimed'::text, 'running'::text])
          GROUP BY j.claimed_by
        ), connected AS (
         SELECT DISTINCT substr(a.application_name, length('ceaseless listen '::text) + 1) AS worker
           FROM pg_stat_activity a
          WHERE a.datname = current_database() AND a.application_name ~~ 'ceaseless listen %'::text
        ), refused AS (
         SELECT l.worker,
            count(*) AS late
           FROM ceaseless.late_results l
          WHERE l.received_at > (now() - '24:00:00'::interval)
          GROUP BY l.worker
        ), workers AS (
         SELECT held.worker
           FROM held
        UNION
         SELECT connected.worker
           FROM connected
        UNION
         SELECT refused.worker
           FROM refused
        )
 SELECT w.worker,
    COALESCE(h.held, 0::bigint) AS held,
    COALESCE(h.running, 0::bigint) AS running,
    h.next_lease_ends_in,
    COALESCE(r.late, 0::bigint) AS late_results_24h,
    c.worker IS NOT NULL AS listening,
    rep.sandbox,
    rep.agent_user,
    rep.db_auth,
    rep.http,
    array_remove(ARRAY[rep.isolation_warning, ceaseless._db_auth_warning(rep.db_auth)], NULL::text) AS warnings
   FROM workers w
     LEFT JOIN held h ON h.worker = w.worker
     LEFT JOIN connected c ON c.worker = w.worker
     LEFT JOIN refused r ON r.worker = w.worker
     LEFT JOIN ceaseless.listener_reports rep ON rep.worker = w.worker;
comment on view ceaseless.listener_status is 'One row per listener holding work, listening, or with results refused in 24 h: jobs held and running, time until its nearest lease ends (negative: it stopped renewing), refused results, connected, and what it reported at start: its agents'' sandbox and OS user, how its database connection authenticated, its HTTP address, and warnings (agents not isolated, no database password).';
grant select on table ceaseless.listener_status to ceaseless_operator;
grant select, insert, update, delete on table ceaseless.listener_status to ceaseless_listener;

create view ceaseless.loop_status with (security_invoker=true) as
 SELECT l.id,
    l.title,
    l.user_id AS owner,
    l.enabled,
    l.triggers ->> 'cron'::text AS cron,
    l.triggers ->> 'timezone'::text AS timezone,
    COALESCE((l.triggers ->> 'on_completion'::text)::boolean, false) AS on_completion,
    l.webhook_token IS NOT NULL AS webhook,
    l.repeat_policy,
    l.policy_from_iteration,
    latest.iteration AS current_iteration,
    live.id AS live_run_id,
    live.status AS live_run_status,
    done.id AS last_run_id,
    done.status AS last_run_status,
    done.finished_at AS last_run_finished_at,
    l.next_fire_at,
    l.stopped_reason,
    l.stopped_at,
    COALESCE(skips.n, 0::bigint) AS skipped_fires,
    skips.last_reason AS last_skip_reason,
    skips.last_at AS last_skipped_at,
    l.last_error,
    l.overlap_policy,
    l.debounce_secs,
    l.debounce_max_secs,
    COALESCE(held.n, 0::bigint) AS held_fires,
    held.collapsed AS held_collapsed,
    held.next_at AS held_next_at,
    l.min_interval_secs,
    ceaseless._loop_paced_until(l.id, l.min_interval_secs, now()) AS paced_until
   FROM ceaseless.loops l
     LEFT JOIN LATERAL ( SELECT r.iteration
           FROM ceaseless.topology_runs r
          WHERE r.loop_id = l.id AND r.iteration IS NOT NULL
          ORDER BY r.iteration DESC
         LIMIT 1) latest ON true
     LEFT JOIN LATERAL ( SELECT r.id,
            r.status
           FROM ceaseless.topology_runs r
          WHERE r.loop_id = l.id AND (r.status = ANY (ARRAY['pending'::text, 'running'::text, 'awaiting_approval'::text]))) live ON true
     LEFT JOIN LATERAL ( SELECT r.id,
            r.status,
            r.finished_at
           FROM ceaseless.topology_runs r
          WHERE r.loop_id = l.id AND r.iteration IS NOT NULL AND (r.status = ANY (ARRAY['succeeded'::text, 'failed'::text, 'cancelled'::text]))
          ORDER BY r.iteration DESC
         LIMIT 1) done ON true
     LEFT JOIN LATERAL ( SELECT count(*) AS n,
            (array_agg(r.skip_reason ORDER BY r.created_at DESC))[1] AS last_reason,
            max(r.created_at) AS last_at
           FROM ceaseless.topology_runs r
          WHERE r.loop_id = l.id AND r.status = 'skipped'::text) skips ON true
     LEFT JOIN LATERAL ceaseless._held_summary(l.id) held(n, collapsed, next_at) ON true;
comment on view ceaseless.loop_status is 'One row per loop: title, owner, enabled, triggers (cron, timezone, on_completion, webhook on or off — never its credential), repeat policy, current iteration, the live run, the last finished run, next fire, why and when it stopped, skipped fires (count, last reason), the last error, its overlap policy and debounce, its held fires (how many, the fires they stand for, the earliest timed release), its min_interval_secs and until when it defers a fire.';
grant select on table ceaseless.loop_status to ceaseless_operator, ceaseless_user;
grant select, insert, update, delete on table ceaseless.loop_status to ceaseless_listener;

create view ceaseless.notification_status as
 WITH live AS (
         SELECT COALESCE(n.channel, 'default'::text) AS sink,
            n.status,
            count(*) AS notifications,
            count(*) FILTER (WHERE n.status = 'pending'::text AND n.next_attempt_at <= now()) AS due,
            count(*) FILTER (WHERE n.status = 'pending'::text AND n.attempts > 0) AS attempted,
            max(now() - n.created_at) FILTER (WHERE n.status = 'pending'::text) AS oldest_pending_age,
            min(n.next_attempt_at) FILTER (WHERE n.status = 'pending'::text) AS next_attempt_at,
            max(n.attempts) AS max_attempts_used,
            (array_agg(n.last_error ORDER BY n.created_at DESC) FILTER (WHERE n.last_error IS NOT NULL))[1] AS last_error
           FROM ceaseless.notifications n
          WHERE n.status = 'pending'::text OR n.status = 'failed'::text
          GROUP BY (COALESCE(n.channel, 'default'::text)), n.status
        ), delivered AS (
         SELECT c_1.labels ->> 'channel'::text AS sink,
            'delivered'::text AS status,
            sum(c_1.value)::bigint AS notifications,
            0::bigint AS due,
            0::bigint AS attempted,
            NULL::interval AS oldest_pending_age,
            NULL::timestamp with time zone AS next_attempt_at,
            NULL::integer AS max_attempts_used,
            NULL::text AS last_error
           FROM ( SELECT t.labels,
                    t.value
                   FROM ceaseless.metric_totals t
                  WHERE t.metric = 'ceaseless_notifications_delivered_total'::text
                UNION ALL
                 SELECT d.labels,
                    d.value
                   FROM ceaseless.metric_deltas d
                  WHERE d.metric = 'ceaseless_notifications_delivered_total'::text) c_1
          GROUP BY (c_1.labels ->> 'channel'::text)
         HAVING sum(c_1.value) > 0::double precision
        ), grouped AS (
         SELECT live.sink,
            live.status,
            live.notifications,
            live.due,
            live.attempted,
            live.oldest_pending_age,
            live.next_attempt_at,
            live.max_attempts_used,
            live.last_error
           FROM live
        UNION ALL
         SELECT delivered.sink,
            delivered.status,
            delivered.notifications,
            delivered.due,
            delivered.attempted,
            delivered.oldest_pending_age,
            delivered.next_attempt_at,
            delivered.max_attempts_used,
            delivered.last_error
           FROM delivered
        )
 SELECT g.sink,
        CASE
            WHEN jsonb_typeof(c.sinks) = 'object'::text THEN (c.sinks -> g.sink) ->> 'type'::text
            ELSE NULL::text
        END AS sink_type,
    ceaseless._notification_sink_problem(g.sink, c.sinks) AS sink_problem,
    g.status,
    g.notifications,
    g.due,
    g.attempted,
    g.oldest_pending_age,
    g.next_attempt_at,
    g.max_attempts_used,
    g.last_error
   FROM grouped g
     CROSS JOIN ( SELECT ceaseless._notification_sinks() AS sinks) c
  ORDER BY g.sink, g.status;
comment on view ceaseless.notification_status is 'Notifications per sink and status: how many (delivered: all ever delivered, by their counter), how many due, the oldest pending age, the next attempt, the newest error, and what is wrong with the sink''s configuration, if anything.';
grant select on table ceaseless.notification_status to ceaseless_operator;
grant select, insert, update, delete on table ceaseless.notification_status to ceaseless_listener;

create view ceaseless.owner_budget_usage with (security_invoker=true) as
 SELECT b.user_id,
    b.window_secs,
    b.window_cost_usd,
    s.cost AS cost_in_window,
    b.window_tokens,
    s.tokens AS tokens_in_window,
    (s.cost >= b.window_cost_usd OR s.tokens >= b.window_tokens::numeric) IS TRUE AS over_budget
   FROM ceaseless.owner_budgets b
     CROSS JOIN LATERAL ceaseless._owner_spend(b.*, now()) s(cost, tokens);
comment on view ceaseless.owner_budget_usage is 'Each owner budget against what the owner''s runs reported in its window; over_budget: its jobs wait (explain_job says owner_budget).';
grant select on table ceaseless.owner_budget_usage to ceaseless_operator, ceaseless_user;
grant select, insert, update, delete on table ceaseless.owner_budget_usage to ceaseless_listener;

create view ceaseless.relay_status as
 SELECT count(a.id) AS waiting,
    min(a.created_at) AS oldest_at,
    c.now - min(a.created_at) AS oldest_waited
   FROM ( VALUES (now())) c(now)
     LEFT JOIN ceaseless.announcements a ON true
  GROUP BY c.now;
comment on view ceaseless.relay_status is 'Relayed announcements (sessions with ceaseless.notify = ''relay'') waiting for a listener to send them: how many, the oldest one''s time, and how long it has waited.';
grant select on table ceaseless.relay_status to ceaseless_operator;
grant select, insert, update, delete on table ceaseless.relay_status to ceaseless_listener;

create view ceaseless.repo_status with (security_invoker=true) as
 SELECT r.id,
    r.user_id AS owner_role,
    r.forge,
    r.owner,
    r.repo,
    r.api_url,
    r.enabled,
    r.last_polled_at,
    r.next_poll_at,
    ceaseless._repo_quiet_at(r.*, now()) AS quiet_now,
        CASE
            WHEN r.quiet_from IS NOT NULL THEN format('%s-%s %s'::text, r.quiet_from, r.quiet_until, r.quiet_timezone)
            ELSE NULL::text
        END AS quiet_window,
    EXTRACT(epoch FROM ceaseless._repo_interval(r.*))::integer AS interval_used_secs,
    r.interval_seconds AS interval_asked_secs,
    r.last_error,
    r.last_error_at,
    COALESCE(live.n, 0) AS live_jobs,
    r.discover_label,
    r.plan_label,
    r.implement_label,
    r.allowed_authors,
    r.tracking_issue,
    r.tokens_allowed
   FROM ceaseless.tracked_repo r
     LEFT JOIN LATERAL ( SELECT count(*)::integer AS n
           FROM ceaseless.job j
          WHERE j.forge = r.forge AND j.owner = r.owner AND j.repo = r.repo AND (j.state = ANY (ARRAY['pending'::text, 'claimed'::text, 'running'::text]))) live ON true;
comment on view ceaseless.repo_status is 'One row per tracked repo: last and next poll, whether it is quiet now, the interval used (clamped to forge_min_interval_secs) and asked, the last error, its live jobs, and whether the listener''s forge tokens may serve it.';
grant select on table ceaseless.repo_status to ceaseless_operator, ceaseless_user;
grant select, insert, update, delete on table ceaseless.repo_status to ceaseless_listener;

create view ceaseless.retention_status with (security_invoker=true) as
 SELECT k.kind,
    c.now - r.cutoff AS kept_for,
    r.cutoff,
    last.at AS last_pass_at,
    COALESCE(((last.detail -> 'removed'::text) ->> k.kind)::bigint, 0::bigint) AS removed_by_last_pass
   FROM ( VALUES (now())) c(now)
     CROSS JOIN unnest(ceaseless._retention_kinds()) WITH ORDINALITY k(kind, "position")
     CROSS JOIN LATERAL ( SELECT ceaseless._retention_cutoff(k.kind, c.now) AS cutoff
         OFFSET 0) r
     LEFT JOIN LATERAL ( SELECT a.at,
            a.detail
           FROM ceaseless.audit_log a
          WHERE a.entity = 'retention'::text AND a.entity_key = 'prune'::text
          ORDER BY a.id DESC
         LIMIT 1) last ON true
  ORDER BY k."position";
comment on view ceaseless.retention_status is 'One row per kind prune removes, in its order: how long its finished rows are kept (kept_for, NULL for ever), the cutoff before which they go, and the latest pass that removed anything (last_pass_at) with this kind''s count in it. Operators and listeners.';
grant select on table ceaseless.retention_status to ceaseless_operator;
grant select, insert, update, delete on table ceaseless.retention_status to ceaseless_listener;

create view ceaseless.routine_status with (security_invoker=true) as
 SELECT r.id,
    r.name,
    r.user_id,
    r.enabled,
    r.trigger_type,
    r.trigger_config ->> 'schedule'::text AS schedule,
    r.trigger_config ->> 'timezone'::text AS timezone,
    r.next_fire_at,
    r.action_type,
    r.agent,
    last_run.status AS last_status,
    last_run.started_at AS last_started_at,
    r.last_run_at AS last_finished_at,
    r.consecutive_failures,
    COALESCE(day.runs, 0::bigint) AS runs_24h,
    COALESCE(day.skips, 0::bigint) AS skips_24h,
    COALESCE(live.running, 0::bigint) AS running,
    r.last_error,
    COALESCE(refused.n, 0::bigint) AS skips_1h,
    last_skip.skip_reason AS last_skip_reason,
    last_skip.started_at AS last_skipped_at,
    r.overlap_policy,
    r.debounce_secs,
    r.debounce_max_secs,
    COALESCE(held.n, 0::bigint) AS held_fires,
    held.collapsed AS held_collapsed,
    held.next_at AS held_next_at
   FROM ceaseless.routines r
     LEFT JOIN LATERAL ( SELECT rr.status,
            rr.started_at
           FROM ceaseless.routine_runs rr
          WHERE rr.routine_id = r.id
          ORDER BY rr.started_at DESC
         LIMIT 1) last_run ON true
     LEFT JOIN LATERAL ( SELECT count(*) FILTER (WHERE rr.status <> 'skipped'::text) AS runs,
            count(*) FILTER (WHERE rr.status = 'skipped'::text) AS skips
           FROM ceaseless.routine_runs rr
          WHERE rr.routine_id = r.id AND rr.started_at > (now() - '24:00:00'::interval)) day ON true
     LEFT JOIN LATERAL ( SELECT count(*) AS running
           FROM ceaseless.routine_runs rr
          WHERE rr.routine_id = r.id AND rr.status = 'running'::text) live ON true
     LEFT JOIN LATERAL ( SELECT count(*) AS n
           FROM ceaseless.routine_runs rr
          WHERE rr.routine_id = r.id AND rr.status = 'skipped'::text AND rr.started_at > (now() - '01:00:00'::interval)) refused ON true
     LEFT JOIN LATERAL ( SELECT rr.skip_reason,
            rr.started_at
           FROM ceaseless.routine_runs rr
          WHERE rr.routine_id = r.id AND rr.status = 'skipped'::text
          ORDER BY rr.started_at DESC
         LIMIT 1) last_skip ON true
     LEFT JOIN LATERAL ceaseless._held_summary(r.id) held(n, collapsed, next_at) ON true;
comment on view ceaseless.routine_status is 'One row per routine: trigger, schedule, next fire, last status, consecutive failures, runs and skips in the last 24 hours, runs running now, the last error, refused fires: in the last hour, the last one''s reason and time; its overlap policy and debounce, and its held fires (how many, the fires they stand for, the earliest timed release).';
grant select on table ceaseless.routine_status to ceaseless_operator, ceaseless_user;
grant select, insert, update, delete on table ceaseless.routine_status to ceaseless_listener;

create view ceaseless.schedules with (security_invoker=true) as
 SELECT 'routine'::text AS kind,
    r.id,
    r.user_id AS owner,
    r.name,
    r.enabled,
        CASE
            WHEN r.trigger_type = 'cron'::text THEN r.trigger_config ->> 'schedule'::text
            ELSE NULL::text
        END AS schedule,
        CASE
            WHEN r.trigger_type = 'cron'::text THEN r.trigger_config ->> 'timezone'::text
            ELSE NULL::text
        END AS timezone,
    r.next_fire_at,
    r.last_error
   FROM ceaseless.routines r
UNION ALL
 SELECT 'loop'::text AS kind,
    l.id,
    l.user_id AS owner,
    l.title AS name,
    l.enabled,
    l.triggers ->> 'cron'::text AS schedule,
        CASE
            WHEN l.triggers ? 'cron'::text THEN l.triggers ->> 'timezone'::text
            ELSE NULL::text
        END AS timezone,
    l.next_fire_at,
    l.last_error
   FROM ceaseless.loops l;
comment on view ceaseless.schedules is 'Every routine (kind routine) and loop (kind loop) as a schedule: owner, name or title, enabled, cron schedule and timezone (NULL when it has none), next_fire_at, last_error.';
grant select on table ceaseless.schedules to ceaseless_operator, ceaseless_user;
grant select, insert, update, delete on table ceaseless.schedules to ceaseless_listener;

create view ceaseless.stuck_jobs with (security_invoker=true) as
 SELECT q.id,
    q.kind,
    q.agent,
    q.state,
    q.attempts,
    q.max_attempts,
    q.run_after,
    q.due,
    q.claimed_by,
    q.lease_remaining,
    q.age,
    q.dedup_key,
    q.issue,
    q.last_error,
    q.created_at,
    q.claimed_at,
    q.priority,
    q.fairness_key,
        CASE
            WHEN (q.state = ANY (ARRAY['claimed'::text, 'running'::text])) AND q.lease_remaining < '00:00:00'::interval THEN 'lease expired, not yet swept: is any listener running?'::text
            WHEN q.state = 'claimed'::text AND q.claimed_at < (now() - '00:05:00'::interval) THEN 'claimed but never started'::text
            WHEN q.state = 'running'::text AND r.started_at < (now() - make_interval(secs => (a.timeout_secs + a.kill_grace_secs + 60)::double precision)) THEN 'running past its agent''s timeout'::text
            WHEN q.due AND q.run_after < (now() - '00:05:00'::interval) THEN
            CASE
                WHEN NOT a.enabled THEN 'due, but its agent is disabled'::text
                WHEN p.agent IS NOT NULL THEN format('due, but its lane is paused (%s)'::text, p.reason)
                ELSE 'due for over 5 minutes: lane full or no listener'::text
            END
            ELSE NULL::text
        END AS reason
   FROM ceaseless.job_queue q
     JOIN ceaseless.agents a ON a.name = q.agent
     LEFT JOIN ceaseless.lane_pauses p ON p.agent = q.agent AND p.paused_until > now()
     LEFT JOIN ceaseless.agent_run r ON r.job_id = q.id AND r.finished_at IS NULL
  WHERE (q.state = ANY (ARRAY['claimed'::text, 'running'::text])) AND q.lease_remaining < '00:00:00'::interval OR q.state = 'claimed'::text AND q.claimed_at < (now() - '00:05:00'::interval) OR q.state = 'running'::text AND r.started_at < (now() - make_interval(secs => (a.timeout_secs + a.kill_grace_secs + 60)::double precision)) OR q.due AND q.run_after < (now() - '00:05:00'::interval);
comment on view ceaseless.stuck_jobs is 'Live jobs that should have moved by now, each with the likely reason.';
grant select on table ceaseless.stuck_jobs to ceaseless_operator, ceaseless_user;
grant select, insert, update, delete on table ceaseless.stuck_jobs to ceaseless_listener;

create view ceaseless.topology_node_status with (security_invoker=true) as
 SELECT n.topology_run_id AS run_id,
    r.loop_id,
    r.iteration,
    n.node_id AS node,
    n.agent,
    n.gate,
    n.state,
    n.upstream_left,
    n.job_id,
    j.state AS job_state,
    j.attempts,
    n.started_at,
    n.finished_at,
    round(EXTRACT(epoch FROM COALESCE(n.finished_at, now()) - n.started_at), 3) AS seconds,
        CASE
            WHEN char_length(n.output) > 500 THEN "left"(n.output, 500) || '…'::text
            ELSE n.output
        END AS output_preview,
    n.error,
    a.id AS approval_id,
    COALESCE(a.decision,
        CASE
            WHEN a.id IS NOT NULL THEN 'pending'::text
            ELSE NULL::text
        END) AS approval_decision,
    a.decided_by,
    a.decided_at,
    a.expires_at AS approval_expires_at
   FROM ceaseless.topology_nodes n
     JOIN ceaseless.topology_runs r ON r.id = n.topology_run_id
     LEFT JOIN ceaseless.job j ON j.id = n.job_id
     LEFT JOIN ceaseless.approvals a ON a.topology_run_id = n.topology_run_id AND a.node_id = n.node_id;
comment on view ceaseless.topology_node_status is 'One row per node of every topology run the caller may see: its state and upstreams left, its job''s state and attempts, timings, an output preview, the error, and its approval.';
grant select on table ceaseless.topology_node_status to ceaseless_operator, ceaseless_user;
grant select, insert, update, delete on table ceaseless.topology_node_status to ceaseless_listener;

-- Functions

-- functions/00_helpers.sql, body md5 fa93c4cb6dea21d62fcaa355ea79eb9e
create function ceaseless._actor()
    returns text
    language sql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._actor() is 'The acting login role (session_user): the audit actor, whatever the session has SET.';
grant execute on function ceaseless._actor() to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/00_helpers.sql, body md5 f0889389b690744f6653677399b18630
create function ceaseless._acts_for(p_owner text)
    returns boolean
    language sql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._acts_for(p_owner text) is 'True when the session''s role owns p_owner''s rows or is an operator or a listener.';
grant execute on function ceaseless._acts_for(p_owner text) to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/00_helpers.sql, body md5 f0fa11c607ab7a41dbdca55d1615bb7a
create function ceaseless._acts_for_everyone()
    returns boolean
    language sql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._acts_for_everyone() is 'True when the session''s login role is an operator, a listener, or the owner of schema ceaseless (a superuser, or a managed server''s migrating role).';
grant execute on function ceaseless._acts_for_everyone() to ceaseless_listener, ceaseless_operator;

-- functions/41_fire_admission.sql, body md5 4bf773298869d8a13c46fbf2509d4274
create function ceaseless._admit_exactly()
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._admit_exactly() is 'Make a transaction admitted shared judge exactly: every fire slot, or the fire lock in exclusive mode (one such waiter at a time; 40001 for a second).';
grant execute on function ceaseless._admit_exactly() to ceaseless_listener, ceaseless_operator;

-- functions/41_fire_admission.sql, body md5 753d4e4908b892af994ea22738a9fbb8
create function ceaseless._admit_fires(p_routine_ids uuid[], OUT o_running bigint, OUT o_free bigint)
    returns record
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._admit_fires(p_routine_ids uuid[], OUT o_running bigint, OUT o_free bigint) is 'Admit a fire: shared (fire lock shared, a slot, per-routine locks) while the cap is far, else exclusive; returns the running count to judge by and the free places of the cap.';
grant execute on function ceaseless._admit_fires(p_routine_ids uuid[], OUT o_running bigint, OUT o_free bigint) to ceaseless_listener, ceaseless_operator;

-- functions/25_notify_audit.sql, body md5 8e91fab5cc98323d7ed6d3ee83e645c9
create function ceaseless._announce(p_channel text, p_payload text)
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._announce(p_channel text, p_payload text) is 'NOTIFY p_channel with p_payload on commit, or, in a session with ceaseless.notify = ''relay'', write it to announcements for a listener to send.';
grant execute on function ceaseless._announce(p_channel text, p_payload text) to ceaseless_listener, ceaseless_operator;

-- functions/52_approvals.sql, body md5 529cc2bccd97f7ca20d2e1b51f05d269
create function ceaseless._approval_expiry_text(p_on_expiry text, p_expires timestamp with time zone)
    returns text
    language sql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._approval_expiry_text(p_on_expiry text, p_expires timestamp with time zone) is 'What an undecided approval''s expiry does, by on_expiry (fail, skip, approve), as a phrase for its notification and explain_topology_run; empty when it never expires.';
grant execute on function ceaseless._approval_expiry_text(p_on_expiry text, p_expires timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/52_approvals.sql, body md5 cb947b86e1ae4465d757cf7d029d4629
create function ceaseless._approval_message(p_approval_id uuid, p_run_id uuid, p_node_id text, p_loop text, p_expires timestamp with time zone, p_on_expiry text)
    returns text
    language plpgsql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._approval_message(p_approval_id uuid, p_run_id uuid, p_node_id text, p_loop text, p_expires timestamp with time zone, p_on_expiry text) is 'The body of an approval''s notification and reminder: node, run, expiry and what it does, the decide_approval calls, and the run''s dashboard link when a listener serves HTTP.';
grant execute on function ceaseless._approval_message(p_approval_id uuid, p_run_id uuid, p_node_id text, p_loop text, p_expires timestamp with time zone, p_on_expiry text) to ceaseless_listener, ceaseless_operator;

-- functions/32_schedules.sql, body md5 9414d7bc0f96d6b88e63199308aafa9a
create function ceaseless._ask_for_next_fire(p_table text, p_id uuid, p_schedule text, p_enabled boolean, p_next_fire_at timestamp with time zone)
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._ask_for_next_fire(p_table text, p_id uuid, p_schedule text, p_enabled boolean, p_next_fire_at timestamp with time zone) is 'NOTIFY ceaseless_schedule {table, id} for an enabled row with a schedule and no next_fire_at.';
grant execute on function ceaseless._ask_for_next_fire(p_table text, p_id uuid, p_schedule text, p_enabled boolean, p_next_fire_at timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/25_notify_audit.sql, body md5 a776778bc2dd89bb97f64231e26f1f86
create function ceaseless._audit_change(p_entity text, p_id uuid, p_action text, p_old_state text, p_new_state text, p_detail jsonb DEFAULT '{}'::jsonb, p_channel text DEFAULT NULL::text, p_payload jsonb DEFAULT NULL::jsonb)
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._audit_change(p_entity text, p_id uuid, p_action text, p_old_state text, p_new_state text, p_detail jsonb, p_channel text, p_payload jsonb) is 'Write one audit_log row for a change of a row (entity, id, action, old and new state, detail) and, with p_channel, NOTIFY p_payload on it.';
grant execute on function ceaseless._audit_change(p_entity text, p_id uuid, p_action text, p_old_state text, p_new_state text, p_detail jsonb, p_channel text, p_payload jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/25_notify_audit.sql, body md5 86231c04f6a6f0e83eb88a25197b81e9
create function ceaseless._audit_enabling(p_entity text, p_op text, p_id uuid, p_was_enabled boolean, p_is_enabled boolean, p_detail jsonb DEFAULT '{}'::jsonb)
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._audit_enabling(p_entity text, p_op text, p_id uuid, p_was_enabled boolean, p_is_enabled boolean, p_detail jsonb) is 'Audit an INSERT, UPDATE or DELETE (p_op) of a routine or loop with its enabled state before and after (_audit_change).';
grant execute on function ceaseless._audit_enabling(p_entity text, p_op text, p_id uuid, p_was_enabled boolean, p_is_enabled boolean, p_detail jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/32_schedules.sql, body md5 3d06698b98e7e817c7992a742a0119eb
create function ceaseless._backfill(p_kind text, p_id uuid, p_from timestamp with time zone, p_to timestamp with time zone, p_max integer, p_now timestamp with time zone)
    returns TABLE(slot_at timestamp with time zone, outcome text, run_id uuid, status text, skip_reason text)
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._backfill(p_kind text, p_id uuid, p_from timestamp with time zone, p_to timestamp with time zone, p_max integer, p_now timestamp with time zone) is 'Fire a routine''s or loop''s cron slots in [p_from, p_to) that have not fired (the first p_max, trigger backfill, slot_at the slot), for its owner; one row per slot: fired, refused, already_fired or over_max. Audited. CE404 unknown or someone else''s; CE422 bad bounds.';
grant execute on function ceaseless._backfill(p_kind text, p_id uuid, p_from timestamp with time zone, p_to timestamp with time zone, p_max integer, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/00_helpers.sql, body md5 bf327de153666fc12b0774bc7795567b
create function ceaseless._blank_characters()
    returns text
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._blank_characters() is 'The whitespace _is_blank and _trim_blank skip, as regular expression bracket contents.';
grant execute on function ceaseless._blank_characters() to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/10_jobs.sql, body md5 6c6afb0a01842a2394801079c15f15c9
create function ceaseless._blocked_job_problem(p_verb text, p_job ceaseless.job)
    returns text
    language plpgsql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._blocked_job_problem(p_verb text, p_job ceaseless.job) is 'Why a job cannot be resumed by a reply or a raised ceiling (not blocked, its ceiling spent), or NULL.';
grant execute on function ceaseless._blocked_job_problem(p_verb text, p_job ceaseless.job) to ceaseless_listener, ceaseless_operator;

-- functions/33_held_fires.sql, body md5 27c8369defeb1b1daf57e14d0693f836
create function ceaseless._cancel_overlapping_runs(p_routine_ids uuid[], p_now timestamp with time zone)
    returns uuid[]
    language plpgsql
    volatile
    set plan_cache_mode = force_generic_plan
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._cancel_overlapping_runs(p_routine_ids uuid[], p_now timestamp with time zone) is 'For cancel_other routines at their max_concurrent: cancel the oldest running runs'' jobs (SKIP LOCKED, _end_jobs) to make room for a new fire; returns the routines it cancelled for.';
grant execute on function ceaseless._cancel_overlapping_runs(p_routine_ids uuid[], p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/51_topology_runs.sql, body md5 770c2564f343501cd8f53fa508d37e9a
create function ceaseless._cancel_topology_jobs(p_run_ids uuid[], p_reason text, p_now timestamp with time zone)
    returns integer
    language sql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._cancel_topology_jobs(p_run_ids uuid[], p_reason text, p_now timestamp with time zone) is 'Cancel the live jobs of these runs (their open agent runs too), skipping any another statement holds; returns how many. The orphan sweep catches the skipped ones.';
grant execute on function ceaseless._cancel_topology_jobs(p_run_ids uuid[], p_reason text, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/10_jobs.sql, body md5 c9733d4134fce6779e86887ccb1e6718
create function ceaseless._check_claim(p_function text, p_worker text, p_limit integer)
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._check_claim(p_function text, p_worker text, p_limit integer) is 'Raise CE422 (naming p_function) unless a claim names its listener and asks for at least one row.';
grant execute on function ceaseless._check_claim(p_function text, p_worker text, p_limit integer) to ceaseless_listener, ceaseless_operator;

-- functions/31_trigger_validation.sql, body md5 72cf270c9e1aa00bc9ad889128a4c7f2
create function ceaseless._check_flow_controls(p_table text, p_policy text, p_secs integer, p_max_secs integer)
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._check_flow_controls(p_table text, p_policy text, p_secs integer, p_max_secs integer) is 'Refuse (CE422) an unknown overlap_policy (no allow_all for loops), a debounce_secs under 1, or a debounce_max_secs without debounce_secs or shorter than it.';
grant execute on function ceaseless._check_flow_controls(p_table text, p_policy text, p_secs integer, p_max_secs integer) to ceaseless_listener, ceaseless_operator;

-- functions/50_topology_graph.sql, body md5 240cb8dedc12e2a154736d107e79c55b
create function ceaseless._check_graph_size(p_where text, p_part text, p_items jsonb)
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._check_graph_size(p_where text, p_part text, p_items jsonb) is 'Raise CE422 naming p_where.p_part when the array p_items is longer than the graph_<p_part> cap (nodes or edges).';
grant execute on function ceaseless._check_graph_size(p_where text, p_part text, p_items jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/00_helpers.sql, body md5 e7fbf437cf192d93a8feb19f017121f2
create function ceaseless._check_not_blank(p_where text, p_value text)
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._check_not_blank(p_where text, p_value text) is 'Raise CE422 naming p_where when p_value is NULL, empty or only Unicode whitespace.';
grant execute on function ceaseless._check_not_blank(p_where text, p_value text) to ceaseless_listener, ceaseless_operator;

-- functions/31_trigger_validation.sql, body md5 d006da6009d493295c2ab9988e645839
create function ceaseless._check_pattern(p_field text, p_pattern jsonb)
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._check_pattern(p_field text, p_pattern jsonb) is 'Refuse (CE422) a regular expression that is blank, too long, uses back-references or does not compile: the rule for patterns run against untrusted text.';
grant execute on function ceaseless._check_pattern(p_field text, p_pattern jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/00_helpers.sql, body md5 d4ba94b5611d7f01ccc98fd8878805b1
create function ceaseless._check_positive_int(p_where text, p_value jsonb, p_rule text DEFAULT 'must be a positive integer'::text, p_required boolean DEFAULT false)
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._check_positive_int(p_where text, p_value jsonb, p_rule text, p_required boolean) is 'Raise CE422 naming p_where and p_rule unless p_value is a positive JSON integer (or absent or null, unless p_required).';
grant execute on function ceaseless._check_positive_int(p_where text, p_value jsonb, p_rule text, p_required boolean) to ceaseless_listener, ceaseless_operator;

-- functions/00_helpers.sql, body md5 50e34b58a1ed7873e7ef2b3b90d5be0a
create function ceaseless._check_text(p_where text, p_value jsonb, p_rule text)
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._check_text(p_where text, p_value jsonb, p_rule text) is 'Raise CE422 naming p_where and the rule p_rule unless p_value is a JSON string that is not blank.';
grant execute on function ceaseless._check_text(p_where text, p_value jsonb, p_rule text) to ceaseless_listener, ceaseless_operator;

-- functions/73_forge_children.sql, body md5 a311a36bf21c9dcc2b0563a4fa027e9a
create function ceaseless._child_marker(p_parent_number bigint, p_key text)
    returns text
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._child_marker(p_parent_number bigint, p_key text) is 'The HTML comment appended to a child issue''s body, searched for before creating it again.';
grant execute on function ceaseless._child_marker(p_parent_number bigint, p_key text) to ceaseless_listener, ceaseless_operator;

-- functions/70_tracked_repo.sql, body md5 225f1b8abf5c9da907197220384e7e9f
create function ceaseless._clone_url_error(p_url text)
    returns text
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._clone_url_error(p_url text) is 'NULL when p_url is a clone address without a stored secret (URL, scp-style address or absolute local path), else why not; never raises.';
grant execute on function ceaseless._clone_url_error(p_url text) to ceaseless_listener, ceaseless_operator;

-- functions/44_routine_outcomes.sql, body md5 c5bece4aee3a528258262c6eaabe4f54
create function ceaseless._close_routine_runs(p_run_ids uuid[])
    returns void
    language plpgsql
    volatile
    set plan_cache_mode = force_generic_plan
    set enable_seqscan = on
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._close_routine_runs(p_run_ids uuid[]) is 'Close the running routine runs among these whose jobs have finished (ok / attention / failed), update each routine''s counters and state once, and queue notifications.';
grant execute on function ceaseless._close_routine_runs(p_run_ids uuid[]) to ceaseless_listener, ceaseless_operator;

-- functions/41_fire_admission.sql, body md5 1bd4844349bc82ca8dc447bb65316ace
create function ceaseless._count_running(p_delta integer)
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._count_running(p_delta integer) is 'Move the running routine_runs count by p_delta in a shard no other transaction holds.';
grant execute on function ceaseless._count_running(p_delta integer) to ceaseless_listener, ceaseless_operator;

-- functions/30_cron.sql, body md5 b3782eb33c46dcba0a04a0c729d68a57
create function ceaseless._cron_day_matches(p_day date, p_months integer[], p_days integer[], p_last_day boolean, p_nearest_weekday integer, p_weekdays integer[], p_nth_weekdays integer[], p_last_weekdays integer[])
    returns boolean
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._cron_day_matches(p_day date, p_months integer[], p_days integer[], p_last_day boolean, p_nearest_weekday integer, p_weekdays integer[], p_nth_weekdays integer[], p_last_weekdays integer[]) is 'Whether a local day matches a reading''s month and day fields (both day fields restricted: either matches), with L, W, nth and last weekdays.';
grant execute on function ceaseless._cron_day_matches(p_day date, p_months integer[], p_days integer[], p_last_day boolean, p_nearest_weekday integer, p_weekdays integer[], p_nth_weekdays integer[], p_last_weekdays integer[]) to ceaseless_listener, ceaseless_operator;

-- functions/30_cron.sql, body md5 a224d5565a5114c9ef81aafe88005538
create function ceaseless._cron_days_error(p_day_of_month text, p_month text, p_day_of_week text, p_days integer[], p_months integer[], p_weekdays integer[])
    returns text
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._cron_days_error(p_day_of_month text, p_month text, p_day_of_week text, p_days integer[], p_months integer[], p_weekdays integer[]) is 'Why valid day-of-month, month and day-of-week fields cannot be used together (nth weekday or W next to a restricted other day field, a day field naming every day next to a restricted other, a day its months never have), or NULL.';
grant execute on function ceaseless._cron_days_error(p_day_of_month text, p_month text, p_day_of_week text, p_days integer[], p_months integer[], p_weekdays integer[]) to ceaseless_listener, ceaseless_operator;

-- functions/30_cron.sql, body md5 d4a06e47b570aec356b9b28a88489c0a
create function ceaseless._cron_error(p_expression text)
    returns text
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._cron_error(p_expression text) is 'NULL when p_expression is a schedule of the accepted language (5 fields, 6 with seconds sixth, or a macro; a plain subset of croniter''s), else why not, naming the field, the value and the rule; never raises.';
grant execute on function ceaseless._cron_error(p_expression text) to ceaseless_listener, ceaseless_operator;

-- functions/30_cron.sql, body md5 6fc1111056eb14d6e94c6c1bcafee46a
create function ceaseless._cron_field(p_field text, p_position integer, OUT error text, OUT field_values integer[])
    returns record
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._cron_field(p_field text, p_position integer, OUT error text, OUT field_values integer[]) is 'One cron field (0 minute .. 4 day-of-week, 5 second): why it is refused (error), else the values it names (field_values; NULL for every value).';
grant execute on function ceaseless._cron_field(p_field text, p_position integer, OUT error text, OUT field_values integer[]) to ceaseless_listener, ceaseless_operator;

-- functions/30_cron.sql, body md5 74d4bcc9fb3817d077ce40fc54855225
create function ceaseless._cron_number(p_digits text)
    returns integer
    language sql
    immutable
    strict
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._cron_number(p_digits text) is 'A run of ASCII digits as an integer, capped at 1e9 so huge cron numbers compare as too big.';
grant execute on function ceaseless._cron_number(p_digits text) to ceaseless_listener, ceaseless_operator;

-- functions/30_cron.sql, body md5 c25517b3f494457ad1913dbb33b18319
create function ceaseless._cron_reading(p_schedule text, OUT seconds integer[], OUT minutes integer[], OUT hours integer[], OUT days integer[], OUT last_day boolean, OUT nearest_weekday integer, OUT months integer[], OUT weekdays integer[], OUT nth_weekdays integer[], OUT last_weekdays integer[])
    returns record
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._cron_reading(p_schedule text, OUT seconds integer[], OUT minutes integer[], OUT hours integer[], OUT days integer[], OUT last_day boolean, OUT nearest_weekday integer, OUT months integer[], OUT weekdays integer[], OUT nth_weekdays integer[], OUT last_weekdays integer[]) is 'An accepted schedule as the gate reads it: the sorted values of each field (NULL: every value), L, W, nth and last weekdays; NULL fields for a refused schedule. What _cron_slots enumerates.';
grant execute on function ceaseless._cron_reading(p_schedule text, OUT seconds integer[], OUT minutes integer[], OUT hours integer[], OUT days integer[], OUT last_day boolean, OUT nearest_weekday integer, OUT months integer[], OUT weekdays integer[], OUT nth_weekdays integer[], OUT last_weekdays integer[]) to ceaseless_listener, ceaseless_operator;

-- functions/30_cron.sql, body md5 de1a6c7575874d1eb2b42077fa038adc
create function ceaseless._cron_slots(p_schedule text, p_timezone text, p_from timestamp with time zone, p_to timestamp with time zone, p_limit integer DEFAULT NULL::integer)
    returns SETOF timestamp with time zone
    language plpgsql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._cron_slots(p_schedule text, p_timezone text, p_from timestamp with time zone, p_to timestamp with time zone, p_limit integer) is 'The slots of an accepted schedule in [p_from, p_to) on p_timezone''s wall clock (unordered), at most p_limit: from the gate''s reading (_cron_reading), DST as the listener has it (a slot in a gap is none, a repeated one fires at its first occurrence).';
grant execute on function ceaseless._cron_slots(p_schedule text, p_timezone text, p_from timestamp with time zone, p_to timestamp with time zone, p_limit integer) to ceaseless_listener, ceaseless_operator;

-- functions/30_cron.sql, body md5 beda0fc120dfdc9e5bb893682b36ce52
create function ceaseless._cron_sorted(p_values integer[])
    returns integer[]
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._cron_sorted(p_values integer[]) is 'The distinct values of an array in order; NULL stays NULL.';
grant execute on function ceaseless._cron_sorted(p_values integer[]) to ceaseless_listener, ceaseless_operator;

-- functions/30_cron.sql, body md5 87e40c84ac4b354778fdb81c18a2180a
create function ceaseless._cron_token(p_value integer, p_position integer, p_like text)
    returns text
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._cron_token(p_value integer, p_position integer, p_like text) is 'A cron value written the way p_like is (a number, or a month or day name in its case).';
grant execute on function ceaseless._cron_token(p_value integer, p_position integer, p_like text) to ceaseless_listener, ceaseless_operator;

-- functions/30_cron.sql, body md5 3a240a77bdea54ba5795b9d78fb41fc0
create function ceaseless._cron_value(p_token text, p_position integer)
    returns integer
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._cron_value(p_token text, p_position integer) is 'The number a cron token means in field p_position (digits, JAN-DEC, SUN-SAT), else NULL.';
grant execute on function ceaseless._cron_value(p_token text, p_position integer) to ceaseless_listener, ceaseless_operator;

-- functions/90_views.sql, body md5 49f85318571fa5ab8e3fa1fe5831da4c
create function ceaseless._db_auth_warning(p_db_auth text)
    returns text
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._db_auth_warning(p_db_auth text) is 'The warning a listener''s database authentication (listener_reports.db_auth) calls for: trust, or no password on a server that cannot say why; NULL otherwise.';
grant execute on function ceaseless._db_auth_warning(p_db_auth text) to ceaseless_listener, ceaseless_operator;

-- functions/33_held_fires.sql, body md5 03440c556dd9885d11404997748b31ae
create function ceaseless._debounce_fire(p_kind text, p_target uuid, p_user_id text, p_policy text, p_secs integer, p_max_secs integer, p_trigger text, p_detail text, p_context text, p_now timestamp with time zone)
    returns uuid
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._debounce_fire(p_kind text, p_target uuid, p_user_id text, p_policy text, p_secs integer, p_max_secs integer, p_trigger text, p_detail text, p_context text, p_now timestamp with time zone) is 'Collapse an event or webhook fire into its target''s debounce window (or open one): last detail and context, collapsed + 1, fire_at = least(last + debounce_secs, first + debounce_max_secs). Returns the held_fires id.';
grant execute on function ceaseless._debounce_fire(p_kind text, p_target uuid, p_user_id text, p_policy text, p_secs integer, p_max_secs integer, p_trigger text, p_detail text, p_context text, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/13_default_agent.sql, body md5 7d73b45540995dc4dc3b75d863fc71a6
create function ceaseless._default_agent(p_where text)
    returns text
    language plpgsql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._default_agent(p_where text) is 'The name in settings.default_agent for a row at p_where that names no agent; CE422 naming p_where when no default is set or it names no registered agent.';
grant execute on function ceaseless._default_agent(p_where text) to ceaseless_listener, ceaseless_operator;

-- functions/50_topology_graph.sql, body md5 0990f80aa8ceb73812697545dec562e9
create function ceaseless._default_workspace()
    returns uuid
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._default_workspace() is 'The id of the workspace named default, created on first use: where a loop or topology run that names no workspace lands.';
grant execute on function ceaseless._default_workspace() to ceaseless_listener, ceaseless_operator;

-- functions/25_notify_audit.sql, body md5 b067a4d4d0c99e10849fdd66526ca7f8
create function ceaseless._delete_audit_rows(p_before timestamp with time zone, p_limit integer)
    returns integer
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._delete_audit_rows(p_before timestamp with time zone, p_limit integer) is 'Delete up to p_limit audit_log rows older than p_before (oldest first), which must be at least audit_log_min_retention_secs ago; returns how many. Unaudited: its callers audit.';

-- functions/60_notifications.sql, body md5 389ddcddea350a728346d21cae83ab0f
create function ceaseless._delivery_results(p_results jsonb)
    returns TABLE(id uuid, ok boolean, error text, attempt integer)
    language plpgsql
    immutable
    rows 10
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._delivery_results(p_results jsonb) is 'finish_notifications'' p_results as rows (id, ok, error, attempt), one per id (a success first), planned as ten.';
grant execute on function ceaseless._delivery_results(p_results jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/14_agent_egress.sql, body md5 c2361e46c0228966e0052f086f44bb2b
create function ceaseless._egress_entry_error(p_entry text)
    returns text
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._egress_entry_error(p_entry text) is 'NULL when p_entry is an agents.egress entry (host[:port], *.domain[:port], an IPv4 address or a bracketed IPv6 address), else why not; never raises.';
grant execute on function ceaseless._egress_entry_error(p_entry text) to ceaseless_listener, ceaseless_operator;

-- functions/10_jobs.sql, body md5 169af263e26a1f3d2ec9fdad1ab17f8e
create function ceaseless._end_jobs(p_job_ids uuid[], p_ended_by text, p_reason text, p_now timestamp with time zone)
    returns integer
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._end_jobs(p_job_ids uuid[], p_ended_by text, p_reason text, p_now timestamp with time zone) is 'End the current attempt of these live jobs with a reason, their open runs finished as cancelled: ended_by cancel cancels the job, release returns it to pending with its attempt refunded. Returns how many it ended.';
grant execute on function ceaseless._end_jobs(p_job_ids uuid[], p_ended_by text, p_reason text, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/51_topology_runs.sql, body md5 3e863bd806db5694dc146c9eff301a64
create function ceaseless._end_topology_run(p_run_id uuid, p_status text, p_error text, p_now timestamp with time zone)
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._end_topology_run(p_run_id uuid, p_status text, p_error text, p_now timestamp with time zone) is 'End a live run as failed or cancelled: its unfinished nodes cancelled, its live jobs cancelled (SKIP LOCKED), its open approvals left undecided. Caller holds the run row.';
grant execute on function ceaseless._end_topology_run(p_run_id uuid, p_status text, p_error text, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/71_forge_issues.sql, body md5 78ac50b47ea6821dc59f5303998ffb29
create function ceaseless._enqueue_forge_job(p_repo ceaseless.tracked_repo, p_number bigint, p_kind text, p_lane text, p_title text, p_html_url text, p_parent_job_id uuid, p_user_id text, p_now timestamp with time zone)
    returns uuid
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._enqueue_forge_job(p_repo ceaseless.tracked_repo, p_number bigint, p_kind text, p_lane text, p_title text, p_html_url text, p_parent_job_id uuid, p_user_id text, p_now timestamp with time zone) is 'Insert the forge job of a kind for an issue of the repo (prompt and payload of its kind, the lane, owner and parent given), unless a live job holds the issue; its id, or NULL.';
grant execute on function ceaseless._enqueue_forge_job(p_repo ceaseless.tracked_repo, p_number bigint, p_kind text, p_lane text, p_title text, p_html_url text, p_parent_job_id uuid, p_user_id text, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/51_topology_runs.sql, body md5 7443ecc43eaeb03e08d5ddd9985b6ad1
create function ceaseless._enqueue_topology_node(p_run_id uuid, p_node_id text)
    returns uuid
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._enqueue_topology_node(p_run_id uuid, p_node_id text) is 'Insert the loop_node job of a run''s node (prompt from _topology_node_prompt, owned by the run''s owner) and mark the node queued, or fail it when its agent is disabled; the caller holds the run row.';
grant execute on function ceaseless._enqueue_topology_node(p_run_id uuid, p_node_id text) to ceaseless_listener, ceaseless_operator;

-- functions/35_webhook_schemes.sql, body md5 af47c7dd887754f3475c8b7f3c1eabad
create function ceaseless._equal_constant_time(p_a bytea, p_b bytea)
    returns boolean
    language plpgsql
    immutable
    strict
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._equal_constant_time(p_a bytea, p_b bytea) is 'True when two byte strings are equal, examining every byte whatever the first difference.';
grant execute on function ceaseless._equal_constant_time(p_a bytea, p_b bytea) to ceaseless_listener, ceaseless_operator;

-- functions/43_routine_events.sql, body md5 88f98540b99c5be9ef072e28a58ab47b
create function ceaseless._event_candidates(p_user_id text, p_content text)
    returns SETOF uuid
    language plpgsql
    stable
    set plan_cache_mode = force_generic_plan
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._event_candidates(p_user_id text, p_content text) is 'The enabled event routines of a user whose literal occurs in the content, found by reading them all or by probing routines_event_key_idx, whichever is cheaper for this event.';
grant execute on function ceaseless._event_candidates(p_user_id text, p_content text) to ceaseless_listener, ceaseless_operator;

-- functions/92_explain.sql, body md5 54d66ed3f10d7d0acc09d15fb61c8567
create function ceaseless._explain_held(p_target uuid, p_policy text)
    returns TABLE(reason text, detail text, clears_at timestamp with time zone)
    language sql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._explain_held(p_target uuid, p_policy text) is 'A routine''s or loop''s held fires for explain: buffered (count, policy, blocker, when tried) and debounced (fires collapsed, when it starts), one row each.';
grant execute on function ceaseless._explain_held(p_target uuid, p_policy text) to ceaseless_listener, ceaseless_operator;

-- functions/92_explain.sql, body md5 d03c9fcc0e3ff2bbc926a571b34ea7fc
create function ceaseless._explain_lane(p_agent text, p_now timestamp with time zone)
    returns TABLE(reason text, detail text, clears_at timestamp with time zone, free bigint)
    language plpgsql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._explain_lane(p_agent text, p_now timestamp with time zone) is 'What holds the next claim of a lane, each reason _lane_capacity names (agent_disabled, lane_paused, lane_full, window_budget, cost_budget, token_budget) with its counts and when it clears; one row with a NULL reason and the free slots when nothing does.';
grant execute on function ceaseless._explain_lane(p_agent text, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/92_explain.sql, body md5 a79100dc6931551f369777929e2dad9c
create function ceaseless._explain_schedule(p_kind text, p_id uuid, p_now timestamp with time zone)
    returns TABLE(reason text, detail text, clears_at timestamp with time zone)
    language sql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._explain_schedule(p_kind text, p_id uuid, p_now timestamp with time zone) is 'What holds the next cron fire of a routine or loop (p_kind): not_scheduled (no slot computed yet) or not_due (clears at the slot); nothing when its slot has come or it has no schedule.';
grant execute on function ceaseless._explain_schedule(p_kind text, p_id uuid, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/51_topology_runs.sql, body md5 35adac426d736a9eb505105fcc03e593
create function ceaseless._fail_topology_node(p_run_id uuid, p_node_id text, p_error text, p_now timestamp with time zone)
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._fail_topology_node(p_run_id uuid, p_node_id text, p_error text, p_now timestamp with time zone) is 'Mark a node failed and fail its run (error naming the node), cancelling the rest. Caller holds the run row.';
grant execute on function ceaseless._fail_topology_node(p_run_id uuid, p_node_id text, p_error text, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/32_schedules.sql, body md5 e90e2a914ba5ce7d85d81afd0f65fac1
create function ceaseless._fire_by_hand(p_kind text, p_id uuid, p_now timestamp with time zone)
    returns uuid
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._fire_by_hand(p_kind text, p_id uuid, p_now timestamp with time zone) is 'Fire a routine or loop by hand for its owner (or an operator, a listener); its run''s id. CE404 when unknown or someone else''s.';
grant execute on function ceaseless._fire_by_hand(p_kind text, p_id uuid, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/56_loop_firing.sql, body md5 13b87ba784b75849001306baf993c07c
create function ceaseless._fire_loop(p_loop_id uuid, p_trigger text, p_detail text, p_body text, p_now timestamp with time zone, p_slot timestamp with time zone DEFAULT NULL::timestamp with time zone)
    returns uuid
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._fire_loop(p_loop_id uuid, p_trigger text, p_detail text, p_body text, p_now timestamp with time zone, p_slot timestamp with time zone) is 'The one firing path of loops: lock the loop, hold the fire (debounce, buffer policies, min_interval_secs; returns the held_fires id), cancel a live iteration (cancel_other), record a skipped run (disabled, agent_disabled, live_iteration) or insert the next pending iteration chained to the last, with the webhook body and the prior iteration''s final message in its task; returns the run id.';
grant execute on function ceaseless._fire_loop(p_loop_id uuid, p_trigger text, p_detail text, p_body text, p_now timestamp with time zone, p_slot timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/42_routine_firing.sql, body md5 bca5a9af4cc2f0fd738316212bddc6e2
create function ceaseless._fire_routines(p_routine_ids uuid[], p_trigger text, p_now timestamp with time zone, p_details text[] DEFAULT NULL::text[], p_contexts text[] DEFAULT NULL::text[], p_missed integer[] DEFAULT NULL::integer[], p_manual boolean DEFAULT false, p_job_ids uuid[] DEFAULT NULL::uuid[], p_slots timestamp with time zone[] DEFAULT NULL::timestamp with time zone[])
    returns TABLE(ord bigint, routine_id uuid, run_id uuid, job_id uuid, status text, skip_reason text)
    language plpgsql
    volatile
    set plan_cache_mode = force_generic_plan
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._fire_routines(p_routine_ids uuid[], p_trigger text, p_now timestamp with time zone, p_details text[], p_contexts text[], p_missed integer[], p_manual boolean, p_job_ids uuid[], p_slots timestamp with time zone[]) is 'The one firing path: judge each routine against its guardrails (disabled, agent disabled, cooldown, max_concurrent, dedup, global cap), write a running or skipped routine_runs row per routine and a job per running run.';
grant execute on function ceaseless._fire_routines(p_routine_ids uuid[], p_trigger text, p_now timestamp with time zone, p_details text[], p_contexts text[], p_missed integer[], p_manual boolean, p_job_ids uuid[], p_slots timestamp with time zone[]) to ceaseless_listener, ceaseless_operator;

-- functions/32_schedules.sql, body md5 37e5695dccda1ee3e30b23f15bab8664
create function ceaseless._fire_schedules(p_kind text, p_ids uuid[], p_trigger text, p_now timestamp with time zone, p_details text[] DEFAULT NULL::text[], p_contexts text[] DEFAULT NULL::text[], p_missed integer[] DEFAULT NULL::integer[], p_manual boolean DEFAULT false, p_slots timestamp with time zone[] DEFAULT NULL::timestamp with time zone[])
    returns TABLE(ord bigint, id uuid, run_id uuid, status text, skip_reason text)
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._fire_schedules(p_kind text, p_ids uuid[], p_trigger text, p_now timestamp with time zone, p_details text[], p_contexts text[], p_missed integer[], p_manual boolean, p_slots timestamp with time zone[]) is 'Fire routines (_fire_routines) or loops (_fire_loop): the end of every cron, webhook and manual fire; one row per row fired with its run, status and skip reason.';
grant execute on function ceaseless._fire_schedules(p_kind text, p_ids uuid[], p_trigger text, p_now timestamp with time zone, p_details text[], p_contexts text[], p_missed integer[], p_manual boolean, p_slots timestamp with time zone[]) to ceaseless_listener, ceaseless_operator;

-- functions/33_held_fires.sql, body md5 f6cb173e3d9ee96a84ac343048ef4a37
create function ceaseless._fold_into_newest(p_target uuid, p_trigger text, p_detail text, p_context text)
    returns uuid
    language sql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._fold_into_newest(p_target uuid, p_trigger text, p_detail text, p_context text) is 'Fold a fire into its target''s newest buffered fire (SKIP LOCKED): its trigger, detail and context, collapsed + 1. Returns the held_fires id, NULL when none.';
grant execute on function ceaseless._fold_into_newest(p_target uuid, p_trigger text, p_detail text, p_context text) to ceaseless_listener, ceaseless_operator;

-- functions/72_forge_verdict.sql, body md5 c657459ed0a4621683d0be64729f176c
create function ceaseless._forge_block(p_message text, OUT block jsonb, OUT problem text)
    returns record
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._forge_block(p_message text, OUT block jsonb, OUT problem text) is 'The last ```ceaseless fenced JSON object of an agent''s final message (block), or why it is not one (problem); both NULL when there is none.';
grant execute on function ceaseless._forge_block(p_message text, OUT block jsonb, OUT problem text) to ceaseless_listener, ceaseless_operator;

-- functions/71_forge_issues.sql, body md5 1b2365af57b5bec992f9a6d85b78e21a
create function ceaseless._forge_decide(p_repo ceaseless.tracked_repo, p_numbers bigint[], p_now timestamp with time zone)
    returns TABLE(number bigint, kind text, label text, decision text, job_id uuid)
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._forge_decide(p_repo ceaseless.tracked_repo, p_numbers bigint[], p_now timestamp with time zone) is 'Decide the cached issues of a locked repo (all, or those in p_numbers) and create the jobs due: created, live, done, cooldown, not_admitted, needs_labeller, no_lane; with the kind and the repo''s label that asks for it.';
grant execute on function ceaseless._forge_decide(p_repo ceaseless.tracked_repo, p_numbers bigint[], p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/71_forge_issues.sql, body md5 02d75c61579d489b675e7713b1702fa9
create function ceaseless._forge_job_payload(p_job_id uuid, p_repo ceaseless.tracked_repo, p_title text, p_html_url text)
    returns jsonb
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._forge_job_payload(p_job_id uuid, p_repo ceaseless.tracked_repo, p_title text, p_html_url text) is 'job.payload of a forge job: {"forge": {repo_id, api_url, clone_url, default_branch, branch: ceaseless/<job id>, title, html_url}}.';
grant execute on function ceaseless._forge_job_payload(p_job_id uuid, p_repo ceaseless.tracked_repo, p_title text, p_html_url text) to ceaseless_listener, ceaseless_operator;

-- functions/71_forge_issues.sql, body md5 1a9cc4d57327a03c3a43d1a3d5d0eea3
create function ceaseless._forge_job_prompt(p_kind text, p_repo ceaseless.tracked_repo, p_number bigint)
    returns text
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._forge_job_prompt(p_kind text, p_repo ceaseless.tracked_repo, p_number bigint) is 'What a forge job of this kind asks of its agent; the listener adds the issue, the branch and the blocks the agent may print.';
grant execute on function ceaseless._forge_job_prompt(p_kind text, p_repo ceaseless.tracked_repo, p_number bigint) to ceaseless_listener, ceaseless_operator;

-- functions/71_forge_issues.sql, body md5 d4a7a94e6f347a957060336cefba9dbd
create function ceaseless._forge_kind_label(p_repo ceaseless.tracked_repo, p_kind text)
    returns text
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._forge_kind_label(p_repo ceaseless.tracked_repo, p_kind text) is 'The repo''s label that asks for a job of this kind.';
grant execute on function ceaseless._forge_kind_label(p_repo ceaseless.tracked_repo, p_kind text) to ceaseless_listener, ceaseless_operator;

-- functions/71_forge_issues.sql, body md5 36d4106e0152111be2be7e42cbe88568
create function ceaseless._forge_lane(p_kind text, p_has_parent boolean)
    returns text
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._forge_lane(p_kind text, p_has_parent boolean) is 'The agents row a forge job runs on: discover and plan → claude_code; implement → opencode when it has a parent job (a plan''s child), claude_code otherwise.';
grant execute on function ceaseless._forge_lane(p_kind text, p_has_parent boolean) to ceaseless_listener, ceaseless_operator;

-- functions/71_forge_issues.sql, body md5 aa84f6cb8b2f0f2ec17db57515c8b016
create function ceaseless._forge_listed_issue(p_item jsonb, p_position integer)
    returns ceaseless.forge_issue
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._forge_listed_issue(p_item jsonb, p_position integer) is 'One item of a listing as a forge_issue (title and labels cut to their bounds), or CE422 naming the item, the field and the rule.';
grant execute on function ceaseless._forge_listed_issue(p_item jsonb, p_position integer) to ceaseless_listener, ceaseless_operator;

-- functions/70_tracked_repo.sql, body md5 dd614521c1b5fc3cf5ac8bd728713d7d
create function ceaseless._forge_lock_repo(p_repo_id uuid)
    returns ceaseless.tracked_repo
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._forge_lock_repo(p_repo_id uuid) is 'The tracked repo with this id, locked FOR NO KEY UPDATE (ingests and poll ends of one repo queue); CE404 when there is none.';
grant execute on function ceaseless._forge_lock_repo(p_repo_id uuid) to ceaseless_listener, ceaseless_operator;

-- functions/74_forge_labels.sql, body md5 5580fc0f148172018045c21b20efb5ad
create function ceaseless._forge_state_label(p_state text)
    returns text
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._forge_state_label(p_state text) is 'The label mirroring a job state: ceaseless:pending | running (claimed, running) | delivered | blocked | failed (failed, abandoned, cancelled).';
grant execute on function ceaseless._forge_state_label(p_state text) to ceaseless_listener, ceaseless_operator;

-- functions/03_settings.sql, body md5 a4060ca1e9c538b5110293e223dd4e4a
create function ceaseless._forge_token_source_problem(p_value jsonb)
    returns text
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._forge_token_source_problem(p_value jsonb) is 'What is wrong with a forge_token_source value ({env, label_env: {forge: variable}, file: absolute path, hosts: {forge: [origin]}}), or NULL; never quotes the value.';
grant execute on function ceaseless._forge_token_source_problem(p_value jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/72_forge_verdict.sql, body md5 10f92b085d5956e7308fc99d55381cb1
create function ceaseless._forge_verdict(p_job_id uuid, p_kind text, p_final_message text, p_pr_number bigint, OUT outcome text, OUT error text)
    returns record
    language plpgsql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._forge_verdict(p_job_id uuid, p_kind text, p_final_message text, p_pr_number bigint, OUT outcome text, OUT error text) is 'The outcome of a succeeded run: needs_human (its block, any kind), failed (a bad block; an implement run without a pull request, a plan without valid children) or succeeded, with the reason.';
grant execute on function ceaseless._forge_verdict(p_job_id uuid, p_kind text, p_final_message text, p_pr_number bigint, OUT outcome text, OUT error text) to ceaseless_listener, ceaseless_operator;

-- functions/70_tracked_repo.sql, body md5 0577decdb8e44bbd8abcfc23a12df50e
create function ceaseless._git_branch_error(p_ref text)
    returns text
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._git_branch_error(p_ref text) is 'NULL when p_ref is a branch name git accepts (check-ref-format --branch rules), else why not; never raises.';
grant execute on function ceaseless._git_branch_error(p_ref text) to ceaseless_listener, ceaseless_operator;

-- functions/56_loop_firing.sql, body md5 27675ab0b39ef1e886b19d3b350f0493
create function ceaseless._graph_agents_disabled(p_graph jsonb)
    returns TABLE(node_id text, agent text, registered boolean)
    language plpgsql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._graph_agents_disabled(p_graph jsonb) is 'The nodes of a topology graph whose agent is disabled or not registered (node, agent, registered): what refuses a loop''s fire as agent_disabled.';
grant execute on function ceaseless._graph_agents_disabled(p_graph jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/13_default_agent.sql, body md5 d26722ee38af29e387d468b9d6cf826b
create function ceaseless._graph_with_default_agent(p_where text, p_graph jsonb)
    returns jsonb
    language plpgsql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._graph_with_default_agent(p_where text, p_graph jsonb) is 'p_graph with settings.default_agent written into every node that names no agent (CE422 naming p_where.nodes.agent when there is no default).';
grant execute on function ceaseless._graph_with_default_agent(p_where text, p_graph jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/90_views.sql, body md5 227f1f7af5733c8671781972b536b53f
create function ceaseless._held_summary(p_target uuid)
    returns TABLE(n bigint, collapsed bigint, next_at timestamp with time zone)
    language sql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._held_summary(p_target uuid) is 'A routine''s or loop''s held fires: how many, the fires they stand for, the earliest fire_at.';
grant execute on function ceaseless._held_summary(p_target uuid) to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/05_secrets.sql, body md5 7316ccd5c36da8b06724c6f184729872
create function ceaseless._hidden_values(p_object jsonb)
    returns jsonb
    language sql
    immutable
    parallel safe
    set search_path = pg_catalog, pg_temp;
comment on function ceaseless._hidden_values(p_object jsonb) is 'A JSON object with every value replaced by "(hidden)"; anything else becomes "(hidden)".';
grant execute on function ceaseless._hidden_values(p_object jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/35_webhook_schemes.sql, body md5 6f2b6cf42ada9ecea057846ba44be459
create function ceaseless._hmac_sha256(p_key bytea, p_message bytea)
    returns bytea
    language plpgsql
    immutable
    strict
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._hmac_sha256(p_key bytea, p_message bytea) is 'HMAC-SHA256 of p_message under p_key (RFC 2104), built on sha256() so no extension is needed.';
grant execute on function ceaseless._hmac_sha256(p_key bytea, p_message bytea) to ceaseless_listener, ceaseless_operator;

-- functions/33_held_fires.sql, body md5 075e91952f85f87be5393f9ffffd118a
create function ceaseless._hold_fire(p_kind text, p_target uuid, p_user_id text, p_policy text, p_blocked_by text, p_trigger text, p_detail text, p_context text, p_fire_at timestamp with time zone, p_now timestamp with time zone, p_slot timestamp with time zone DEFAULT NULL::timestamp with time zone)
    returns uuid
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._hold_fire(p_kind text, p_target uuid, p_user_id text, p_policy text, p_blocked_by text, p_trigger text, p_detail text, p_context text, p_fire_at timestamp with time zone, p_now timestamp with time zone, p_slot timestamp with time zone) is 'Hold a fire an overlap rule refused under buffer_one / buffer_all (the newest replacing the rest / in order up to overlap_buffer_max); returns the held_fires id, NULL when full.';
grant execute on function ceaseless._hold_fire(p_kind text, p_target uuid, p_user_id text, p_policy text, p_blocked_by text, p_trigger text, p_detail text, p_context text, p_fire_at timestamp with time zone, p_now timestamp with time zone, p_slot timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/00_helpers.sql, body md5 4cd5eb2c9939666e3e534ee1b45fdaac
create function ceaseless._input_cap(p_name text)
    returns integer
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._input_cap(p_name text) is 'The cap on a kind of untrusted text (pattern, schedule, schedule_items, prompt, event_content, event_payload, job_prompt, job_payload, graph_nodes, graph_edges, run_final_message, json_depth): characters, items for schedule_items, graph_nodes and graph_edges, levels for json_depth; NULL for an unknown name.';
grant execute on function ceaseless._input_cap(p_name text) to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/02_bounded_json.sql, body md5 6389971568f76ef385d372b960c87587
create function ceaseless._install_bounded_json(p_table regclass, p_columns text[])
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._install_bounded_json(p_table regclass, p_columns text[]) is 'Create (or replace) the BEFORE trigger <table>_bounded_json that refuses a document nested deeper than the cap in any of p_columns, calling _tg_bounded_json only for such a row.';
grant execute on function ceaseless._install_bounded_json(p_table regclass, p_columns text[]) to ceaseless_listener, ceaseless_operator;

-- functions/05_secrets.sql, body md5 378545232f965838f2e88361303cb4c8
create function ceaseless._install_quiet_checks(p_table regclass, p_when text, p_secret_columns text[])
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._install_quiet_checks(p_table regclass, p_when text, p_secret_columns text[]) is 'Generate a BEFORE trigger on a table that raises its NOT NULL and CHECK violations with the values the rule read, but never the whole row or p_secret_columns; p_when selects the rows.';
grant execute on function ceaseless._install_quiet_checks(p_table regclass, p_when text, p_secret_columns text[]) to ceaseless_listener, ceaseless_operator;

-- functions/00_helpers.sql, body md5 7140e8740e5c1bc6a568d212596590fd
create function ceaseless._invalid_value(p_where text, p_rule text, p_value jsonb)
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._invalid_value(p_where text, p_rule text, p_value jsonb) is 'Raise CE422 naming where (table.column[.key…]), the rule and the bad value, shown up to 200 characters; the table and column go into the error''s fields.';
grant execute on function ceaseless._invalid_value(p_where text, p_rule text, p_value jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/00_helpers.sql, body md5 6021747c31474994ff8b29ded7dce4ad
create function ceaseless._is_blank(p_value text)
    returns boolean
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._is_blank(p_value text) is 'True for NULL, empty, or only Unicode whitespace (White_Space plus zero-width characters).';
grant execute on function ceaseless._is_blank(p_value text) to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/00_helpers.sql, body md5 4bcc5856399b6b4922d414d6ab4a1725
create function ceaseless._is_text(p_value jsonb)
    returns boolean
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._is_text(p_value jsonb) is 'True for a JSON string that is not blank (Unicode whitespace).';
grant execute on function ceaseless._is_text(p_value jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/11_job_input.sql, body md5 7645114e101373bd69d6d7f44ca0f0ba
create function ceaseless._is_workspace_path(p_value jsonb)
    returns boolean
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._is_workspace_path(p_value jsonb) is 'True for a JSON string that is a relative path without a .. component (a context path).';
grant execute on function ceaseless._is_workspace_path(p_value jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/11_job_input.sql, body md5 6ca4b7020b622127a125458dd9fa21fd
create function ceaseless._job_budget_left(p_job_id uuid, p_max_cost_usd numeric, p_max_tokens bigint, OUT usd numeric, OUT tokens bigint)
    returns record
    language plpgsql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._job_budget_left(p_job_id uuid, p_max_cost_usd numeric, p_max_tokens bigint, OUT usd numeric, OUT tokens bigint) is 'What is left of a job''s max_cost_usd and max_tokens after all its runs (NULL: no ceiling); zero or less: spent.';
grant execute on function ceaseless._job_budget_left(p_job_id uuid, p_max_cost_usd numeric, p_max_tokens bigint, OUT usd numeric, OUT tokens bigint) to ceaseless_listener, ceaseless_operator;

-- functions/10_jobs.sql, body md5 e98c75c2c4c66e29584f6c4c2383e318
create function ceaseless._job_for(p_verb text, p_job_id uuid)
    returns ceaseless.job
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._job_for(p_verb text, p_job_id uuid) is 'The job p_job_id locked FOR UPDATE, when the caller acts for its owner and for the owners of the routine run, topology run and parent job it names (_acts_for); else CE404 naming p_verb.';
grant execute on function ceaseless._job_for(p_verb text, p_job_id uuid) to ceaseless_listener, ceaseless_operator;

-- functions/20_agent_runs.sql, body md5 36aeb1f5cb93092ab0b28f1e5c96c6ac
create function ceaseless._job_state_after(p_outcome text, p_attempts integer, p_max_attempts integer, p_rate_limit_reset_at timestamp with time zone DEFAULT NULL::timestamp with time zone)
    returns text
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._job_state_after(p_outcome text, p_attempts integer, p_max_attempts integer, p_rate_limit_reset_at timestamp with time zone) is 'The state a job moves to when its run ends with p_outcome, after p_attempts of p_max_attempts attempts: delivered, blocked (budget_exhausted, output_budget_exhausted, auth_failed, needs_human), cancelled, pending (another attempt, or a rate limit''s reset), abandoned (lease_expired, none left) or failed.';
grant execute on function ceaseless._job_state_after(p_outcome text, p_attempts integer, p_max_attempts integer, p_rate_limit_reset_at timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/02_bounded_json.sql, body md5 139c9025cf598c611afe81c0c1fd5fdd
create function ceaseless._json_too_deep(p_value jsonb)
    returns boolean
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._json_too_deep(p_value jsonb) is 'True when the document has a value nested deeper than _input_cap(''json_depth'') levels.';
grant execute on function ceaseless._json_too_deep(p_value jsonb) to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/02_bounded_json.sql, body md5 9113b6ea2b9e2ae003dbf827bae873fb
create function ceaseless._json_too_deep_path()
    returns text
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._json_too_deep_path() is 'The jsonpath (as text) that matches a value nested deeper than _input_cap(''json_depth'').';
grant execute on function ceaseless._json_too_deep_path() to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/12_lanes.sql, body md5 83a10c86571f38b924eb0de135f1a17b
create function ceaseless._lane_capacity(p_now timestamp with time zone, p_agents text[] DEFAULT NULL::text[], p_measure_all boolean DEFAULT false)
    returns TABLE(agent text, live bigint, claimed bigint, started_in_window bigint, cost_in_window numeric, tokens_in_window numeric, paused_until timestamp with time zone, pause_reason text, held_by text[], free bigint)
    language plpgsql
    stable
    security definer
    rows 10
    set enable_seqscan = off
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._lane_capacity(p_now timestamp with time zone, p_agents text[], p_measure_all boolean) is 'Per lane (all, or those in p_agents): its live and claimed jobs, the runs, cost and tokens of its window, the pause in force, what holds it (held_by: agent_disabled, lane_paused, lane_full, window_budget, cost_budget, token_budget) and its free slots (0 while held), read against p_now: the one rule claim_jobs admits by, governor_usage shows and _explain_lane explains. With p_measure_all false (a claim), a closed lane and the window of a lane without a budget are not counted.';
grant execute on function ceaseless._lane_capacity(p_now timestamp with time zone, p_agents text[], p_measure_all boolean) to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/12_lanes.sql, body md5 7ed87df5e23b71a82972d552a3a90ddb
create function ceaseless._lane_for_operator(p_verb text, p_agent text)
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._lane_for_operator(p_verb text, p_agent text) is 'Refuse a lane verb (p_verb names it in the error) to a caller that is no operator or listener (42501), or for an unknown lane (CE404); lock the lane''s agents row FOR KEY SHARE.';
grant execute on function ceaseless._lane_for_operator(p_verb text, p_agent text) to ceaseless_listener, ceaseless_operator;

-- functions/41_fire_admission.sql, body md5 3c8fc2fdbfff6d9461f2b385939c2a0a
create function ceaseless._lock_routines_for_fire(p_routine_ids uuid[], p_running bigint, p_no_wait boolean)
    returns boolean
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._lock_routines_for_fire(p_routine_ids uuid[], p_running bigint, p_no_wait boolean) is 'Serialise the fires of routines whose dedup or max_concurrent could bind (advisory locks in key order; or without waiting, false when another fire holds one).';
grant execute on function ceaseless._lock_routines_for_fire(p_routine_ids uuid[], p_running bigint, p_no_wait boolean) to ceaseless_listener, ceaseless_operator;

-- functions/25_notify_audit.sql, body md5 380b9ab7167a38ef1a9488ba6d0fdec7
create function ceaseless._loop_audit_detail(p_old ceaseless.loops, p_new ceaseless.loops)
    returns jsonb
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._loop_audit_detail(p_old ceaseless.loops, p_new ceaseless.loops) is 'The audit detail of a loop change: changed configuration, the webhook credential as set / rotated / cleared (never its value), the stopped reason and the last error.';
grant execute on function ceaseless._loop_audit_detail(p_old ceaseless.loops, p_new ceaseless.loops) to ceaseless_listener, ceaseless_operator;

-- functions/55_loop_validation.sql, body md5 a05ba4faa3a7f3557e36a2c37fbd9989
create function ceaseless._loop_creator(p_handle text)
    returns uuid
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._loop_creator(p_handle text) is 'The users row whose handle is a loop owner''s role name, created on first use (loops.created_by).';
grant execute on function ceaseless._loop_creator(p_handle text) to ceaseless_listener, ceaseless_operator;

-- functions/56_loop_firing.sql, body md5 0b9f60d4a1da12728ec465d0061f1bf7
create function ceaseless._loop_paced_until(p_loop_id uuid, p_min_interval_secs integer, p_now timestamp with time zone)
    returns timestamp with time zone
    language sql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._loop_paced_until(p_loop_id uuid, p_min_interval_secs integer, p_now timestamp with time zone) is 'When a loop''s next fire may start under its min_interval_secs (its latest iteration''s created_at + the interval), or NULL when a fire at p_now may start at once.';
grant execute on function ceaseless._loop_paced_until(p_loop_id uuid, p_min_interval_secs integer, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/56_loop_firing.sql, body md5 573ceaca3fda05741ce349265cb09543
create function ceaseless._loop_prior_context(p_message text, p_status text, p_cap integer)
    returns text
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._loop_prior_context(p_message text, p_status text, p_cap integer) is 'The prior-iteration context of a loop''s next task: the parent''s final message, cut to p_cap characters with a marker (or a line saying it has none).';
grant execute on function ceaseless._loop_prior_context(p_message text, p_status text, p_cap integer) to ceaseless_listener, ceaseless_operator;

-- functions/56_loop_firing.sql, body md5 e9637ec9da480f6b9023f0145d48a7a0
create function ceaseless._loop_stop_reason(p_policy jsonb, p_count integer, p_status text, p_final_message text)
    returns text
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._loop_stop_reason(p_policy jsonb, p_count integer, p_status text, p_final_message text) is 'The repeat policy''s verdict on an iteration that ended: completed, exhausted, failed, cancelled, or NULL to go on.';
grant execute on function ceaseless._loop_stop_reason(p_policy jsonb, p_count integer, p_status text, p_final_message text) to ceaseless_listener, ceaseless_operator;

-- functions/55_loop_validation.sql, body md5 9dec1e72b8b1d500f6a6dc46746ac08b
create function ceaseless._loop_until_event(p_event jsonb)
    returns text
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._loop_until_event(p_event jsonb) is 'The run status an until-policy event names (succeeded, failed; the seed''s ''ok'' is succeeded), or NULL when it names none.';
grant execute on function ceaseless._loop_until_event(p_event jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/94_metrics.sql, body md5 aca75806cc65aceb52a0bbfda5b2cd19
create function ceaseless._metrics_duration_bounds()
    returns double precision[]
    language sql
    immutable
    parallel safe
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._metrics_duration_bounds() is 'The upper bounds (le) of ceaseless_agent_run_duration_seconds, in seconds, +Inf last.';
grant execute on function ceaseless._metrics_duration_bounds() to ceaseless_listener, ceaseless_operator;

-- functions/94_metrics.sql, body md5 4bc352afc3e5501fc1a85edc4a3ebca3
create function ceaseless._metrics_fold(p_limit integer DEFAULT 50000)
    returns integer
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._metrics_fold(p_limit integer) is 'Fold up to p_limit counter deltas into metric_totals (SKIP LOCKED: every listener''s sweep may call it); returns how many deltas were folded.';
grant execute on function ceaseless._metrics_fold(p_limit integer) to ceaseless_listener, ceaseless_operator;

-- functions/94_metrics.sql, body md5 42ba586125d1ebbdd5ae76e6ffd20bb2
create function ceaseless._metrics_skip_labels(p_kind text, p_id uuid, p_name text, p_trigger text, p_reason text)
    returns jsonb
    language sql
    immutable
    parallel safe
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._metrics_skip_labels(p_kind text, p_id uuid, p_name text, p_trigger text, p_reason text) is 'The labels of ceaseless_routine_skips_total and ceaseless_loop_skips_total: routine (name) or loop (title) as p_kind says, its id as routine_id or loop_id, trigger, reason.';
grant execute on function ceaseless._metrics_skip_labels(p_kind text, p_id uuid, p_name text, p_trigger text, p_reason text) to ceaseless_listener, ceaseless_operator;

-- functions/60_notifications.sql, body md5 031a41657706f9f822ee9eb5ff8e37be
create function ceaseless._notification_sink_problem(p_name text, p_sinks jsonb)
    returns text
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._notification_sink_problem(p_name text, p_sinks jsonb) is 'Why sink p_name of the sink configuration p_sinks cannot deliver (unknown, malformed), or NULL when it can.';
grant execute on function ceaseless._notification_sink_problem(p_name text, p_sinks jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/60_notifications.sql, body md5 f028d6ca408f7db1314121305aaa47d7
create function ceaseless._notification_sinks()
    returns jsonb
    language plpgsql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._notification_sinks() is 'The notification_sinks setting, or {"default": {"type": "log"}} when the row is missing.';
grant execute on function ceaseless._notification_sinks() to ceaseless_listener, ceaseless_operator;

-- functions/25_notify_audit.sql, body md5 e22f68c9dab9a5b877f92f9123e5a903
create function ceaseless._notify_group(p_channel text, p_ids uuid[], p_fields jsonb)
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._notify_group(p_channel text, p_ids uuid[], p_fields jsonb) is 'pg_notify one group of rows: {id} for a single row, {id: null, count} for many, plus p_fields; nothing for no rows.';
grant execute on function ceaseless._notify_group(p_channel text, p_ids uuid[], p_fields jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/91_run_events.sql, body md5 7ae62627fc6175e5217fbdfb633f0438
create function ceaseless._observer_event(p_row ceaseless.audit_log)
    returns TABLE(event text, data jsonb)
    language sql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._observer_event(p_row ceaseless.audit_log) is 'The SSE event of one audit row: its name (run, node, approval, loop) and its data (ids, states, the time, the actor and a listener''s worker id; bounded errors and notes).';
grant execute on function ceaseless._observer_event(p_row ceaseless.audit_log) to ceaseless_listener, ceaseless_operator;

-- functions/12_lanes.sql, body md5 e848a34b185f15717051868620a81bff
create function ceaseless._owner_budget_clears(p_budget ceaseless.owner_budgets, p_now timestamp with time zone)
    returns timestamp with time zone
    language sql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._owner_budget_clears(p_budget ceaseless.owner_budgets, p_now timestamp with time zone) is 'When an owner over its spend budget is under it again (enough of its window''s spend aged out); NULL when it is not over.';
grant execute on function ceaseless._owner_budget_clears(p_budget ceaseless.owner_budgets, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/12_lanes.sql, body md5 d6dde88b0494b10ee0b00f1215915d6a
create function ceaseless._owner_spend(p_budget ceaseless.owner_budgets, p_now timestamp with time zone)
    returns TABLE(cost numeric, tokens numeric)
    language sql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._owner_spend(p_budget ceaseless.owner_budgets, p_now timestamp with time zone) is 'USD and tokens reported by the owner''s runs started in its budget window (every lane).';
grant execute on function ceaseless._owner_spend(p_budget ceaseless.owner_budgets, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/12_lanes.sql, body md5 f74acc20203de5b09c4d67449ecdb53a
create function ceaseless._owners_over_budget(p_now timestamp with time zone)
    returns text[]
    language sql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._owners_over_budget(p_now timestamp with time zone) is 'The owners whose runs in their window reported their cost or token budget: claim_jobs claims none of their jobs until it clears.';
grant execute on function ceaseless._owners_over_budget(p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/51_topology_runs.sql, body md5 c92c139548bf5e092774a0a66d187f60
create function ceaseless._pass_topology_node(p_run_id uuid, p_node_id text, p_now timestamp with time zone)
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._pass_topology_node(p_run_id uuid, p_node_id text, p_now timestamp with time zone) is 'A done (succeeded or skipped) node passes: each downstream node''s upstream count drops by one and those reaching zero start. The caller holds the run row.';
grant execute on function ceaseless._pass_topology_node(p_run_id uuid, p_node_id text, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/72_forge_verdict.sql, body md5 4b35fd38173742bcdc91ca802b2700f6
create function ceaseless._plan_child_key(p_child jsonb)
    returns text
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._plan_child_key(p_child jsonb) is 'A child issue''s key: its "key", else t-<16 hex digits of md5(lower(title))>.';
grant execute on function ceaseless._plan_child_key(p_child jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/72_forge_verdict.sql, body md5 c277b332e8178a906877f2599d9dfb22
create function ceaseless._plan_children_problem(p_children jsonb)
    returns text
    language plpgsql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._plan_children_problem(p_children jsonb) is 'Why a plan''s children array is invalid (child and rule named), or NULL when it is valid.';
grant execute on function ceaseless._plan_children_problem(p_children jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/96_retention.sql, body md5 cc3274f75d8d1fb5e0df6af0ca12994c
create function ceaseless._prunable_jobs(p_cutoff timestamp with time zone, p_limit integer)
    returns SETOF uuid
    language sql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._prunable_jobs(p_cutoff timestamp with time zone, p_limit integer) is 'Up to p_limit finished jobs finished before p_cutoff, oldest first, of no run, parent of no job, no plan with children still to create, nor the latest forge job of its issue and kind.';
grant execute on function ceaseless._prunable_jobs(p_cutoff timestamp with time zone, p_limit integer) to ceaseless_listener, ceaseless_operator;

-- functions/96_retention.sql, body md5 a67bcfa8eaa8ac9ed9488b7bb71229ba
create function ceaseless._prunable_routine_runs(p_cutoff timestamp with time zone, p_now timestamp with time zone, p_limit integer)
    returns SETOF uuid
    language sql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._prunable_routine_runs(p_cutoff timestamp with time zone, p_now timestamp with time zone, p_limit integer) is 'Up to p_limit finished routine runs completed before p_cutoff, oldest first, but not a routine''s latest success, a run inside its routine''s dedup window, or a run with a live job.';
grant execute on function ceaseless._prunable_routine_runs(p_cutoff timestamp with time zone, p_now timestamp with time zone, p_limit integer) to ceaseless_listener, ceaseless_operator;

-- functions/96_retention.sql, body md5 70a9a02df4dc1663683875c046aef410
create function ceaseless._prunable_topology_runs(p_cutoff timestamp with time zone, p_limit integer)
    returns SETOF uuid
    language sql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._prunable_topology_runs(p_cutoff timestamp with time zone, p_limit integer) is 'Up to p_limit finished topology runs finished before p_cutoff, oldest first, but not a loop''s latest finished iteration or last run, nor a run with a live job.';
grant execute on function ceaseless._prunable_topology_runs(p_cutoff timestamp with time zone, p_limit integer) to ceaseless_listener, ceaseless_operator;

-- functions/96_retention.sql, body md5 4c992b4b6f9072902fee043db117dfd1
create function ceaseless._prune_kind(p_kind text, p_now timestamp with time zone, p_limit integer, p_dry_run boolean, OUT removed bigint, OUT jobs bigint)
    returns record
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._prune_kind(p_kind text, p_now timestamp with time zone, p_limit integer, p_dry_run boolean, OUT removed bigint, OUT jobs bigint) is 'Remove (or with p_dry_run count) up to p_limit rows of one kind past retention; returns how many, and how many jobs went with the runs removed.';

-- functions/36_webhooks.sql, body md5 4b14d3f79327f678f13fb9d2a760bf2c
create function ceaseless._receive_webhook(p_token text, p_body bytea, p_headers jsonb)
    returns TABLE(run_id uuid, refused_sqlstate text, refused_message text)
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._receive_webhook(p_token text, p_body bytea, p_headers jsonb) is 'Verify a webhook request (raw body and headers) under its target''s scheme and fire its loop or routine; a fire refused by a guardrail is returned (skipped run id, SQLSTATE, message) instead of raised, so the caller commits its record and the replay memory. Raises CE404/CE403/CE401/CE413.';
grant execute on function ceaseless._receive_webhook(p_token text, p_body bytea, p_headers jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/36_webhooks.sql, body md5 42a88d22d21959ca5abb7baeecaedb6f
create function ceaseless._receive_webhook(p_token text, p_body bytea, p_signature text, p_sent_at timestamp with time zone)
    returns TABLE(run_id uuid, refused_sqlstate text, refused_message text)
    language sql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._receive_webhook(p_token text, p_body bytea, p_signature text, p_sent_at timestamp with time zone) is '_receive_webhook with the X-Ceaseless-Signature value and the X-Ceaseless-Timestamp time given apart; a target of another scheme refuses it (CE401).';
grant execute on function ceaseless._receive_webhook(p_token text, p_body bytea, p_signature text, p_sent_at timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/00_helpers.sql, body md5 4e23d2938f0d7f61baa589c574b02165
create function ceaseless._refuse_long(p_where text, p_value text, p_cap text)
    returns void
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._refuse_long(p_where text, p_value text, p_cap text) is 'Raise CE422 when p_value is longer than the cap p_cap (_input_cap), naming p_where, the cap and the length and showing only the first 40 characters.';
grant execute on function ceaseless._refuse_long(p_where text, p_value text, p_cap text) to ceaseless_listener, ceaseless_operator;

-- functions/31_trigger_validation.sql, body md5 2cd9bac306a8348c637004955cf67442
create function ceaseless._regex_backreference(p_pattern text)
    returns text
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._regex_backreference(p_pattern text) is 'The first back-reference (\1 and up) in a regular expression, or NULL when it has none.';
grant execute on function ceaseless._regex_backreference(p_pattern text) to ceaseless_listener, ceaseless_operator;

-- functions/40_routine_validation.sql, body md5 ccca68623f665cb8b8c4a827fce8430e
create function ceaseless._regex_required_literal(p_pattern text)
    returns text
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._regex_required_literal(p_pattern text) is 'A literal that every match of the regular expression must contain (empty when none is known): the cheap prefilter of event matching. Linear in the pattern''s length.';
grant execute on function ceaseless._regex_required_literal(p_pattern text) to ceaseless_listener, ceaseless_operator;

-- functions/25_notify_audit.sql, body md5 52ce653b239fa2e6c0307a8dde12c3dd
create function ceaseless._relay_announcement(p_channel text, p_payload text)
    returns void
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._relay_announcement(p_channel text, p_payload text) is 'Append one announcement to announcements, for relay_announcements to send.';
grant execute on function ceaseless._relay_announcement(p_channel text, p_payload text) to ceaseless_listener, ceaseless_operator;

-- functions/41_fire_admission.sql, body md5 1787699c12e674a068573c861f2cecf3
create function ceaseless._remember_fire(p_mode text, p_room bigint, p_loop_run uuid DEFAULT NULL::uuid)
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._remember_fire(p_mode text, p_room bigint, p_loop_run uuid) is 'Record in transaction_state how this transaction''s routine fires were admitted (shared or exclusive) and the room its shared slots have left, or the loop iteration it is inserting; a NULL part keeps what the transaction recorded.';
grant execute on function ceaseless._remember_fire(p_mode text, p_room bigint, p_loop_run uuid) to ceaseless_listener, ceaseless_operator;

-- functions/33_held_fires.sql, body md5 c20ef3e4b3432a9037f3383f53f6a581
create function ceaseless._remember_held(p_held_id uuid)
    returns void
    language sql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._remember_held(p_held_id uuid) is 'Record in transaction_state the held fire being released (NULL: none), keeping the rest.';
grant execute on function ceaseless._remember_held(p_held_id uuid) to ceaseless_listener, ceaseless_operator;

-- functions/10_jobs.sql, body md5 7157f57cd608b04c4fc4f30040741fcc
create function ceaseless._replier()
    returns text
    language sql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._replier() is 'Who sends a reply: session_user, and for a listener''s session its ceaseless.actor (e.g. `w1 dashboard:alice`).';
grant execute on function ceaseless._replier() to ceaseless_listener, ceaseless_operator;

-- functions/70_tracked_repo.sql, body md5 b5892455749f9555700e0e44db89efc5
create function ceaseless._repo_bookkeeping()
    returns text[]
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._repo_bookkeeping() is 'The tracked_repo columns that only record polling; an UPDATE of these alone is not re-validated.';
grant execute on function ceaseless._repo_bookkeeping() to ceaseless_listener, ceaseless_operator;

-- functions/70_tracked_repo.sql, body md5 79b817467b0762bdecc61597e786768e
create function ceaseless._repo_interval(p_repo ceaseless.tracked_repo)
    returns interval
    language plpgsql
    stable
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._repo_interval(p_repo ceaseless.tracked_repo) is 'The repo''s poll interval clamped at use to the forge_min_interval_secs setting; the stored interval_seconds stays what the user asked for.';
grant execute on function ceaseless._repo_interval(p_repo ceaseless.tracked_repo) to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/70_tracked_repo.sql, body md5 004957ebe4ec10ab81086904e4ecab9e
create function ceaseless._repo_quiet_at(p_repo ceaseless.tracked_repo, p_now timestamp with time zone DEFAULT now())
    returns boolean
    language plpgsql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._repo_quiet_at(p_repo ceaseless.tracked_repo, p_now timestamp with time zone) is 'True when p_now falls in the repo''s quiet window, read as wall-clock time in its quiet_timezone (DST-safe; a window may cross midnight; start inside, end outside).';
grant execute on function ceaseless._repo_quiet_at(p_repo ceaseless.tracked_repo, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/20_agent_runs.sql, body md5 a0f3df27b99cf2f1f34b5ef729a5327b
create function ceaseless._reported_results(p_results jsonb)
    returns TABLE(run_id uuid, outcome text, exit_status integer, final_message text, error text, session_id text, billing text, model text, tokens_in bigint, tokens_out bigint, cost_usd numeric, num_turns integer, rate_limit_reset_at timestamp with time zone, pr_forge text, pr_owner text, pr_repo text, pr_number bigint, pr_head_branch text, pr_url text)
    language plpgsql
    immutable
    rows 10
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._reported_results(p_results jsonb) is 'finish_runs'' p_results as rows (run_id, outcome and the fields a run reports), planned as ten.';
grant execute on function ceaseless._reported_results(p_results jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/52_approvals.sql, body md5 e793784884f81d40a800601ff336323c
create function ceaseless._request_approval(p_run_id uuid, p_node_id text, p_now timestamp with time zone)
    returns uuid
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._request_approval(p_run_id uuid, p_node_id text, p_now timestamp with time zone) is 'Create the approval of a gated node (expiring after its approval_timeout_secs), mark the node awaiting_approval and queue the owner''s notification with the SQL to decide it.';
grant execute on function ceaseless._request_approval(p_run_id uuid, p_node_id text, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/99_access.sql, body md5 92fbbbfdecbcd6d46d16d5a2af8c35c9
create function ceaseless._restrict_temporary()
    returns boolean
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._restrict_temporary() is 'On a database holding only ceaseless, take TEMPORARY from PUBLIC (user roles cannot create temporary tables) and give it to the listener and operator roles; elsewhere a NOTICE. Applied by migrate; true when it restricted.';
grant execute on function ceaseless._restrict_temporary() to public;

-- functions/11_job_input.sql, body md5 6d4c6e05dbe00001b63f5c6a97f890c0
create function ceaseless._resumable(p_session_id text)
    returns text
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._resumable(p_session_id text) is 'The session id when an agent CLI can resume it (a UUID for Claude Code, ses_ and 26 letters or digits for opencode), else NULL.';
grant execute on function ceaseless._resumable(p_session_id text) to ceaseless_listener, ceaseless_operator;

-- functions/10_jobs.sql, body md5 03217cb4b72e9e9cfd23516b816df316
create function ceaseless._resume_blocked_job(p_job ceaseless.job, p_reply text, p_action text, p_now timestamp with time zone)
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._resume_blocked_job(p_job ceaseless.job, p_reply text, p_action text, p_now timestamp with time zone) is 'Return a blocked job to pending, its attempts whole, with p_reply waiting for the run that resumes its session (the job''s, else its last run''s); audited as p_action with who sent it.';
grant execute on function ceaseless._resume_blocked_job(p_job ceaseless.job, p_reply text, p_action text, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/96_retention.sql, body md5 61113edb0edf477ee3bf3c5ec73ed470
create function ceaseless._retention_cutoff(p_kind text, p_now timestamp with time zone)
    returns timestamp with time zone
    language plpgsql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._retention_cutoff(p_kind text, p_now timestamp with time zone) is 'The moment before which a kind''s finished rows are past retention (retention_<kind>_secs; two webhook_window_secs for webhook deliveries); NULL when the setting is 0 (kept forever).';
grant execute on function ceaseless._retention_cutoff(p_kind text, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/96_retention.sql, body md5 6ebc4141645a4f44cccf7623cc296f25
create function ceaseless._retention_kinds()
    returns text[]
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._retention_kinds() is 'The kinds of row prune removes, in its order: routine_runs, topology_runs, jobs, events, notifications, late_results, webhook_deliveries, audit_log.';
grant execute on function ceaseless._retention_kinds() to ceaseless_listener, ceaseless_operator;

-- functions/00_helpers.sql, body md5 cfe2e8f5220937c4a032f4af4fd7cdd9
create function ceaseless._retry_delay(p_attempts integer)
    returns interval
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._retry_delay(p_attempts integer) is 'Backoff before retry number p_attempts: base * 2^(attempts-1), capped, plus up to 25% jitter.';
grant execute on function ceaseless._retry_delay(p_attempts integer) to ceaseless_listener, ceaseless_operator;

-- functions/10_jobs.sql, body md5 ab10b6944333ea5c4ae59185f99043ed
create function ceaseless._round_robin_pick(p_agent text, p_free integer, p_now timestamp with time zone, p_kinds text[], p_owners_over text[])
    returns TABLE(id uuid, turn integer, priority integer, run_after timestamp with time zone, created_at timestamp with time zone)
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._round_robin_pick(p_agent text, p_free integer, p_now timestamp with time zone, p_kinds text[], p_owners_over text[]) is 'A round_robin lane''s next p_free due jobs, one per owner in turn (after the owner served last), and within an owner one per fairness key in turn, each key''s by priority then due time; moves the lane''s turn. Called by claim_jobs under the lane lock.';
grant execute on function ceaseless._round_robin_pick(p_agent text, p_free integer, p_now timestamp with time zone, p_kinds text[], p_owners_over text[]) to ceaseless_listener, ceaseless_operator;

-- functions/42_routine_firing.sql, body md5 a59b33c632173a71053f2cdcae25a53b
create function ceaseless._routine_job_spec(p_routine ceaseless.routines, p_context text, OUT prompt text, OUT payload jsonb, OUT expects_reply boolean, OUT max_attempts integer, OUT max_turns integer)
    returns record
    language plpgsql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._routine_job_spec(p_routine ceaseless.routines, p_context text, OUT prompt text, OUT payload jsonb, OUT expects_reply boolean, OUT max_attempts integer, OUT max_turns integer) is 'The prompt, payload and limits of a routine run''s job: lightweight (prompt + context + state + ROUTINE_OK, replies required) or full_job (title + description, max_turns).';
grant execute on function ceaseless._routine_job_spec(p_routine ceaseless.routines, p_context text, OUT prompt text, OUT payload jsonb, OUT expects_reply boolean, OUT max_attempts integer, OUT max_turns integer) to ceaseless_listener, ceaseless_operator;

-- functions/42_routine_firing.sql, body md5 85d8ad039d4e4421d9168d505c29d62a
create function ceaseless._routine_ok_instruction()
    returns text
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._routine_ok_instruction() is 'The closing instruction of every lightweight routine prompt.';
grant execute on function ceaseless._routine_ok_instruction() to ceaseless_listener, ceaseless_operator;

-- functions/91_run_events.sql, body md5 7beaa318744badf9e6bd86d654bdf9ee
create function ceaseless._run_status_final(p_status text)
    returns boolean
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._run_status_final(p_status text) is 'True for the statuses a topology run never leaves (succeeded, failed, cancelled, skipped): the run stream of the SSE observer ends there.';
grant execute on function ceaseless._run_status_final(p_status text) to ceaseless_listener, ceaseless_operator;

-- functions/32_schedules.sql, body md5 b6ec807d6a84e1f39414e79d5045bcfd
create function ceaseless._schedule_changed(p_schedule text, p_timezone text, p_enabled boolean, p_old_schedule text, p_old_timezone text, p_old_enabled boolean)
    returns boolean
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._schedule_changed(p_schedule text, p_timezone text, p_enabled boolean, p_old_schedule text, p_old_timezone text, p_old_enabled boolean) is 'True when an enabled row with a schedule changed its schedule, timezone or enabling: its next_fire_at must be computed again.';
grant execute on function ceaseless._schedule_changed(p_schedule text, p_timezone text, p_enabled boolean, p_old_schedule text, p_old_timezone text, p_old_enabled boolean) to ceaseless_listener, ceaseless_operator;

-- functions/11_job_input.sql, body md5 f74bd2e5cd23f7f74dac5702a28f3cf8
create function ceaseless._session_id_ok(p_session_id text)
    returns boolean
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._session_id_ok(p_session_id text) is 'True when a session id is plausible: 1-200 characters of [A-Za-z0-9._:-], not starting with punctuation (so it can never be read as a command-line flag).';
grant execute on function ceaseless._session_id_ok(p_session_id text) to ceaseless_listener, ceaseless_operator;

-- functions/00_helpers.sql, body md5 5e14e88f1f05253adf7a8138763e8d52
create function ceaseless._setting_int(p_key text)
    returns integer
    language plpgsql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._setting_int(p_key text) is 'Read an integer from ceaseless.settings; raises CE500 when the row is missing.';
grant execute on function ceaseless._setting_int(p_key text) to ceaseless_listener, ceaseless_operator;

-- functions/03_settings.sql, body md5 3f454a5f28114f86c1c3b7b6dae6b787
create function ceaseless._setting_range(p_key text)
    returns int8range
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._setting_range(p_key text) is 'The inclusive range of a numeric setting (lease_secs, retry_*, routine_max_running, webhook_*, notification_max_attempts, rate_limit_max_wait_secs, topology_upstream_chars, loop_prior_context_chars, forge_min_interval_secs, forge_plan_max_children, audit_log_min_retention_secs, backfill_max, overlap_buffer_max, retention_*_secs, prune_interval_secs); NULL for any other key.';
grant execute on function ceaseless._setting_range(p_key text) to ceaseless_listener, ceaseless_operator;

-- functions/51_topology_runs.sql, body md5 1c0a085e0cf6e545c062d638ee30a7fd
create function ceaseless._settle_topology_run(p_run_id uuid, p_now timestamp with time zone)
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._settle_topology_run(p_run_id uuid, p_now timestamp with time zone) is 'Set a live run''s status from its nodes: succeeded (final_message = the sink outputs) when all succeeded or were skipped, awaiting_approval while only gates wait, else running. Caller holds the run.';
grant execute on function ceaseless._settle_topology_run(p_run_id uuid, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/05_secrets.sql, body md5 fc446f57e50dc6f5f89cc7cc671eaa03
create function ceaseless._sinks_without_secrets(p_sinks jsonb)
    returns jsonb
    language sql
    immutable
    parallel safe
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._sinks_without_secrets(p_sinks jsonb) is 'The notification_sinks setting with header values hidden and URLs cut to scheme://host.';
grant execute on function ceaseless._sinks_without_secrets(p_sinks jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/51_topology_runs.sql, body md5 b47b618904156cebe9f602c98a29be09
create function ceaseless._skip_topology_node(p_run_id uuid, p_node_id text, p_now timestamp with time zone)
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._skip_topology_node(p_run_id uuid, p_node_id text, p_now timestamp with time zone) is 'Skip a node awaiting approval (its approval expired under on_expiry skip): done without output, its downstream nodes start, the run settles. The caller holds the run row.';
grant execute on function ceaseless._skip_topology_node(p_run_id uuid, p_node_id text, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/12_lanes.sql, body md5 a919f28f9688895037140dede3e31b15
create function ceaseless._spend_clears(p_agents text[], p_user_id text, p_since timestamp with time zone, p_window_secs integer, p_tokens boolean, p_over numeric)
    returns timestamp with time zone
    language sql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._spend_clears(p_agents text[], p_user_id text, p_since timestamp with time zone, p_window_secs integer, p_tokens boolean, p_over numeric) is 'When a spend budget reached in a window clears: the runs of p_agents (of p_user_id''s jobs when given) since p_since age out in start order until the spend gone exceeds p_over; USD, or tokens with p_tokens. NULL when they cannot.';
grant execute on function ceaseless._spend_clears(p_agents text[], p_user_id text, p_since timestamp with time zone, p_window_secs integer, p_tokens boolean, p_over numeric) to ceaseless_listener, ceaseless_operator;

-- functions/51_topology_runs.sql, body md5 a92d58405b43866fc853c46528c32987
create function ceaseless._start_topology_nodes(p_run_id uuid, p_node_ids text[], p_now timestamp with time zone)
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._start_topology_nodes(p_run_id uuid, p_node_ids text[], p_now timestamp with time zone) is 'Start the given waiting nodes of a run whose upstreams have all succeeded: a gated node asks for approval, any other gets its job. The caller holds the run row.';
grant execute on function ceaseless._start_topology_nodes(p_run_id uuid, p_node_ids text[], p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/00_helpers.sql, body md5 ad501cae16527e925b81dcfaee39f421
create function ceaseless._statement_trigger(p_name text, p_event text, p_table regclass)
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._statement_trigger(p_name text, p_event text, p_table regclass) is 'Create (or replace) the statement-level AFTER trigger p_name on p_table for p_event (insert, update or delete), calling _tg_<p_name> with transition tables old_rows and new_rows.';
grant execute on function ceaseless._statement_trigger(p_name text, p_event text, p_table regclass) to ceaseless_listener, ceaseless_operator;

-- functions/33_held_fires.sql, body md5 79a9544a3fe576aacd4f3b49a2f6681a
create function ceaseless._supersede_iteration(p_loop_id uuid, p_now timestamp with time zone)
    returns boolean
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._supersede_iteration(p_loop_id uuid, p_now timestamp with time zone) is 'Cancel a loop''s live iteration for a cancel_other fire (row SKIP LOCKED; nodes and jobs cancelled, agents stopped); true when it ended.';
grant execute on function ceaseless._supersede_iteration(p_loop_id uuid, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/41_fire_admission.sql, body md5 949a6d12bef1ec2b811369ef35f2a4e5
create function ceaseless._take_fire_slots(p_count integer)
    returns boolean
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._take_fire_slots(p_count integer) is 'Take p_count of the sixteen fire slots (transaction-scoped advisory locks) without waiting; false when fewer are free.';
grant execute on function ceaseless._take_fire_slots(p_count integer) to ceaseless_listener, ceaseless_operator;

-- functions/25_notify_audit.sql, body md5 3f7061a4c50a5eefaebf8cac335a1d4a
create function ceaseless._tg_agent_run_insert()
    returns trigger
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_agent_run_insert() is 'After INSERT on agent_run: NOTIFY ceaseless_run once per statement (the start is audited on the job).';
grant execute on function ceaseless._tg_agent_run_insert() to ceaseless_listener, ceaseless_operator;

-- functions/94_metrics.sql, body md5 5198039fb2568ab2674ec2d115edb0f3
create function ceaseless._tg_agent_run_metrics()
    returns trigger
    language plpgsql
    volatile
    security definer
    set enable_nestloop = off
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_agent_run_metrics() is 'After UPDATE on agent_run: count the runs that just finished by lane and outcome, and their durations, into metric_deltas.';
grant execute on function ceaseless._tg_agent_run_metrics() to ceaseless_listener, ceaseless_operator;

-- functions/25_notify_audit.sql, body md5 09442eba95ce0e8f3ae6c16686ce02a7
create function ceaseless._tg_agent_run_update()
    returns trigger
    language plpgsql
    volatile
    set enable_nestloop = off
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_agent_run_update() is 'After UPDATE on agent_run: NOTIFY ceaseless_run for runs that just finished (audited on the job).';
grant execute on function ceaseless._tg_agent_run_update() to ceaseless_listener, ceaseless_operator;

-- functions/10_jobs.sql, body md5 6e738bd0800a36aa0bd1d2fdbf3bf6d5
create function ceaseless._tg_agents_disabled()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_agents_disabled() is 'After an agent is disabled: cancel its pending routine and topology node jobs (their runs fail, naming the agent); its plain and forge jobs wait for it.';
grant execute on function ceaseless._tg_agents_disabled() to ceaseless_listener, ceaseless_operator;

-- functions/56_loop_firing.sql, body md5 97d172b96cf861061e07ac77d21e1304
create function ceaseless._tg_agents_enabled()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_agents_enabled() is 'After agents are enabled: fire again the on_completion loops a fire refused for a disabled agent left idle, once all of their agents are enabled.';
grant execute on function ceaseless._tg_agents_enabled() to ceaseless_listener, ceaseless_operator;

-- functions/05_secrets.sql (generated by _install_quiet_checks), body md5 fad406dc42c9d150a4083dc279512c4a
create function ceaseless._tg_agents_quiet_checks()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_agents_quiet_checks() is 'Before INSERT/UPDATE on agents: raise NOT NULL and CHECK violations without printing the row, which may hold secrets (generated by _install_quiet_checks).';
grant execute on function ceaseless._tg_agents_quiet_checks() to ceaseless_listener, ceaseless_operator;

-- functions/14_agent_egress.sql, body md5 6287f83321a72657a4baa7272291c49e
create function ceaseless._tg_agents_validate_egress()
    returns trigger
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_agents_validate_egress() is 'Before INSERT/UPDATE of egress on agents: {none}, {open} or 1 to 100 host[:port] entries, else CE422 naming agents.egress, the rule and the entry.';
grant execute on function ceaseless._tg_agents_validate_egress() to ceaseless_listener, ceaseless_operator;

-- functions/25_notify_audit.sql, body md5 c5c24046408a76b3baf8332cc60090c8
create function ceaseless._tg_approvals_changed()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_approvals_changed() is 'After an approval is requested or decided: audit it (who asked, who decided, the note) and NOTIFY ceaseless_run.';
grant execute on function ceaseless._tg_approvals_changed() to ceaseless_listener, ceaseless_operator;

-- functions/25_notify_audit.sql, body md5 9bf25a61c41642537669fe3ca1dd9034
create function ceaseless._tg_audit_log_actor()
    returns trigger
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_audit_log_actor() is 'Before INSERT on audit_log of a row naming another actor than the session''s login role, or a worker id from a role that is no listener: refuse (CE422).';
grant execute on function ceaseless._tg_audit_log_actor() to ceaseless_listener, ceaseless_operator;

-- functions/25_notify_audit.sql, body md5 647fa826d9edfe07a8b458eddb1068b4
create function ceaseless._tg_audit_log_append_only()
    returns trigger
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_audit_log_append_only() is 'Before UPDATE, DELETE or TRUNCATE on audit_log: refuse, except the deletes of prune_audit_log.';
grant execute on function ceaseless._tg_audit_log_append_only() to ceaseless_listener, ceaseless_operator;

-- functions/02_bounded_json.sql, body md5 25b6d44be829191b153603c02771950c
create function ceaseless._tg_bounded_json()
    returns trigger
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_bounded_json() is 'Before INSERT/UPDATE: refuse (CE422) a JSON column (named by the trigger''s arguments) nested deeper than _input_cap(''json_depth'').';
grant execute on function ceaseless._tg_bounded_json() to ceaseless_listener, ceaseless_operator;

-- functions/25_notify_audit.sql, body md5 39709c415e5dc9f63284d3943bc54421
create function ceaseless._tg_config_changed()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_config_changed() is 'After a change to an agents or settings row: audit it and NOTIFY ceaseless_config so listeners reload.';
grant execute on function ceaseless._tg_config_changed() to ceaseless_listener, ceaseless_operator;

-- functions/13_default_agent.sql, body md5 eb2fe8ead8d9450571cfdd57ded446f8
create function ceaseless._tg_default_agent()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_default_agent() is 'Before INSERT or UPDATE of routines or job with agent NULL: fill settings.default_agent (CE422 naming the field when there is none).';
grant execute on function ceaseless._tg_default_agent() to ceaseless_listener, ceaseless_operator;

-- functions/43_routine_events.sql, body md5 8264d118a6939b8f57abaa4cb590e666
create function ceaseless._tg_events_fire()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_events_fire() is 'Before INSERT on events: fire the user''s matching event routines (all in one call of _fire_routines) and event loops (each through _fire_loop) in the same transaction.';
grant execute on function ceaseless._tg_events_fire() to ceaseless_listener, ceaseless_operator;

-- functions/13_default_agent.sql, body md5 e2b519e719bd120206639d4567251e99
create function ceaseless._tg_graph_default_agent()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_graph_default_agent() is 'Before a loop or a topology run is inserted, or its graph updated: write the default agent into nodes that name none.';
grant execute on function ceaseless._tg_graph_default_agent() to ceaseless_listener, ceaseless_operator;

-- functions/33_held_fires.sql, body md5 b25c2dc5f1ea719f262a449c4b8f8aef
create function ceaseless._tg_held_fires_inserted()
    returns trigger
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_held_fires_inserted() is 'After fires are held anew: NOTIFY ceaseless_schedule {table: held_fires, id: routine or loop}, so a listener''s scheduler re-reads the earliest fire_at.';
grant execute on function ceaseless._tg_held_fires_inserted() to ceaseless_listener, ceaseless_operator;

-- functions/60_notifications.sql, body md5 d5e95a69e9b7a5c15ddf82c7555641ba
create function ceaseless._tg_job_ended()
    returns trigger
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_job_ended() is 'After UPDATE on job: queue a notification for each job the statement ended for good, as its agent''s notify_on_* flags ask, on its notify_channel: blocked on a missing login (auth_failed), an agent''s question (needs_human) or a spent ceiling (budget_exhausted), any job, saying how to reply or raise the ceiling; failed or abandoned, a plain job (routines and loops announce their own). The body names the retry that works.';
grant execute on function ceaseless._tg_job_ended() to ceaseless_listener, ceaseless_operator;

-- functions/11_job_input.sql, body md5 ca10282c9a744e1a99572918762c36e0
create function ceaseless._tg_job_input()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_job_input() is 'Before INSERT/UPDATE of prompt or payload on job: refuse (CE422) a blank prompt, a prompt or payload over its cap, or a context path outside the workspace.';
grant execute on function ceaseless._tg_job_input() to ceaseless_listener, ceaseless_operator;

-- functions/25_notify_audit.sql, body md5 494efc9219dadb1c8490bc88d2a111d9
create function ceaseless._tg_job_insert()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_job_insert() is 'After INSERT on job: audit each row, NOTIFY ceaseless_job once per (kind, agent, state).';
grant execute on function ceaseless._tg_job_insert() to ceaseless_listener, ceaseless_operator;

-- functions/73_forge_children.sql, body md5 dbc0d1a8528f77f11a6989056d27c40d
create function ceaseless._tg_job_plan_children()
    returns trigger
    language plpgsql
    volatile
    set enable_nestloop = off
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_job_plan_children() is 'After UPDATE on job: queue the child issues of plan jobs that became delivered (once per repo, plan issue and key).';
grant execute on function ceaseless._tg_job_plan_children() to ceaseless_listener, ceaseless_operator;

-- functions/44_routine_outcomes.sql, body md5 422d12ee86f051b06027e29b1f4c60ef
create function ceaseless._tg_job_routine_outcome()
    returns trigger
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_job_routine_outcome() is 'After UPDATE on job: close the routine runs whose jobs the statement ended.';
grant execute on function ceaseless._tg_job_routine_outcome() to ceaseless_listener, ceaseless_operator;

-- functions/11_job_input.sql, body md5 405f760baa7c4d2a55e421b1255276a5
create function ceaseless._tg_job_spend_ceiling()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_job_spend_ceiling() is 'Before INSERT of a job (not a routine run''s) without both ceilings: max_cost_usd and max_tokens from its loop node, else its agent; the job''s own value wins.';
grant execute on function ceaseless._tg_job_spend_ceiling() to ceaseless_listener, ceaseless_operator;

-- functions/51_topology_runs.sql, body md5 8d73a766b684c84e2a996b6757f962a8
create function ceaseless._tg_job_topology_outcome()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_job_topology_outcome() is 'After UPDATE on job: move the topology nodes of the loop_node jobs the statement changed; refuse (CE409) sending a node''s ended job back to pending while its run has ended.';
grant execute on function ceaseless._tg_job_topology_outcome() to ceaseless_listener, ceaseless_operator;

-- functions/25_notify_audit.sql, body md5 04a975a3846f3ae4d09574c750d54b84
create function ceaseless._tg_job_update()
    returns trigger
    language plpgsql
    volatile
    security definer
    set enable_nestloop = off
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_job_update() is 'After UPDATE on job: audit and NOTIFY ceaseless_job for rows whose state changed, once per group.';
grant execute on function ceaseless._tg_job_update() to ceaseless_listener, ceaseless_operator;

-- functions/11_job_input.sql, body md5 31045c874c995139adffee96b616142b
create function ceaseless._tg_job_user_due()
    returns trigger
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_job_user_due() is 'Before INSERT on job of a row due before now: a user role''s job is due from now (its place in the queue), the engine''s keeps its time.';
grant execute on function ceaseless._tg_job_user_due() to ceaseless_listener, ceaseless_operator;

-- functions/11_job_input.sql, body md5 72100912f2f30ef13858125bb0196e12
create function ceaseless._tg_job_validate()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_job_validate() is 'Before INSERT or UPDATE of resume_session_id on job: refuse an id no agent CLI can resume (CE422, naming the field and the value).';
grant execute on function ceaseless._tg_job_validate() to ceaseless_listener, ceaseless_operator;

-- functions/25_notify_audit.sql, body md5 571d4304af2f17e5b3434088f66f9567
create function ceaseless._tg_loops_changed()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_loops_changed() is 'After a loop is created, changed or deleted: audit it (credentials hidden) and, when it is enabled, disabled or stopped, NOTIFY ceaseless_run.';
grant execute on function ceaseless._tg_loops_changed() to ceaseless_listener, ceaseless_operator;

-- functions/55_loop_validation.sql, body md5 c816f333908295e8a6b9fdce63a13c43
create function ceaseless._tg_loops_delete()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_loops_delete() is 'Before a loop is deleted: refuse (CE409) while an iteration is live, so no job runs on for a deleted loop.';
grant execute on function ceaseless._tg_loops_delete() to ceaseless_listener, ceaseless_operator;

-- functions/50_topology_graph.sql, body md5 eb51613cc50df7513847ae0e1a28d4ff
create function ceaseless._tg_loops_graph_validate()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_loops_graph_validate() is 'Before a loop is inserted or its graph is updated: refuse an invalid graph (CE422).';
grant execute on function ceaseless._tg_loops_graph_validate() to ceaseless_listener, ceaseless_operator;

-- functions/05_secrets.sql (generated by _install_quiet_checks), body md5 e9f6e8b4a67f4b5c5bf83001d530dd06
create function ceaseless._tg_loops_quiet_checks()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_loops_quiet_checks() is 'Before INSERT/UPDATE on loops: raise NOT NULL and CHECK violations without printing the row, which may hold secrets (generated by _install_quiet_checks).';
grant execute on function ceaseless._tg_loops_quiet_checks() to ceaseless_listener, ceaseless_operator;

-- functions/55_loop_validation.sql, body md5 73b1540a98b88943a24e8d00c9d1e6d6
create function ceaseless._tg_loops_schedule()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_loops_schedule() is 'After a loop is inserted or updated: NOTIFY ceaseless_schedule when it needs a next_fire_at; start the next iteration of an on_completion loop that was re-enabled with none live.';
grant execute on function ceaseless._tg_loops_schedule() to ceaseless_listener, ceaseless_operator;

-- functions/55_loop_validation.sql, body md5 08d45267023ade013754dbbe74d6d552
create function ceaseless._tg_loops_validate()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_loops_validate() is 'Before INSERT/UPDATE on loops: validate the configuration, fill defaults (workspace, creator, timezone), generate / keep / clear the webhook credential, reset a stopped loop''s policy count on re-enable, and clear next_fire_at whenever the schedule may have changed.';
grant execute on function ceaseless._tg_loops_validate() to ceaseless_listener, ceaseless_operator;

-- functions/60_notifications.sql, body md5 e000b1619eeb048cfba7f4aeb17b8aa6
create function ceaseless._tg_notifications_insert()
    returns trigger
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_notifications_insert() is 'After INSERT on notifications: NOTIFY ceaseless_notification once per statement with {count}.';
grant execute on function ceaseless._tg_notifications_insert() to ceaseless_listener, ceaseless_operator;

-- functions/94_metrics.sql, body md5 d258be8c1bfe3283d588041cdf523978
create function ceaseless._tg_notifications_update_metrics()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_notifications_update_metrics() is 'After UPDATE on notifications: count rows that became delivered or failed, by channel.';
grant execute on function ceaseless._tg_notifications_update_metrics() to ceaseless_listener, ceaseless_operator;

-- functions/44_routine_outcomes.sql, body md5 491be9bb84d2ea9c9c7f0c2af7d9891a
create function ceaseless._tg_routine_runs_deleted()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_routine_runs_deleted() is 'After routine_runs rows are deleted: take their running ones off the running count.';
grant execute on function ceaseless._tg_routine_runs_deleted() to ceaseless_listener, ceaseless_operator;

-- functions/33_held_fires.sql, body md5 c3ff53a524aca8bf345d7d035d12ad70
create function ceaseless._tg_routine_runs_held_wake()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_routine_runs_held_wake() is 'After routine runs end: NOTIFY ceaseless_schedule {table: held_fires, id: routine} for each of their routines that has held fires, so a listener calls fire_held.';
grant execute on function ceaseless._tg_routine_runs_held_wake() to ceaseless_listener, ceaseless_operator;

-- functions/44_routine_outcomes.sql, body md5 de26f6f8c934e650abca16ee0f20208a
create function ceaseless._tg_routine_runs_insert()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_routine_runs_insert() is 'After INSERT on routine_runs: move the running count, audit each run, NOTIFY ceaseless_run once per status.';
grant execute on function ceaseless._tg_routine_runs_insert() to ceaseless_listener, ceaseless_operator;

-- functions/94_metrics.sql, body md5 0f661cdba6948ee8a5c5353941260e2a
create function ceaseless._tg_routine_runs_insert_metrics()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_routine_runs_insert_metrics() is 'After INSERT on routine_runs: count fires by trigger, and refused fires by routine, trigger and reason.';
grant execute on function ceaseless._tg_routine_runs_insert_metrics() to ceaseless_listener, ceaseless_operator;

-- functions/44_routine_outcomes.sql, body md5 49c21eb4244c859d5655e2e7b3454601
create function ceaseless._tg_routine_runs_update()
    returns trigger
    language plpgsql
    volatile
    security definer
    set enable_nestloop = off
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_routine_runs_update() is 'After UPDATE on routine_runs: move the running count, audit status changes, NOTIFY ceaseless_run once per new status.';
grant execute on function ceaseless._tg_routine_runs_update() to ceaseless_listener, ceaseless_operator;

-- functions/94_metrics.sql, body md5 59d7790e973a47bbf11713ed5097c15b
create function ceaseless._tg_routine_runs_update_metrics()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_routine_runs_update_metrics() is 'After UPDATE on routine_runs: count runs that became skipped, by routine, trigger and reason.';
grant execute on function ceaseless._tg_routine_runs_update_metrics() to ceaseless_listener, ceaseless_operator;

-- functions/40_routine_validation.sql, body md5 155402e0ced542220634f2cb0fddd3b2
create function ceaseless._tg_routines_changed()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_routines_changed() is 'After a routine changes: NOTIFY ceaseless_schedule when it needs a next_fire_at; audit operator-visible changes.';
grant execute on function ceaseless._tg_routines_changed() to ceaseless_listener, ceaseless_operator;

-- functions/05_secrets.sql (generated by _install_quiet_checks), body md5 ef806e0f61e502202225de98cf5189ee
create function ceaseless._tg_routines_quiet_checks()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_routines_quiet_checks() is 'Before INSERT/UPDATE on routines: raise NOT NULL and CHECK violations without printing the row, which may hold secrets (generated by _install_quiet_checks).';
grant execute on function ceaseless._tg_routines_quiet_checks() to ceaseless_listener, ceaseless_operator;

-- functions/40_routine_validation.sql, body md5 018aeed4e592c0eaca5314e7ff88ddf4
create function ceaseless._tg_routines_validate()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_routines_validate() is 'Before INSERT/UPDATE on routines: validate the configuration, fill defaults, and clear next_fire_at whenever the schedule may have changed.';
grant execute on function ceaseless._tg_routines_validate() to ceaseless_listener, ceaseless_operator;

-- functions/13_default_agent.sql, body md5 6e4660a929f50cc2e9c8b1e29eb48d91
create function ceaseless._tg_settings_default_agent()
    returns trigger
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_settings_default_agent() is 'Before INSERT/UPDATE of the default_agent setting: JSON null or a registered agent''s name (CE422 otherwise).';
grant execute on function ceaseless._tg_settings_default_agent() to ceaseless_listener, ceaseless_operator;

-- functions/05_secrets.sql (generated by _install_quiet_checks), body md5 c451d596d59c2652e1dedb7d2aa0a842
create function ceaseless._tg_settings_quiet_checks()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_settings_quiet_checks() is 'Before INSERT/UPDATE on settings: raise NOT NULL and CHECK violations without printing the row, which may hold secrets (generated by _install_quiet_checks).';
grant execute on function ceaseless._tg_settings_quiet_checks() to ceaseless_listener, ceaseless_operator;

-- functions/03_settings.sql, body md5 48c8c80cc5420ea33853135cf5770f92
create function ceaseless._tg_settings_validate()
    returns trigger
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_settings_validate() is 'Before INSERT/UPDATE on settings: a numeric setting must be an integer within its range (_setting_range), forge_token_source must have its shape (_forge_token_source_problem); CE422 names the key, the rule and (numeric settings) the value.';
grant execute on function ceaseless._tg_settings_validate() to ceaseless_listener, ceaseless_operator;

-- functions/25_notify_audit.sql, body md5 acc2a2429e96eedb6a748e6b06f58cb8
create function ceaseless._tg_topology_nodes_changed()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_topology_nodes_changed() is 'After a topology node changes state: audit it (entity topology_node, the run''s id, the node in detail) and NOTIFY ceaseless_run.';
grant execute on function ceaseless._tg_topology_nodes_changed() to ceaseless_listener, ceaseless_operator;

-- functions/25_notify_audit.sql, body md5 f83ea08bcc9c41f91fa47fc533dd939c
create function ceaseless._tg_topology_runs_changed()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_topology_runs_changed() is 'After a topology run is inserted or changes status: audit it and NOTIFY ceaseless_run.';
grant execute on function ceaseless._tg_topology_runs_changed() to ceaseless_listener, ceaseless_operator;

-- functions/33_held_fires.sql, body md5 c67b9c8452543365ee83c90d3d34ab24
create function ceaseless._tg_topology_runs_held_wake()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_topology_runs_held_wake() is 'After a loop iteration ends: NOTIFY ceaseless_schedule {table: held_fires, id: loop} when the loop has held fires, so a listener calls fire_held.';
grant execute on function ceaseless._tg_topology_runs_held_wake() to ceaseless_listener, ceaseless_operator;

-- functions/94_metrics.sql, body md5 15f0b7b4717f4606027f37ecf2bf3385
create function ceaseless._tg_topology_runs_insert_metrics()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_topology_runs_insert_metrics() is 'After INSERT on topology_runs: count loop iterations inserted already ended (skipped), and refused fires by loop, trigger and reason.';
grant execute on function ceaseless._tg_topology_runs_insert_metrics() to ceaseless_listener, ceaseless_operator;

-- functions/56_loop_firing.sql, body md5 4e2976c27a49b2b37498c6b067d40e93
create function ceaseless._tg_topology_runs_loop_lock()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_topology_runs_loop_lock() is 'Before a run of a loop (not a skipped one) is inserted: refuse it unless _fire_loop inserts it (CE422), and hold its loop, so every insert of an iteration follows the loops'' lock order.';
grant execute on function ceaseless._tg_topology_runs_loop_lock() to ceaseless_listener, ceaseless_operator;

-- functions/56_loop_firing.sql, body md5 ae95a2110cde15d1c67d3ffcd1694dab
create function ceaseless._tg_topology_runs_loop_outcome()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_topology_runs_loop_outcome() is 'After a loop iteration''s status becomes succeeded, failed or cancelled: apply the repeat policy and stop the loop (notified) or, with on_completion, fire the next iteration, in the same transaction.';
grant execute on function ceaseless._tg_topology_runs_loop_outcome() to ceaseless_listener, ceaseless_operator;

-- functions/51_topology_runs.sql, body md5 dcee09c32adfd9b47c0c532ea4978bdf
create function ceaseless._tg_topology_runs_start()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_topology_runs_start() is 'After a topology run is inserted pending: create its nodes, mark it running and start every node without upstreams.';
grant execute on function ceaseless._tg_topology_runs_start() to ceaseless_listener, ceaseless_operator;

-- functions/94_metrics.sql, body md5 9644796984f03ad52a3fb08d85df90d2
create function ceaseless._tg_topology_runs_update_metrics()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_topology_runs_update_metrics() is 'After UPDATE on topology_runs: count loop iterations that just ended, by final status.';
grant execute on function ceaseless._tg_topology_runs_update_metrics() to ceaseless_listener, ceaseless_operator;

-- functions/50_topology_graph.sql, body md5 a5b2ee4b2c1185aef2f8c1a7037926b7
create function ceaseless._tg_topology_runs_validate()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_topology_runs_validate() is 'Before a topology run is inserted: refuse an invalid graph, an oversized task or a state other than pending or skipped (CE422), and fill the default workspace; before an update: refuse a change of the graph.';
grant execute on function ceaseless._tg_topology_runs_validate() to ceaseless_listener, ceaseless_operator;

-- functions/70_tracked_repo.sql, body md5 7dd55711058dbb6e1b76081f19ae61b9
create function ceaseless._tg_tracked_repo_validate()
    returns trigger
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._tg_tracked_repo_validate() is 'Before INSERT/UPDATE on tracked_repo: validate the configuration in full (CE422 naming field, rule and value) and fill api_url''s default; tokens_allowed is false on a row a user role writes or retargets; a shorter interval brings next_poll_at forward; poll bookkeeping alone is not re-checked.';
grant execute on function ceaseless._tg_tracked_repo_validate() to ceaseless_listener, ceaseless_operator;

-- functions/30_cron.sql, body md5 e652284f5cc442d6c8e1560e01a45280
create function ceaseless._timezone_error(p_timezone text)
    returns text
    language sql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._timezone_error(p_timezone text) is 'NULL when p_timezone is an IANA time zone name the server knows (exact case), else why not; never raises.';
grant execute on function ceaseless._timezone_error(p_timezone text) to ceaseless_listener, ceaseless_operator;

-- functions/51_topology_runs.sql, body md5 045254253e47a6ecd36f3a555f6c1faa
create function ceaseless._topology_cut(p_text text, p_chars integer)
    returns text
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._topology_cut(p_text text, p_chars integer) is 'p_text cut to p_chars characters, followed by a marker naming how many were cut.';
grant execute on function ceaseless._topology_cut(p_text text, p_chars integer) to ceaseless_listener, ceaseless_operator;

-- functions/51_topology_runs.sql, body md5 f2b3607465f31ecdc9cb9b053d151f61
create function ceaseless._topology_graph_order(p_graph jsonb)
    returns TABLE(node_id text, at bigint)
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._topology_graph_order(p_graph jsonb) is 'The node ids of a topology graph with their 1-based position in its nodes array.';
grant execute on function ceaseless._topology_graph_order(p_graph jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/51_topology_runs.sql, body md5 66896ccfb019661a4d26217e25cd421e
create function ceaseless._topology_jobs_changed(p_job_ids uuid[])
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._topology_jobs_changed(p_job_ids uuid[]) is 'Move the nodes of these loop_node jobs as their jobs moved (running, queued, blocked, succeeded, failed), start the nodes a success unblocks, and settle their runs.';
grant execute on function ceaseless._topology_jobs_changed(p_job_ids uuid[]) to ceaseless_listener, ceaseless_operator;

-- functions/50_topology_graph.sql, body md5 0f4c48b22d94e936b1e4b1b3a16aaced
create function ceaseless._topology_node_id_ok(p_id jsonb)
    returns boolean
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._topology_node_id_ok(p_id jsonb) is 'True for a JSON string that may be a topology node id: 1-64 of A-Z a-z 0-9 _ . -.';
grant execute on function ceaseless._topology_node_id_ok(p_id jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/51_topology_runs.sql, body md5 add7e0217259c82104de1cd4cdd49cbc
create function ceaseless._topology_node_output(p_state text, p_output text, p_chars integer)
    returns text
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._topology_node_output(p_state text, p_output text, p_chars integer) is 'A node''s output as downstream prompts and final messages show it: cut to p_chars (NULL: whole), or "(skipped: its approval expired)" for a skipped node.';
grant execute on function ceaseless._topology_node_output(p_state text, p_output text, p_chars integer) to ceaseless_listener, ceaseless_operator;

-- functions/51_topology_runs.sql, body md5 21e32c4f98b41880013554d773860bd9
create function ceaseless._topology_node_prompt(p_run_id uuid, p_node_id text)
    returns text
    language plpgsql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._topology_node_prompt(p_run_id uuid, p_node_id text) is 'The prompt of a node''s job: its prompt, "## Task" and the run''s task, then "## Output of <node>" and each upstream''s output cut to topology_upstream_chars (a skipped one says so); within the job prompt cap.';
grant execute on function ceaseless._topology_node_prompt(p_run_id uuid, p_node_id text) to ceaseless_listener, ceaseless_operator;

-- functions/51_topology_runs.sql, body md5 d85117899c0c885b192f18ff62b883e2
create function ceaseless._topology_node_state_of(p_job_state text)
    returns text
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._topology_node_state_of(p_job_state text) is 'The live node state a loop_node job''s state implies (queued, running, blocked), else ''ended''.';
grant execute on function ceaseless._topology_node_state_of(p_job_state text) to ceaseless_listener, ceaseless_operator;

-- functions/51_topology_runs.sql, body md5 ff1a724394f5df66df25df258fe61872
create function ceaseless._topology_run_for(p_verb text, p_run_id uuid)
    returns ceaseless.topology_runs
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._topology_run_for(p_verb text, p_run_id uuid) is 'The topology run, locked FOR NO KEY UPDATE, when the caller owns it or acts for everyone; CE404 naming p_verb otherwise (ownership read before the lock).';
grant execute on function ceaseless._topology_run_for(p_verb text, p_run_id uuid) to ceaseless_listener, ceaseless_operator;

-- functions/41_fire_admission.sql, body md5 54dfd6b43eef2c445409340f767dc025
create function ceaseless._transaction_state()
    returns ceaseless.transaction_state
    language plpgsql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._transaction_state() is 'This transaction''s transaction_state row (what the engine remembers within it), or NULLs.';
grant execute on function ceaseless._transaction_state() to ceaseless_listener, ceaseless_operator;

-- functions/00_helpers.sql, body md5 618e84413b54d2bd8b596ef8f6ead4ad
create function ceaseless._trim_blank(p_value text)
    returns text
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._trim_blank(p_value text) is 'p_value without leading and trailing Unicode whitespace (the characters _is_blank counts).';
grant execute on function ceaseless._trim_blank(p_value text) to ceaseless_listener, ceaseless_operator;

-- functions/00_helpers.sql, body md5 e3eb577d9688e81aecb9abd35048c6c6
create function ceaseless._unknown_key(p_object jsonb, p_known text[])
    returns text
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._unknown_key(p_object jsonb, p_known text[]) is 'The first key (in key order) of the JSON object p_object that p_known does not list, or NULL.';
grant execute on function ceaseless._unknown_key(p_object jsonb, p_known text[]) to ceaseless_listener, ceaseless_operator;

-- functions/00_helpers.sql, body md5 7a87367db65f83d2d945a33a530ee8f4
create function ceaseless._update_of_all_but(p_table regclass, p_bookkeeping text[])
    returns text
    language plpgsql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._update_of_all_but(p_table regclass, p_bookkeeping text[]) is 'The columns of p_table not in p_bookkeeping, quoted and comma-separated: an UPDATE OF list.';
grant execute on function ceaseless._update_of_all_but(p_table regclass, p_bookkeeping text[]) to ceaseless_listener, ceaseless_operator;

-- functions/05_secrets.sql, body md5 bf55c8fc009e9b4a8c0ef6ab78f7e2d6
create function ceaseless._url_origin(p_url text)
    returns text
    language sql
    immutable
    parallel safe
    set search_path = pg_catalog, pg_temp;
comment on function ceaseless._url_origin(p_url text) is 'scheme://host[:port] of a URL, without the userinfo, path and query that may hold credentials.';
grant execute on function ceaseless._url_origin(p_url text) to ceaseless_listener, ceaseless_operator;

-- functions/50_topology_graph.sql, body md5 ca2c4af60db57df8f48f7e929984785e
create function ceaseless._validate_topology_graph(p_where text, p_graph jsonb)
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._validate_topology_graph(p_where text, p_graph jsonb) is 'Raise CE422 unless p_graph is a valid topology graph (shape, known agents, unique safe ids, bounded prompts and size, edges between known nodes, acyclic), naming the culprit.';
grant execute on function ceaseless._validate_topology_graph(p_where text, p_graph jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/31_trigger_validation.sql, body md5 0ad6d258cbd3eed45fe706706c122a28
create function ceaseless._validated_event(p_object text, p_config jsonb)
    returns jsonb
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._validated_event(p_object text, p_config jsonb) is 'Check an event trigger where routines and loops share the rules (a bounded pattern without back-references; a channel name or null), CE422 naming the field; returns it with its channel written out.';
grant execute on function ceaseless._validated_event(p_object text, p_config jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/55_loop_validation.sql, body md5 e874957e7fb34c5caf5a3392a2895e9d
create function ceaseless._validated_loop(p_row ceaseless.loops)
    returns ceaseless.loops
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._validated_loop(p_row ceaseless.loops) is 'Validate a loop''s title, description, task_template, triggers and repeat_policy (CE422 naming field, rule, value) and fill their defaults.';
grant execute on function ceaseless._validated_loop(p_row ceaseless.loops) to ceaseless_listener, ceaseless_operator;

-- functions/70_tracked_repo.sql, body md5 70f6300c8d1376e4a428512597cc8781
create function ceaseless._validated_repo(p_row ceaseless.tracked_repo)
    returns ceaseless.tracked_repo
    language plpgsql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._validated_repo(p_row ceaseless.tracked_repo) is 'Check a tracked repo in full and fill api_url''s default (GitHub''s); raises CE422 naming the field, the rule and the value at the first bad one.';
grant execute on function ceaseless._validated_repo(p_row ceaseless.tracked_repo) to ceaseless_listener, ceaseless_operator;

-- functions/40_routine_validation.sql, body md5 616d34c8e32869e14281721b2709b99e
create function ceaseless._validated_routine(p_row ceaseless.routines)
    returns ceaseless.routines
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._validated_routine(p_row ceaseless.routines) is 'Validate a routine''s trigger_config and action_config (CE422 naming field, rule, value) and fill their defaults.';
grant execute on function ceaseless._validated_routine(p_row ceaseless.routines) to ceaseless_listener, ceaseless_operator;

-- functions/31_trigger_validation.sql, body md5 e15dffe40049d6dee6160affab20b228
create function ceaseless._validated_trigger(p_object text, p_config jsonb, p_schedule_key text, p_cron boolean, p_scheme_key text)
    returns jsonb
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._validated_trigger(p_object text, p_config jsonb, p_schedule_key text, p_cron boolean, p_scheme_key text) is 'Check a trigger object where routines and loops share the rules (cron schedule: not blank, bounded, accepted by the cron gate; timezone: IANA, UTC when absent; webhook scheme), CE422 naming the field; returns the object with its defaults filled.';
grant execute on function ceaseless._validated_trigger(p_object text, p_config jsonb, p_schedule_key text, p_cron boolean, p_scheme_key text) to ceaseless_listener, ceaseless_operator;

-- functions/36_webhooks.sql, body md5 fb371b3f8f43893370ce43a36a47983c
create function ceaseless._webhook_body_text(p_body bytea)
    returns text
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._webhook_body_text(p_body bytea) is 'A webhook body as text: UTF-8 as it is, anything else as \x and hex.';
grant execute on function ceaseless._webhook_body_text(p_body bytea) to ceaseless_listener, ceaseless_operator;

-- functions/35_webhook_schemes.sql, body md5 708168e7ad86bb0c95811ee1bb9967cf
create function ceaseless._webhook_ceaseless_headers(p_signature text, p_sent_at timestamp with time zone)
    returns jsonb
    language sql
    immutable
    set search_path = pg_catalog, pg_temp;
comment on function ceaseless._webhook_ceaseless_headers(p_signature text, p_sent_at timestamp with time zone) is 'The X-Ceaseless-Signature and X-Ceaseless-Timestamp headers for a signature and time given apart (the four-argument receive_webhook).';
grant execute on function ceaseless._webhook_ceaseless_headers(p_signature text, p_sent_at timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/35_webhook_schemes.sql, body md5 1674e0d17384754e2694c57524ac73e2
create function ceaseless._webhook_check_time(p_header text, p_value text, p_now timestamp with time zone, p_window interval)
    returns timestamp with time zone
    language plpgsql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._webhook_check_time(p_header text, p_value text, p_now timestamp with time zone, p_window interval) is 'The signed timestamp of a webhook header, refused with CE403 when malformed or further than the window from now.';
grant execute on function ceaseless._webhook_check_time(p_header text, p_value text, p_now timestamp with time zone, p_window interval) to ceaseless_listener, ceaseless_operator;

-- functions/35_webhook_schemes.sql, body md5 51eb7a0a62a19f89116734947138c6aa
create function ceaseless._webhook_header_names()
    returns text[]
    language sql
    immutable
    parallel safe
    set search_path = pg_catalog, pg_temp;
comment on function ceaseless._webhook_header_names() is 'The request headers (lower case) the webhook schemes read; the HTTP ingress passes exactly these to _receive_webhook.';
grant execute on function ceaseless._webhook_header_names() to ceaseless_listener, ceaseless_operator;

-- functions/35_webhook_schemes.sql, body md5 61f629e2c3d8dad909636ca050bada42
create function ceaseless._webhook_headers(p_headers jsonb)
    returns jsonb
    language sql
    immutable
    set search_path = pg_catalog, pg_temp;
comment on function ceaseless._webhook_headers(p_headers jsonb) is 'Request headers as a jsonb object with lower-case names and string values only.';
grant execute on function ceaseless._webhook_headers(p_headers jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/35_webhook_schemes.sql, body md5 1c06ae439c1d1f29e9bbd4b9ecb1d7ac
create function ceaseless._webhook_matching(p_expected bytea, p_candidates bytea[])
    returns integer
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._webhook_matching(p_expected bytea, p_candidates bytea[]) is 'The position of the first of up to 16 candidate signatures equal to the expected digest (each compared in constant time), or NULL.';
grant execute on function ceaseless._webhook_matching(p_expected bytea, p_candidates bytea[]) to ceaseless_listener, ceaseless_operator;

-- functions/35_webhook_schemes.sql, body md5 3dbbf272f25c39b9cd34a6795c4e262a
create function ceaseless._webhook_new_key(p_scheme text)
    returns text
    language sql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._webhook_new_key(p_scheme text) is 'A fresh random webhook secret in its scheme''s form: 64 hex characters, or whsec_ and base64 for standard; a loop''s token and signing key.';
grant execute on function ceaseless._webhook_new_key(p_scheme text) to ceaseless_listener, ceaseless_operator;

-- functions/35_webhook_schemes.sql, body md5 e0dba43812462207a0786c2fdf234a37
create function ceaseless._webhook_remember(p_target text, p_target_id uuid, p_keys text[], p_sent_at timestamp with time zone, p_now timestamp with time zone, p_window interval)
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._webhook_remember(p_target text, p_target_id uuid, p_keys text[], p_sent_at timestamp with time zone, p_now timestamp with time zone, p_window interval) is 'Record a verified webhook request''s replay keys for the window; CE413 when any was seen before (signature_seen_once decides, so racing copies cannot both pass).';
grant execute on function ceaseless._webhook_remember(p_target text, p_target_id uuid, p_keys text[], p_sent_at timestamp with time zone, p_now timestamp with time zone, p_window interval) to ceaseless_listener, ceaseless_operator;

-- functions/35_webhook_schemes.sql, body md5 9f59b8ec00b095fd9ff931b5f131aa9e
create function ceaseless._webhook_scheme_error(p_scheme jsonb)
    returns text
    language sql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._webhook_scheme_error(p_scheme jsonb) is 'Why a webhook scheme value is refused (not one of _webhook_schemes()), or NULL when it is valid or absent.';
grant execute on function ceaseless._webhook_scheme_error(p_scheme jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/35_webhook_schemes.sql, body md5 241a5e99d8aa8910a2ac845c163fcaa9
create function ceaseless._webhook_schemes()
    returns text[]
    language sql
    immutable
    parallel safe
    set search_path = pg_catalog, pg_temp;
comment on function ceaseless._webhook_schemes() is 'The webhook signature schemes a routine or loop may name: ceaseless (the default), github, standard (Standard Webhooks) and stripe.';
grant execute on function ceaseless._webhook_schemes() to ceaseless_listener, ceaseless_operator;

-- functions/35_webhook_schemes.sql, body md5 835c68a231e0300f0359602bfb8f1411
create function ceaseless._webhook_secret_error(p_scheme text, p_secret text)
    returns text
    language plpgsql
    immutable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._webhook_secret_error(p_scheme text, p_secret text) is 'Why a secret cannot sign under a webhook scheme (a standard secret must be whsec_ and base64 of 24 to 64 bytes), or NULL.';
grant execute on function ceaseless._webhook_secret_error(p_scheme text, p_secret text) to ceaseless_listener, ceaseless_operator;

-- functions/36_webhooks.sql, body md5 306816032d3bccb670eae887727f1ee4
create function ceaseless._webhook_token_pattern()
    returns text
    language sql
    immutable
    parallel safe
    set search_path = pg_catalog, pg_temp;
comment on function ceaseless._webhook_token_pattern() is 'The regular expression every webhook token (a routine''s trigger_config.path) matches; the ingress refuses other paths without asking the database.';
grant execute on function ceaseless._webhook_token_pattern() to ceaseless_listener, ceaseless_operator;

-- functions/35_webhook_schemes.sql, body md5 fc3c38c13121c6a3445dcda1358651ad
create function ceaseless._webhook_unix_time(p_value text)
    returns timestamp with time zone
    language sql
    immutable
    set search_path = pg_catalog, pg_temp;
comment on function ceaseless._webhook_unix_time(p_value text) is 'A header''s unix seconds (1 to 11 ASCII digits) as a timestamptz, or NULL for anything else.';
grant execute on function ceaseless._webhook_unix_time(p_value text) to ceaseless_listener, ceaseless_operator;

-- functions/35_webhook_schemes.sql, body md5 2c5c84b5f261a02d132e8f510b2a126a
create function ceaseless._webhook_verify(p_scheme text, p_key text, p_body bytea, p_headers jsonb, p_now timestamp with time zone, p_window interval)
    returns TABLE(replay_keys text[], sent_at timestamp with time zone)
    language plpgsql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._webhook_verify(p_scheme text, p_key text, p_body bytea, p_headers jsonb, p_now timestamp with time zone, p_window interval) is 'Verify a webhook request under its scheme (ceaseless, github, standard, stripe) in constant time; returns the replay keys to remember and the signed time. Raises CE403 (timestamp) or CE401 (signature, id).';
grant execute on function ceaseless._webhook_verify(p_scheme text, p_key text, p_body bytea, p_headers jsonb, p_now timestamp with time zone, p_window interval) to ceaseless_listener, ceaseless_operator;

-- functions/05_secrets.sql, body md5 dc05a8e97c9f9c89a649038f8ec8a6bf
create function ceaseless._without_secrets(p_table text, p_row jsonb)
    returns jsonb
    language sql
    immutable
    parallel safe
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless._without_secrets(p_table text, p_row jsonb) is 'A row (as jsonb) of agents or settings with its secrets hidden, for audit_log.';
grant execute on function ceaseless._without_secrets(p_table text, p_row jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/32_schedules.sql, body md5 3511d325949e098f9f544714b0720fa8
create function ceaseless.backfill_loop(p_loop_id uuid, p_from timestamp with time zone, p_to timestamp with time zone, p_max integer DEFAULT 100, p_now timestamp with time zone DEFAULT now())
    returns TABLE(slot_at timestamp with time zone, outcome text, run_id uuid, status text, skip_reason text)
    language sql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.backfill_loop(p_loop_id uuid, p_from timestamp with time zone, p_to timestamp with time zone, p_max integer, p_now timestamp with time zone) is 'Fire a loop''s cron slots in [p_from, p_to) that never fired (trigger backfill, slot_at its slot), at most p_max; refused as live_iteration while an iteration is live. One row per slot: fired, refused, already_fired or over_max. CE404, CE422.';
grant execute on function ceaseless.backfill_loop(p_loop_id uuid, p_from timestamp with time zone, p_to timestamp with time zone, p_max integer, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/32_schedules.sql, body md5 c552bddbcb1c9eeaf695c9a4c1edebf6
create function ceaseless.backfill_routine(p_routine_id uuid, p_from timestamp with time zone, p_to timestamp with time zone, p_max integer DEFAULT 100, p_now timestamp with time zone DEFAULT now())
    returns TABLE(slot_at timestamp with time zone, outcome text, run_id uuid, status text, skip_reason text)
    language sql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.backfill_routine(p_routine_id uuid, p_from timestamp with time zone, p_to timestamp with time zone, p_max integer, p_now timestamp with time zone) is 'Fire a routine''s cron slots in [p_from, p_to) that never fired (trigger backfill, each run''s slot_at its slot), at most p_max (1..setting backfill_max); one row per slot: fired, refused (with the skip reason), already_fired or over_max. CE404, CE422.';
grant execute on function ceaseless.backfill_routine(p_routine_id uuid, p_from timestamp with time zone, p_to timestamp with time zone, p_max integer, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/10_jobs.sql, body md5 9932c9488b40dfe68f8c2ea68b1390db
create function ceaseless.cancel_job(p_job_id uuid, p_now timestamp with time zone DEFAULT now())
    returns void
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.cancel_job(p_job_id uuid, p_now timestamp with time zone) is 'Cancel a pending, claimed, running or blocked job; a running agent is stopped by its listener. Raises CE404 (unknown) or CE409 (already finished).';
grant execute on function ceaseless.cancel_job(p_job_id uuid, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/51_topology_runs.sql, body md5 954dd3d23dd705823007188e8a140a30
create function ceaseless.cancel_orphaned_topology_jobs(p_now timestamp with time zone DEFAULT now())
    returns integer
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.cancel_orphaned_topology_jobs(p_now timestamp with time zone) is 'Cancel live jobs whose topology run has ended (skipped by the run''s end because another statement held them); returns how many. Maintenance, every listener.';
grant execute on function ceaseless.cancel_orphaned_topology_jobs(p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/51_topology_runs.sql, body md5 ed043c2ff53226eaaea7c2ffad7d8400
create function ceaseless.cancel_topology_run(p_run_id uuid, p_now timestamp with time zone DEFAULT now())
    returns void
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.cancel_topology_run(p_run_id uuid, p_now timestamp with time zone) is 'Cancel a live topology run: unfinished nodes and live jobs cancelled (running agents stopped), open approvals left undecided. Raises CE404 (unknown) or CE409 (already ended).';
grant execute on function ceaseless.cancel_topology_run(p_run_id uuid, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/30_cron.sql, body md5 46a4ac981003599ed884c93a946abd61
create function ceaseless.check_schedule(p_schedule text, p_timezone text DEFAULT 'UTC'::text)
    returns void
    language plpgsql
    stable
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.check_schedule(p_schedule text, p_timezone text) is 'Check a cron schedule and time zone as routines and loops are checked (NULL time zone: UTC); raises CE422 naming the field, the rule and the value, returns nothing when valid.';
grant execute on function ceaseless.check_schedule(p_schedule text, p_timezone text) to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/73_forge_children.sql, body md5 3df29a6273499be7e5e4b8ab9da554ba
create function ceaseless.child_issue_failed(p_id uuid, p_error text, p_now timestamp with time zone DEFAULT now())
    returns timestamp with time zone
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.child_issue_failed(p_id uuid, p_error text, p_now timestamp with time zone) is 'Record a failed creation of a child issue and return when it is tried again.';
grant execute on function ceaseless.child_issue_failed(p_id uuid, p_error text, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/73_forge_children.sql, body md5 97aeb831d85cfb51db9670a130eb44ae
create function ceaseless.child_issues_due(p_limit integer DEFAULT 10, p_now timestamp with time zone DEFAULT now())
    returns SETOF ceaseless.forge_child_issue
    language sql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.child_issues_due(p_limit integer, p_now timestamp with time zone) is 'Hand out up to p_limit child issues not yet created on the forge, each to one caller (SKIP LOCKED), counting the attempt and moving next_attempt_at 5 minutes on.';
grant execute on function ceaseless.child_issues_due(p_limit integer, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/10_jobs.sql, body md5 43e27fb74c02221ce7eb3c89df87ff7a
create function ceaseless.claim_jobs(p_worker text, p_limit integer, p_kinds text[] DEFAULT NULL::text[], p_agents text[] DEFAULT NULL::text[], p_now timestamp with time zone DEFAULT now(), p_lease_secs integer DEFAULT NULL::integer, p_start boolean DEFAULT false)
    returns TABLE(id uuid, kind text, agent text, prompt text, payload jsonb, max_turns integer, resume_session_id text, attempts integer, claim_expires_at timestamp with time zone, run_id uuid, reply text, budget_usd numeric, budget_tokens bigint)
    language plpgsql
    volatile
    set enable_seqscan = off
    set jit = off
    set plan_cache_mode = force_generic_plan
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.claim_jobs(p_worker text, p_limit integer, p_kinds text[], p_agents text[], p_now timestamp with time zone, p_lease_secs integer, p_start boolean) is 'Claim up to p_limit due pending jobs for listener p_worker in each lane''s order (fifo: highest priority, then due first; round_robin: owners and their fairness keys in turn), admitting each through its lane''s governor (max_concurrent, window_budget, window_cost_usd, window_tokens, lane_pauses) and its owner''s spend budget (owner_budgets) atomically; with p_start, open their agent runs too and return run_id.';
grant execute on function ceaseless.claim_jobs(p_worker text, p_limit integer, p_kinds text[], p_agents text[], p_now timestamp with time zone, p_lease_secs integer, p_start boolean) to ceaseless_listener, ceaseless_operator;

-- functions/60_notifications.sql, body md5 3a559df4a363db1dd537077a245a8565
create function ceaseless.claim_notifications(p_worker text, p_limit integer, p_now timestamp with time zone DEFAULT now())
    returns TABLE(id uuid, state text, attempts integer, sink_name text, sink jsonb, kind text, subject text, body text, recipient text, source_table text, source_id uuid, created_at timestamp with time zone, last_error text)
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.claim_notifications(p_worker text, p_limit integer, p_now timestamp with time zone) is 'Claim up to p_limit due pending notifications for listener p_worker. pg sinks are notified and marked delivered here, unknown or malformed sinks failed; the rest return as state ''claimed'' with their sink config, leased for 60 s (at-least-once: an unreported claim comes due again).';
grant execute on function ceaseless.claim_notifications(p_worker text, p_limit integer, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/52_approvals.sql, body md5 159f1e3f21edc962b7847e0d390ba115
create function ceaseless.decide_approval(p_approval_id uuid, p_approve boolean, p_decided_by text, p_note text, p_now timestamp with time zone DEFAULT now())
    returns void
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.decide_approval(p_approval_id uuid, p_approve boolean, p_decided_by text, p_note text, p_now timestamp with time zone) is 'Approve (the node''s job is enqueued) or reject (the node and its run fail) a pending approval. Raises CE404 (unknown), CE409 (already decided, or its run ended), CE422.';
grant execute on function ceaseless.decide_approval(p_approval_id uuid, p_approve boolean, p_decided_by text, p_note text, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/32_schedules.sql, body md5 ccb757fcb90f0e3c3c89ba3a7d5cbdb0
create function ceaseless.disable_schedule(p_kind text, p_id uuid, p_error text)
    returns void
    language sql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.disable_schedule(p_kind text, p_id uuid, p_error text) is 'Disable a routine or loop the engine cannot run, recording the error in last_error.';
grant execute on function ceaseless.disable_schedule(p_kind text, p_id uuid, p_error text) to ceaseless_listener, ceaseless_operator;

-- functions/70_tracked_repo.sql, body md5 d4d96e6b678d89aa0d1a6cf318d1bea1
create function ceaseless.due_repos(p_now timestamp with time zone DEFAULT now(), p_limit integer DEFAULT 10)
    returns SETOF ceaseless.tracked_repo
    language sql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.due_repos(p_now timestamp with time zone, p_limit integer) is 'Hand out up to p_limit enabled repos due at p_now and outside their quiet window, each to one caller only (SKIP LOCKED), moving their next_poll_at one clamped interval on.';
grant execute on function ceaseless.due_repos(p_now timestamp with time zone, p_limit integer) to ceaseless_listener, ceaseless_operator;

-- functions/32_schedules.sql, body md5 156b8dac058021c45e99781d7f40f8a2
create function ceaseless.due_schedules(p_now timestamp with time zone, p_limit integer)
    returns TABLE(kind text, id uuid, schedule text, timezone text, next_fire_at timestamp with time zone)
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.due_schedules(p_now timestamp with time zone, p_limit integer) is 'Lock and return up to p_limit routines due at p_now, or when none is, up to p_limit loops (FOR NO KEY UPDATE SKIP LOCKED); fire them with fire_cron in the same transaction.';
grant execute on function ceaseless.due_schedules(p_now timestamp with time zone, p_limit integer) to ceaseless_listener, ceaseless_operator;

-- functions/10_jobs.sql, body md5 1624447290fa8929afab906ce2aee682
create function ceaseless.ended_jobs(p_ids uuid[])
    returns SETOF uuid
    language sql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.ended_jobs(p_ids uuid[]) is 'Of p_ids, the jobs of this database that will not run again (delivered, failed, abandoned, cancelled): listeners remove their working directories.';
grant execute on function ceaseless.ended_jobs(p_ids uuid[]) to ceaseless_listener, ceaseless_operator;

-- functions/52_approvals.sql, body md5 f638fe33191f69b969a567064f8125b4
create function ceaseless.expire_approvals(p_now timestamp with time zone DEFAULT now())
    returns integer
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.expire_approvals(p_now timestamp with time zone) is 'Decide undecided approvals past expires_at by their node''s on_expiry (expired, failing the run; expired, skipping the node; or approved, running the node), and send the reminders due; returns how many expired. Maintenance, every listener.';
grant execute on function ceaseless.expire_approvals(p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/10_jobs.sql, body md5 894f8c53f7f75ba7d1dfed5e7eeaa7de
create function ceaseless.expire_leases(p_now timestamp with time zone DEFAULT now())
    returns integer
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.expire_leases(p_now timestamp with time zone) is 'Return jobs with passed leases to pending (or abandoned after max attempts) and finish their open runs as lease_expired. Safe to call from every listener at once.';
grant execute on function ceaseless.expire_leases(p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/92_explain.sql, body md5 20fd69d6c785a5bb84ba551c41687e55
create function ceaseless.explain_job(p_job_id uuid, p_now timestamp with time zone DEFAULT now())
    returns TABLE(reason text, detail text, clears_at timestamp with time zone)
    language plpgsql
    stable
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.explain_job(p_job_id uuid, p_now timestamp with time zone) is 'Every reason that holds a job (not_due, owner_budget, agent_disabled, lane_paused, lane_full, window_budget, cost_budget, token_budget, behind_older_jobs, behind_other_turns; or claimed, running, finished), one row each with the time it clears when known; ''ready'' when nothing does. CE404 for an unknown job.';
grant execute on function ceaseless.explain_job(p_job_id uuid, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/92_explain.sql, body md5 0edb994025724a009249076037ed17e5
create function ceaseless.explain_loop(p_loop_id uuid, p_now timestamp with time zone DEFAULT now())
    returns TABLE(reason text, detail text, clears_at timestamp with time zone)
    language plpgsql
    stable
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.explain_loop(p_loop_id uuid, p_now timestamp with time zone) is 'Every reason that holds a loop''s next iteration (its held fires: buffered, debounced; stopped, disabled, agent_disabled, min_interval, live_iteration and what holds it: awaiting_approval, its nodes'' jobs; not_scheduled, not_due), one row each with the time it clears when known; ''ready'' when nothing does. CE404 for an unknown loop.';
grant execute on function ceaseless.explain_loop(p_loop_id uuid, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/92_explain.sql, body md5 dda8ed721126e494888187e357b8552d
create function ceaseless.explain_routine(p_routine_id uuid, p_now timestamp with time zone DEFAULT now())
    returns TABLE(reason text, detail text, clears_at timestamp with time zone)
    language plpgsql
    stable
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.explain_routine(p_routine_id uuid, p_now timestamp with time zone) is 'Every reason that holds a routine''s next fire (its held fires: buffered, debounced; disabled, agent_disabled, cooldown, concurrency and the explain_job reasons of each running run''s job, global_cap, not_due, not_scheduled) or its jobs in their lane (lane_paused, lane_full, window_budget, cost_budget, token_budget), one row each with the time it clears when known; ''ready'' when nothing does. CE404 for an unknown routine.';
grant execute on function ceaseless.explain_routine(p_routine_id uuid, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/92_explain.sql, body md5 eb638e801d07fd19e6347f72aa70dcd6
create function ceaseless.explain_topology_run(p_run_id uuid, p_now timestamp with time zone DEFAULT now())
    returns TABLE(reason text, detail text, clears_at timestamp with time zone)
    language plpgsql
    stable
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.explain_topology_run(p_run_id uuid, p_now timestamp with time zone) is 'Every reason that holds a topology run: nodes awaiting approval (clears_at: the approval''s expiry) and the reasons of its nodes'' pending jobs (explain_job), one row each; ''ready'' when nothing does. CE404 for an unknown run.';
grant execute on function ceaseless.explain_topology_run(p_run_id uuid, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/10_jobs.sql, body md5 cf6a96ff8a0f326610189fcda4063470
create function ceaseless.extend_leases(p_worker text, p_job_ids uuid[], p_now timestamp with time zone DEFAULT now(), p_lease_secs integer DEFAULT NULL::integer)
    returns TABLE(job_id uuid, held boolean, renewed boolean)
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.extend_leases(p_worker text, p_job_ids uuid[], p_now timestamp with time zone, p_lease_secs integer) is 'Heartbeat: push the lease of every job p_worker still holds; one row per id says whether it is still held and whether its lease was renewed now.';
grant execute on function ceaseless.extend_leases(p_worker text, p_job_ids uuid[], p_now timestamp with time zone, p_lease_secs integer) to ceaseless_listener, ceaseless_operator;

-- functions/60_notifications.sql, body md5 78952ea15d34b97e7748715b3bc6e199
create function ceaseless.finish_notifications(p_worker text, p_results jsonb, p_now timestamp with time zone DEFAULT now())
    returns TABLE(id uuid, status text, attempts integer, next_attempt_at timestamp with time zone, last_error text)
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.finish_notifications(p_worker text, p_results jsonb, p_now timestamp with time zone) is 'Record delivery results [{id, ok, error?, attempt?}]: ok → delivered; else retry after exponential backoff with jitter, or failed after notification_max_attempts. Stale failures (attempt superseded) and reports on delivered rows are ignored. Returns the rows it changed.';
grant execute on function ceaseless.finish_notifications(p_worker text, p_results jsonb, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/70_tracked_repo.sql, body md5 63b6674f34a46b8fc97d00e96edd1933
create function ceaseless.finish_repo_poll(p_repo_id uuid, p_now timestamp with time zone DEFAULT now(), p_etag text DEFAULT NULL::text, p_error text DEFAULT NULL::text, p_next_poll_at timestamp with time zone DEFAULT NULL::timestamp with time zone)
    returns timestamp with time zone
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.finish_repo_poll(p_repo_id uuid, p_now timestamp with time zone, p_etag text, p_error text, p_next_poll_at timestamp with time zone) is 'Record a poll''s end (last_polled_at, last_etag on success, last_error on failure) and set next_poll_at to one clamped interval later, or to p_next_poll_at when later (rate limits).';
grant execute on function ceaseless.finish_repo_poll(p_repo_id uuid, p_now timestamp with time zone, p_etag text, p_error text, p_next_poll_at timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/20_agent_runs.sql, body md5 60984faa38591829cf9bb6d06269a7f3
create function ceaseless.finish_runs(p_worker text, p_results jsonb, p_now timestamp with time zone DEFAULT now())
    returns TABLE(run_id uuid, job_id uuid, job_state text, recorded boolean, refusal text)
    language plpgsql
    volatile
    set enable_seqscan = off
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.finish_runs(p_worker text, p_results jsonb, p_now timestamp with time zone) is 'Finish a batch of agent runs and move each job by its outcome (_job_state_after: delivered, blocked, cancelled, retry with backoff, failed); a rate limit with a reset time pauses the lane, for at most rate_limit_max_wait_secs; an agent that could not authenticate blocks its job, attempt refunded. A succeeded run gets its verdict first (_forge_verdict: a needs_human block blocks the job, any kind; an implement run without a pull request fails, a plan needs a valid children block); a run that reaches its job''s spend ceiling (max_cost_usd, max_tokens over all its runs) is budget_exhausted. A result for a run that is no longer the reporter''s is kept in late_results, never written onto the closed run (recorded = false).';
grant execute on function ceaseless.finish_runs(p_worker text, p_results jsonb, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/32_schedules.sql, body md5 17f0001b0ce5faf5e380e2aef1710dbe
create function ceaseless.fire_cron(p_kinds text[], p_ids uuid[], p_next_fire_ats timestamp with time zone[], p_missed integer[], p_now timestamp with time zone DEFAULT now())
    returns TABLE(kind text, id uuid, run_id uuid, status text, skip_reason text, next_fire_at timestamp with time zone)
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.fire_cron(p_kinds text[], p_ids uuid[], p_next_fire_ats timestamp with time zone[], p_missed integer[], p_now timestamp with time zone) is 'Fire a batch of due routines and loops the caller locked (due_schedules), each once however many slots it missed; a routine refused for cooldown is deferred to its end, the rest move to the next slot given. CE422 when the arrays differ in length.';
grant execute on function ceaseless.fire_cron(p_kinds text[], p_ids uuid[], p_next_fire_ats timestamp with time zone[], p_missed integer[], p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/33_held_fires.sql, body md5 269d7619c1b483d330a247a7d73e99d5
create function ceaseless.fire_held(p_now timestamp with time zone DEFAULT now(), p_limit integer DEFAULT 1000, p_targets uuid[] DEFAULT NULL::uuid[])
    returns TABLE(held_id uuid, kind text, target_id uuid, run_id uuid, status text, skip_reason text)
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.fire_held(p_now timestamp with time zone, p_limit integer, p_targets uuid[]) is 'Start the due held fires (each target''s first, in order: timed ones due, and those waiting for a run''s end of the targets named, or of all when p_targets is NULL) through the one firing path; one refused again stays held. One caller at a time. Listeners call it when a held fire is due or a run ends.';
grant execute on function ceaseless.fire_held(p_now timestamp with time zone, p_limit integer, p_targets uuid[]) to ceaseless_listener, ceaseless_operator;

-- functions/41_fire_admission.sql, body md5 c56ef8d7f8f9790d2b0b62dd3aa25d50
create function ceaseless.forget_ended_backends()
    returns integer
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.forget_ended_backends() is 'Delete the transaction_state rows of backends that no longer exist; returns how many. Maintenance, every listener.';
grant execute on function ceaseless.forget_ended_backends() to ceaseless_listener, ceaseless_operator;

-- functions/71_forge_issues.sql, body md5 3fe09e02f405b29d1ca34fe82a570421
create function ceaseless.ingest_issues(p_repo_id uuid, p_issues jsonb, p_now timestamp with time zone DEFAULT now())
    returns TABLE(number bigint, kind text, label text, decision text, job_id uuid)
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.ingest_issues(p_repo_id uuid, p_issues jsonb, p_now timestamp with time zone) is 'After a poll: replace the repo''s cached listing with p_issues (NULL after a 304 keeps it) and decide each issue with a work label, creating the jobs due. One row per such issue, with its kind and the label that asks for it: created (job_id) | live | done | cooldown | not_admitted | needs_labeller | no_lane.';
grant execute on function ceaseless.ingest_issues(p_repo_id uuid, p_issues jsonb, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/74_forge_labels.sql, body md5 4adf20acb277208e43db8f120f957f98
create function ceaseless.labels_due(p_limit integer DEFAULT 20, p_now timestamp with time zone DEFAULT now())
    returns TABLE(job_id uuid, forge text, api_url text, owner text, repo text, number bigint, add_label text, remove_label text, job_updated_at timestamp with time zone, tokens_allowed boolean)
    language sql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.labels_due(p_limit integer, p_now timestamp with time zone) is 'Hand out up to p_limit forge jobs whose state label is out of date (add_label, and remove_label: the one written before), each to one caller for 60 s, with whether the repo may use the listener''s tokens.';
grant execute on function ceaseless.labels_due(p_limit integer, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/74_forge_labels.sql, body md5 0fbe92f17a221b086bbc9c0f9b5bc5b7
create function ceaseless.labels_sync_failed(p_job_id uuid, p_error text, p_now timestamp with time zone DEFAULT now())
    returns timestamp with time zone
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.labels_sync_failed(p_job_id uuid, p_error text, p_now timestamp with time zone) is 'Record a failed label sync (labels_error) and retry it in 60 s; the job''s state is not touched.';
grant execute on function ceaseless.labels_sync_failed(p_job_id uuid, p_error text, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/74_forge_labels.sql, body md5 a806613aa13760989e3af8d8f32f37ea
create function ceaseless.labels_synced(p_job_id uuid, p_label text, p_job_updated_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_now timestamp with time zone DEFAULT now())
    returns void
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.labels_synced(p_job_id uuid, p_label text, p_job_updated_at timestamp with time zone, p_now timestamp with time zone) is 'Record that p_label was written on the job''s issue (labels_synced_at); the job''s state is not touched.';
grant execute on function ceaseless.labels_synced(p_job_id uuid, p_label text, p_job_updated_at timestamp with time zone, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/91_run_events.sql, body md5 9bff2c3aa97df51e7d2532acaf9262dc
create function ceaseless.loop_events(p_loop_id uuid, p_after bigint DEFAULT 0, p_limit integer DEFAULT 500)
    returns TABLE(id bigint, event text, data jsonb, last boolean)
    language sql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.loop_events(p_loop_id uuid, p_after bigint, p_limit integer) is 'The events of a loop after audit id p_after, in order (at most p_limit, up to 5000): its own changes (enabled, disabled, stopped, deleted), its iterations'' and skipped fires'' run changes and their nodes'' and approvals''; `last` marks its deletion. What GET /loops/{id}/events streams.';
grant execute on function ceaseless.loop_events(p_loop_id uuid, p_after bigint, p_limit integer) to ceaseless_listener, ceaseless_operator;

-- functions/91_run_events.sql, body md5 73d3ab67270ada19a9e820b0a1cb4152
create function ceaseless.loop_snapshot(p_loop_id uuid)
    returns jsonb
    language sql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.loop_snapshot(p_loop_id uuid) is 'A loop as loop_status shows it (never its webhook credential), its latest iteration as run_snapshot shows it, and last_event_id, the audit id both are current to: what a new follower of GET /loops/{id}/events receives first. NULL when there is no such loop.';
grant execute on function ceaseless.loop_snapshot(p_loop_id uuid) to ceaseless_listener, ceaseless_operator;

-- functions/94_metrics.sql, body md5 96d038ad118316557b3a9ab88fca3173
create function ceaseless.metrics_snapshot(p_now timestamp with time zone DEFAULT now())
    returns TABLE(family text, kind text, help text, sample text, labels jsonb, value double precision)
    language sql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.metrics_snapshot(p_now timestamp with time zone) is 'Every database-wide series of GET /metrics, one row a sample: live queue depth, blocked jobs and lane usage from partial indexes, each routine''s last success, counters from metric_totals + metric_deltas (0 for every label set that can exist), histogram buckets in numeric le order. Reads no history.';
grant execute on function ceaseless.metrics_snapshot(p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/32_schedules.sql, body md5 5f3390786106fb4b5e154f0bd8075e4a
create function ceaseless.next_schedule_fire()
    returns timestamp with time zone
    language sql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.next_schedule_fire() is 'The earliest next_fire_at among enabled routines and loops, or fire_at among held fires, or NULL.';
grant execute on function ceaseless.next_schedule_fire() to ceaseless_listener, ceaseless_operator;

-- functions/71_forge_issues.sql, body md5 5a67fa31e5c021d5730b4595e8946242
create function ceaseless.note_labellers(p_repo_id uuid, p_labellers jsonb, p_now timestamp with time zone DEFAULT now())
    returns TABLE(number bigint, kind text, label text, decision text, job_id uuid)
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.note_labellers(p_repo_id uuid, p_labellers jsonb, p_now timestamp with time zone) is 'Record who added the work labels of listed issues ({"42": {"label": "login"}}) and decide those issues again (same answer as ingest_issues).';
grant execute on function ceaseless.note_labellers(p_repo_id uuid, p_labellers jsonb, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/20_agent_runs.sql, body md5 d23ce42dd8bf1018728d3dc954870ace
create function ceaseless.note_sessions(p_worker text, p_run_ids uuid[], p_session_ids text[])
    returns integer
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.note_sessions(p_worker text, p_run_ids uuid[], p_session_ids text[]) is 'Store the session id each open run of p_worker reported at its start, so a rescued job can resume it; implausible ids are skipped.';
grant execute on function ceaseless.note_sessions(p_worker text, p_run_ids uuid[], p_session_ids text[]) to ceaseless_listener, ceaseless_operator;

-- functions/12_lanes.sql, body md5 c8e00cf1093c252b110b98477df7aaef
create function ceaseless.pause_lane(p_agent text, p_until timestamp with time zone, p_reason text, p_now timestamp with time zone DEFAULT now())
    returns timestamp with time zone
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.pause_lane(p_agent text, p_until timestamp with time zone, p_reason text, p_now timestamp with time zone) is 'Pause a lane until p_until for p_reason (operators and listeners): claims skip it until then; replaces the pause in force; audited as entity lane. CE404 unknown lane, CE422 a blank reason or a past end.';
grant execute on function ceaseless.pause_lane(p_agent text, p_until timestamp with time zone, p_reason text, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/96_retention.sql, body md5 60c11b7c142bc028807a29d88ec78baa
create function ceaseless.prune(p_now timestamp with time zone DEFAULT now(), p_limit integer DEFAULT 10000, p_only text DEFAULT NULL::text, p_dry_run boolean DEFAULT false)
    returns TABLE(kind text, removed bigint)
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.prune(p_now timestamp with time zone, p_limit integer, p_only text, p_dry_run boolean) is 'Remove what is past retention (settings retention_*_secs): up to p_limit rows of each kind (or p_only), oldest first, never a live row or one a live rule reads; one audit row per pass. Returns (kind, removed); no rows when another prune holds the lock. Operators, listeners and the owner; audit rows only for listeners and the owner.';
grant execute on function ceaseless.prune(p_now timestamp with time zone, p_limit integer, p_only text, p_dry_run boolean) to ceaseless_listener, ceaseless_operator;

-- functions/25_notify_audit.sql, body md5 9e9bc72873602deedd8311abd396313b
create function ceaseless.prune_audit_log(p_before timestamp with time zone, p_limit integer DEFAULT 10000)
    returns integer
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.prune_audit_log(p_before timestamp with time zone, p_limit integer) is 'Delete up to p_limit audit_log rows older than p_before (oldest first), which must be at least audit_log_min_retention_secs ago, and audit the prune; returns how many. The only way rows leave the append-only log. CE422 for a cutoff inside the floor.';
grant execute on function ceaseless.prune_audit_log(p_before timestamp with time zone, p_limit integer) to ceaseless_listener;

-- functions/10_jobs.sql, body md5 7aaf1c12c9ff3aa8fe186d13e7630d17
create function ceaseless.raise_job_budget(p_job_id uuid, p_usd numeric, p_tokens bigint DEFAULT NULL::bigint, p_now timestamp with time zone DEFAULT now())
    returns void
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.raise_job_budget(p_job_id uuid, p_usd numeric, p_tokens bigint, p_now timestamp with time zone) is 'Raise a job''s max_cost_usd (and/or max_tokens); a job blocked on its spend resumes its session. Raises CE404 (unknown), CE409 (the job will not run again), CE422 (no ceiling, or one not above what was spent).';
grant execute on function ceaseless.raise_job_budget(p_job_id uuid, p_usd numeric, p_tokens bigint, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/36_webhooks.sql, body md5 637498eca7350f839c87ad5265edc5f7
create function ceaseless.receive_webhook(p_token text, p_body bytea, p_headers jsonb)
    returns uuid
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.receive_webhook(p_token text, p_body bytea, p_headers jsonb) is 'Verify a webhook request (raw body and headers, under the target''s scheme: ceaseless, github, standard or stripe) and fire its loop or routine; returns the topology_runs or routine_runs id. Raises CE404/CE401/CE403/CE413/CE410/CE411/CE412/CE414/CE415.';
grant execute on function ceaseless.receive_webhook(p_token text, p_body bytea, p_headers jsonb) to ceaseless_listener, ceaseless_operator;

-- functions/36_webhooks.sql, body md5 cf249e204dac967eac7c75a4537d2acb
create function ceaseless.receive_webhook(p_token text, p_body bytea, p_signature text, p_sent_at timestamp with time zone)
    returns uuid
    language sql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.receive_webhook(p_token text, p_body bytea, p_signature text, p_sent_at timestamp with time zone) is 'Verify a ceaseless-signed webhook request (HMAC-SHA256, 300 s window, replay refusal) and fire its loop or routine; returns the topology_runs or routine_runs id. Raises CE404/CE401/CE403/CE413/CE410/CE411/CE412/CE414/CE415 (a guardrail''s raise rolls back the refused fire''s record: see _receive_webhook).';
grant execute on function ceaseless.receive_webhook(p_token text, p_body bytea, p_signature text, p_sent_at timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/73_forge_children.sql, body md5 56da3219b8300625969601911ec397ea
create function ceaseless.record_child_issue(p_id uuid, p_number bigint, p_html_url text, p_now timestamp with time zone DEFAULT now())
    returns uuid
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.record_child_issue(p_id uuid, p_number bigint, p_html_url text, p_now timestamp with time zone) is 'Record that a child issue exists on the forge and enqueue its implement job (parent = the plan job, opencode lane); idempotent. Returns the job id.';
grant execute on function ceaseless.record_child_issue(p_id uuid, p_number bigint, p_html_url text, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/41_fire_admission.sql, body md5 97beea8d8316b1d93fb71a9ccb8d4246
create function ceaseless.recount_routine_run_shards(p_now timestamp with time zone DEFAULT now())
    returns integer
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.recount_routine_run_shards(p_now timestamp with time zone) is 'Correct the running-count shards to the running routine_runs (one shard moved by the difference, audited); exact while fires and finishes go on. Returns the correction, or NULL when another recount holds the lock. Maintenance, one listener at a time.';
grant execute on function ceaseless.recount_routine_run_shards(p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/25_notify_audit.sql, body md5 ef5a540bdcf360559d6925ee68f54c29
create function ceaseless.relay_announcements(p_limit integer DEFAULT 1000)
    returns integer
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.relay_announcements(p_limit integer) is 'Send up to p_limit relayed announcements (oldest first) with pg_notify and remove them; returns how many, 0 when none waited or another session relays.';
grant execute on function ceaseless.relay_announcements(p_limit integer) to ceaseless_listener;

-- functions/10_jobs.sql, body md5 66e581dadaa6ed39c17a36f5dd6a19cc
create function ceaseless.release_jobs(p_worker text, p_job_ids uuid[], p_now timestamp with time zone DEFAULT now())
    returns integer
    language plpgsql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.release_jobs(p_worker text, p_job_ids uuid[], p_now timestamp with time zone) is 'Shutdown: return jobs held by p_worker to pending, attempt refunded, open runs finished as cancelled.';
grant execute on function ceaseless.release_jobs(p_worker text, p_job_ids uuid[], p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/10_jobs.sql, body md5 8b8d2c21ea434e8788a2e2621e480173
create function ceaseless.reply_job(p_job_id uuid, p_text text, p_now timestamp with time zone DEFAULT now())
    returns void
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.reply_job(p_job_id uuid, p_text text, p_now timestamp with time zone) is 'Reply to a blocked job: back to pending, its next run resumes the agent''s session with the reply as the prompt (with no session, it starts over with the reply after its prompt). Raises CE404 (unknown), CE409 (not blocked, ceiling spent), CE422 (blank or over 16000 characters).';
grant execute on function ceaseless.reply_job(p_job_id uuid, p_text text, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/12_lanes.sql, body md5 5de48803cd0baec76a15fd270932097b
create function ceaseless.resume_lane(p_agent text, p_now timestamp with time zone DEFAULT now())
    returns void
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.resume_lane(p_agent text, p_now timestamp with time zone) is 'Lift a lane''s pause (operators and listeners), whoever set it; audited as entity lane, and NOTIFY ceaseless_config so listeners claim from it at once. CE404 unknown lane, CE409 not paused.';
grant execute on function ceaseless.resume_lane(p_agent text, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator;

-- functions/10_jobs.sql, body md5 8c3ad2ebd6b1018fafff7282c9cf8991
create function ceaseless.retry_job(p_job_id uuid, p_now timestamp with time zone DEFAULT now())
    returns void
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.retry_job(p_job_id uuid, p_now timestamp with time zone) is 'Return a finished job to pending with its attempts reset; a routine''s job through its routine''s guardrails, as a new routine run (a blocked one goes on in its open run). Raises CE404 (unknown), CE409 (still live), CE410/CE412/CE415 (the routine may not run now).';
grant execute on function ceaseless.retry_job(p_job_id uuid, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/51_topology_runs.sql, body md5 ae7b5dd28b23677e52afa9aae2b251e0
create function ceaseless.retry_topology_run(p_run_id uuid, p_now timestamp with time zone DEFAULT now())
    returns void
    language plpgsql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.retry_topology_run(p_run_id uuid, p_now timestamp with time zone) is 'Run a failed or cancelled topology run again: succeeded nodes kept, failed and cancelled nodes queued again (their jobs back to pending) or waiting for their upstreams; the run running; the latest iteration of a loop only, re-enabling the loop its end stopped. Raises CE404 (unknown), CE409 (not failed or cancelled, or not the latest iteration), CE410 (a node''s agent disabled).';
grant execute on function ceaseless.retry_topology_run(p_run_id uuid, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/91_run_events.sql, body md5 3a4baecb87f5cc68a9254b13dad2b504
create function ceaseless.run_events(p_run_id uuid, p_after bigint DEFAULT 0, p_limit integer DEFAULT 500)
    returns TABLE(id bigint, event text, data jsonb, last boolean)
    language sql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.run_events(p_run_id uuid, p_after bigint, p_limit integer) is 'The events of a topology run after audit id p_after, in order (at most p_limit, up to 5000): run, node and approval changes with ids, states and times; `last` marks the final status. What GET /runs/{id}/events streams.';
grant execute on function ceaseless.run_events(p_run_id uuid, p_after bigint, p_limit integer) to ceaseless_listener, ceaseless_operator;

-- functions/32_schedules.sql, body md5 929d60a6e2087b4e897ba2fd657b3e01
create function ceaseless.run_loop(p_loop_id uuid, p_now timestamp with time zone DEFAULT now())
    returns uuid
    language sql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.run_loop(p_loop_id uuid, p_now timestamp with time zone) is 'Fire a loop by hand; returns the topology_runs id, whose status says whether the iteration runs (pending) or was skipped and why, or the held_fires id of a fire its overlap policy keeps. CE404 for an unknown loop or someone else''s.';
grant execute on function ceaseless.run_loop(p_loop_id uuid, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/32_schedules.sql, body md5 5df74ad5917f6a5e6b1cfb1fe5c6d277
create function ceaseless.run_routine(p_routine_id uuid, p_now timestamp with time zone DEFAULT now())
    returns uuid
    language sql
    volatile
    security definer
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.run_routine(p_routine_id uuid, p_now timestamp with time zone) is 'Fire a routine by hand (ignores cooldown, respects max_concurrent and the global cap); returns the routine_runs id, whose status says whether it runs or was skipped and why, or the held_fires id of a fire its overlap policy keeps.';
grant execute on function ceaseless.run_routine(p_routine_id uuid, p_now timestamp with time zone) to ceaseless_listener, ceaseless_operator, ceaseless_user;

-- functions/91_run_events.sql, body md5 a38eb69a252f7c4a059f2d518f0e6698
create function ceaseless.run_snapshot(p_run_id uuid)
    returns jsonb
    language sql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.run_snapshot(p_run_id uuid) is 'A topology run as it stands (the run, every node, the open approvals, whether it is final) and last_event_id, the audit id it is current to: what a new follower of GET /runs/{id}/events receives first. NULL when there is no such run.';
grant execute on function ceaseless.run_snapshot(p_run_id uuid) to ceaseless_listener, ceaseless_operator;

-- functions/32_schedules.sql, body md5 6f9231ebd28a78ab3eb14dcf67a201e4
create function ceaseless.set_next_fires(p_kinds text[], p_ids uuid[], p_schedules text[], p_timezones text[], p_next_fire_ats timestamp with time zone[])
    returns integer
    language sql
    volatile
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.set_next_fires(p_kinds text[], p_ids uuid[], p_schedules text[], p_timezones text[], p_next_fire_ats timestamp with time zone[]) is 'Store listener-computed next_fire_at values where the routine or loop still waits for one and still has that schedule and timezone; returns how many were stored.';
grant execute on function ceaseless.set_next_fires(p_kinds text[], p_ids uuid[], p_schedules text[], p_timezones text[], p_next_fire_ats timestamp with time zone[]) to ceaseless_listener, ceaseless_operator;

-- functions/32_schedules.sql, body md5 890ffb0bd10978a1481ccb9603a7f8d8
create function ceaseless.unscheduled_schedules(p_ids uuid[] DEFAULT NULL::uuid[])
    returns TABLE(kind text, id uuid, schedule text, timezone text)
    language sql
    stable
    set search_path = pg_catalog, ceaseless, pg_temp;
comment on function ceaseless.unscheduled_schedules(p_ids uuid[]) is 'Enabled routines and loops with a schedule and no next_fire_at (all of them, or those among p_ids): what the listener computes next slots for.';
grant execute on function ceaseless.unscheduled_schedules(p_ids uuid[]) to ceaseless_listener, ceaseless_operator;
