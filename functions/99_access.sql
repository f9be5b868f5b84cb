-- Who may do what: the privileges of the three roles of
-- db/0016_roles_and_owners.sql, which functions run with their owner's
-- rights, and the search_path every function runs with.
--
-- Called by: migrate, which applies this file last, with every change of
-- functions/, so a table or function added later is covered at once:
-- privileges are granted on "all tables/functions in schema" and then
-- narrowed. GRANT and REVOKE change the catalog only; they take no lock that
-- stops readers or writers of a table.
--
-- Guarantees: nothing is granted to PUBLIC; nobody but the owner may CREATE
-- in the schema (so no role can shadow a function or a table); a user role
-- reaches other owners' rows only through the security definer functions
-- below, each of which checks ownership itself or cannot be called directly;
-- a user role writes only the columns a user chooses (what to run, where,
-- when), never those the engine and the listener keep (states, claims,
-- counters, schedules, references to runs, jobs and forge issues), so a
-- user's INSERT starts a job pending and unclaimed, a run pending, and names
-- nothing of anyone else's; on a database of its own (below), user roles
-- cannot create temporary tables.

revoke all on schema ceaseless from public;
grant usage on schema ceaseless to ceaseless_listener, ceaseless_operator, ceaseless_user;

revoke all on all tables in schema ceaseless from public;
revoke all on all sequences in schema ceaseless from public;
revoke execute on all functions in schema ceaseless from public;

-- The listener: every table, all rows (its policies say `true`). audit_log
-- only grows: no UPDATE or DELETE for anyone but prune_audit_log.
grant select, insert, update, delete on all tables in schema ceaseless to ceaseless_listener;
revoke update, delete, truncate on audit_log from ceaseless_listener;
grant usage on all sequences in schema ceaseless to ceaseless_listener;
grant execute on all functions in schema ceaseless to ceaseless_listener;

-- Operators: read everything, manage agents and settings, and every function
-- (cancel_job, retry_job, run_routine, …) but audit pruning. They write jobs
-- only through those functions.
grant select on all tables in schema ceaseless to ceaseless_operator;
grant insert, update, delete on agents, settings to ceaseless_operator;
grant execute on all functions in schema ceaseless to ceaseless_operator;
-- The audit log keeps what operators did too: it is pruned by its owner or a
-- listener's maintenance, above the retention floor (25_notify_audit.sql).
revoke execute on function prune_audit_log(timestamptz, integer) from ceaseless_operator;
-- Retention (96_retention.sql): prune deletes rows operators may not delete
-- themselves, so it runs as the owner; it refuses user roles itself, and
-- prunes audit rows only for listeners and the owner. The helpers that
-- delete are reached only through it and prune_audit_log: called directly
-- they would skip the lock, the live-row rules or the audit row.
alter function prune(timestamptz, integer, text, boolean) security definer;
revoke execute on function
    _prune_kind(text, timestamptz, integer, boolean),
    _delete_audit_rows(timestamptz, integer)
    from ceaseless_listener, ceaseless_operator;

-- Users: their own routines, jobs and events (row-level security narrows
-- every table below to their rows), and what they need to pick a lane. Reset
-- first: a table-wide grant, made by hand or by an older install, would cover
-- every column.
revoke all on all tables in schema ceaseless from ceaseless_user;
-- Writes name columns: what a user decides. The rest are the engine's and the
-- listener's (states, claims, attempts, counters, next_fire_at, errors, the
-- webhook credential, references to runs, jobs and forge issues), filled by
-- defaults and triggers; a statement that names one is refused (permission
-- denied). A job names no routine run, topology run, parent or forge issue,
-- so it can neither close nor fire someone else's run, nor become a forge job
-- (those come from the forge intake, ingest_issues and the child-issue path).
grant select, delete on routines to ceaseless_user;
grant insert (id, user_id, name, description, enabled, trigger_type, trigger_config, action_type,
              action_config, agent, cooldown_secs, max_concurrent, dedup_window_secs,
              notify_channel, notify_user, notify_on_success, notify_on_failure,
              notify_on_attention, max_cost_usd, max_tokens, overlap_policy, debounce_secs,
              debounce_max_secs, job_priority, job_fairness_key)
    on routines to ceaseless_user;
grant update (name, description, enabled, trigger_type, trigger_config, action_type,
              action_config, agent, cooldown_secs, max_concurrent, dedup_window_secs,
              notify_channel, notify_user, notify_on_success, notify_on_failure,
              notify_on_attention, max_cost_usd, max_tokens, overlap_policy, debounce_secs,
              debounce_max_secs, job_priority, job_fairness_key)
    on routines to ceaseless_user;
grant select on job, events to ceaseless_user;
-- Not reply, replied_by, replied_at: a reply is sent through reply_job,
-- which checks the job is blocked and records who sent it. A job's priority
-- and fairness key order only its owner's own work: a round_robin lane takes
-- turns across owners before keys (_round_robin_pick), so a key naming
-- another user, or many keys, wins no one else's turn.
grant insert (id, user_id, kind, agent, prompt, payload, max_turns, max_attempts, run_after,
              dedup_key, max_cost_usd, max_tokens, priority, fairness_key)
    on job to ceaseless_user;
grant insert (id, user_id, channel, content, payload) on events to ceaseless_user;
grant select on routine_runs, agent_run, notifications, loops, topology_runs, approvals
    to ceaseless_user;
-- Loops are owned rows like routines; a run may be started directly with an
-- INSERT (pending: its graph and task); nodes are the engine's, read only.
grant delete on loops to ceaseless_user;
grant insert (id, user_id, workspace_id, title, description, graph, task_template, triggers,
              repeat_policy, enabled, overlap_policy, debounce_secs, debounce_max_secs,
              job_priority, job_fairness_key, min_interval_secs)
    on loops to ceaseless_user;
grant update (workspace_id, title, description, graph, task_template, triggers, repeat_policy,
              enabled, overlap_policy, debounce_secs, debounce_max_secs, job_priority,
              job_fairness_key, min_interval_secs)
    on loops to ceaseless_user;
grant insert (id, user_id, workspace_id, graph, task) on topology_runs to ceaseless_user;
grant select on topology_nodes to ceaseless_user;
-- Every column of agents but env, which holds the lanes' API keys.
grant select (name, adapter, argv, model, timeout_secs, kill_grace_secs, max_concurrent,
              window_secs, window_budget, max_attempts, enabled, created_at, updated_at,
              fairness)
    on agents to ceaseless_user;
-- The functions a user calls, and those its rows' constraints and row-level
-- triggers call with its rights. Anything else (claims, leases, finishing,
-- cancel and retry, firing by id) is refused with permission denied.
grant execute on function
    run_routine(uuid, timestamptz),
    check_schedule(text, text),
    cancel_job(uuid, timestamptz),
    retry_job(uuid, timestamptz),
    reply_job(uuid, text, timestamptz),
    raise_job_budget(uuid, numeric, bigint, timestamptz),
    _input_cap(text),
    _json_too_deep(jsonb),
    _json_too_deep_path(),
    _is_blank(text),
    _blank_characters(),
    _acts_for(text),
    _actor()
    to ceaseless_user;

-- The announcement relay (25_notify_audit.sql): an operator's session, or a
-- user's through the engine's triggers, may have its announcements relayed
-- (ceaseless.notify = 'relay'), and writes announcements only through this
-- function, with the channel and payload the engine chose. Not callable by
-- user roles (nothing above grants it).
alter function _relay_announcement(text, text) security definer;
-- Relaying them is the listeners' part: it deletes rows of a table operators
-- only read (relay_status shows them the backlog).
revoke execute on function relay_announcements(integer) from ceaseless_operator;

-- Security definer: these run with the owner's rights, because a user's
-- INSERT must be able to count every owner's running work against the caps,
-- read settings, and append to audit_log, none of which it may do itself.
-- Each is a trigger function (never callable directly), or checks that the
-- caller owns the row (run_routine, in 32_schedules.sql).
alter function _tg_job_insert() security definer;
alter function _tg_job_update() security definer;
alter function _tg_routines_validate() security definer;
-- It reads the time zone names, a table users may not read themselves.
alter function check_schedule(text, text) security definer;
alter function _tg_routines_changed() security definer;
alter function _tg_events_fire() security definer;
alter function _tg_routines_quiet_checks() security definer;
alter function _tg_config_changed() security definer;
alter function _tg_agents_disabled() security definer;
alter function _tg_agents_enabled() security definer;
alter function _tg_agents_quiet_checks() security definer;
alter function _tg_settings_quiet_checks() security definer;
-- The verbs on jobs, which neither operators nor users may UPDATE
-- themselves: each checks that the caller owns the job (_acts_for: a user
-- its own, an operator or a listener any).
alter function cancel_job(uuid, timestamptz) security definer;
alter function retry_job(uuid, timestamptz) security definer;
alter function reply_job(uuid, text, timestamptz) security definer;
alter function raise_job_budget(uuid, numeric, bigint, timestamptz) security definer;
-- A job's default ceilings come from its routine, loop node and agent, which
-- a user's INSERT may not read in full (agents' other columns, another
-- owner's rows are never named: a user's job names no run).
alter function _tg_job_spend_ceiling() security definer;
-- Lanes are every owner's: operators pause and resume them through these,
-- which let only operators and listeners through (_acts_for_everyone), and
-- write lane_pauses, which operators only read.
alter function pause_lane(text, timestamptz, text, timestamptz) security definer;
alter function resume_lane(text, timestamptz) security definer;
alter function _tg_job_validate() security definer;
alter function _tg_job_input() security definer;
-- The running count (routine_run_shards) is the engine's: a user's DELETE of
-- its routine takes its running runs off it, and no role but the engine may
-- move it by hand.
alter function _tg_routine_runs_insert() security definer;
alter function _tg_routine_runs_update() security definer;
alter function _tg_routine_runs_deleted() security definer;

-- Loops and topology runs (25_notify_audit.sql, 50_topology_graph.sql): their
-- triggers audit and create rows a user may not write itself (audit_log,
-- workspaces).
alter function _default_workspace() security definer;
alter function _tg_topology_runs_changed() security definer;
alter function _tg_topology_nodes_changed() security definer;
alter function _tg_approvals_changed() security definer;
alter function _tg_loops_changed() security definer;

-- Topology engine (50-52_*.sql): graph validation reads the agent registry;
-- a run's start and its jobs' outcomes write nodes, jobs, approvals and the
-- outbox, which a user role may not write itself; cancel_topology_run,
-- retry_topology_run and decide_approval check ownership (_acts_for)
-- themselves.
alter function _tg_loops_graph_validate() security definer;
alter function _tg_topology_runs_validate() security definer;
alter function _tg_topology_runs_start() security definer;
alter function _tg_job_topology_outcome() security definer;
alter function cancel_topology_run(uuid, timestamptz) security definer;
alter function retry_topology_run(uuid, timestamptz) security definer;
alter function decide_approval(uuid, boolean, text, text, timestamptz) security definer;
grant execute on function
    cancel_topology_run(uuid, timestamptz),
    retry_topology_run(uuid, timestamptz),
    decide_approval(uuid, boolean, text, text, timestamptz)
    to ceaseless_user;
grant select on topology_node_status to ceaseless_user;

-- Loops (55-56_*.sql): validation fills the creator (users) and re-enabling
-- fires the next iteration; an iteration's end stops the loop (notification)
-- or fires the next one, whose start writes nodes and jobs; run_loop checks
-- ownership (_acts_for) itself. loop_status is security_invoker: a user sees
-- its own loops.
alter function _tg_loops_validate() security definer;
alter function _tg_loops_schedule() security definer;
alter function _tg_loops_delete() security definer;
alter function _tg_loops_quiet_checks() security definer;
alter function _tg_topology_runs_loop_lock() security definer;
alter function _tg_topology_runs_loop_outcome() security definer;
alter function run_loop(uuid, timestamptz) security definer;
grant execute on function run_loop(uuid, timestamptz) to ceaseless_user;
-- Backfill (32_schedules.sql) fires as run_routine and run_loop do: _backfill
-- checks ownership (_acts_for) and writes runs, jobs and the audit log.
alter function backfill_routine(uuid, timestamptz, timestamptz, integer, timestamptz)
    security definer;
alter function backfill_loop(uuid, timestamptz, timestamptz, integer, timestamptz)
    security definer;
grant execute on function
    backfill_routine(uuid, timestamptz, timestamptz, integer, timestamptz),
    backfill_loop(uuid, timestamptz, timestamptz, integer, timestamptz)
    to ceaseless_user;
grant select on loop_status to ceaseless_user;
-- The trigger layer (31-32_*.sql): schedules is security_invoker, so a user
-- sees its own routines and loops; the scheduler's functions are the
-- listener's.
grant select on schedules to ceaseless_user;
-- Held fires (33_held_fires.sql): a user reads its own (row-level security)
-- and writes none; fires write them through the firing path. The wake
-- triggers read every owner's held fires for a statement that may be a
-- user's (cancel_job ending its run).
grant select on held_fires to ceaseless_user;
grant execute on function _held_summary(uuid) to ceaseless_user;
-- loop_status's paced_until: a read of the caller's own iterations.
grant execute on function _loop_paced_until(uuid, integer, timestamptz) to ceaseless_user;
alter function _tg_routine_runs_held_wake() security definer;
alter function _tg_topology_runs_held_wake() security definer;

-- Tracked repos (70_tracked_repo.sql): owned rows like loops. Validation reads the
-- zone list and _repo_interval reads settings, neither of which a user role
-- may read; repo_status is security_invoker, so a user sees its own repos.
-- due_repos and finish_repo_poll are the poller's: not granted to users.
grant select, delete on tracked_repo to ceaseless_user;
grant insert (id, user_id, forge, owner, repo, clone_url, api_url, default_branch,
              interval_seconds, quiet_from, quiet_until, quiet_timezone, enabled,
              tracking_issue, discover_cooldown_secs, discover_label, plan_label,
              implement_label, allowed_authors)
    on tracked_repo to ceaseless_user;
grant update (forge, owner, repo, clone_url, api_url, default_branch, interval_seconds,
              quiet_from, quiet_until, quiet_timezone, enabled, tracking_issue,
              discover_cooldown_secs, discover_label, plan_label, implement_label,
              allowed_authors)
    on tracked_repo to ceaseless_user;
grant select on repo_status to ceaseless_user;
-- Whether the listener's forge tokens may serve a repo is an operator's call
-- (db/0030): the one column of tracked_repo an operator writes.
grant update (tokens_allowed) on tracked_repo to ceaseless_operator;
alter function _tg_tracked_repo_validate() security definer;
alter function _repo_interval(tracked_repo) security definer;
grant execute on function
    _repo_quiet_at(tracked_repo, timestamptz),
    _repo_interval(tracked_repo)
    to ceaseless_user;

-- The forge lane (71-74_*.sql): a user reads the cached issues and child
-- issues of its own repos and the pipeline of its own jobs. Intake, verdicts,
-- children and labels are the listener's (ingest_issues, note_labellers,
-- child_issues_due, record_child_issue, child_issue_failed, labels_*): not
-- granted to users.
grant select on forge_issue, forge_child_issue, forge_pipeline to ceaseless_user;

-- Run observer (91_run_events.sql): run_events, run_snapshot, loop_events and
-- loop_snapshot read audit_log, which is beyond a user role; they run as the
-- caller and are granted to no user (listeners and operators have every
-- function above). The SSE observer serves them behind its own token.

-- Explain and the default agent (92_explain.sql, 13_default_agent.sql):
-- explain_job, explain_routine and explain_topology_run count every owner's
-- jobs and runs in a lane and check the caller owns the row explained
-- (_acts_for) themselves; the default agent triggers read settings, which a
-- user role may not read.
alter function explain_job(uuid, timestamptz) security definer;
alter function explain_routine(uuid, timestamptz) security definer;
alter function explain_topology_run(uuid, timestamptz) security definer;
grant execute on function
    explain_job(uuid, timestamptz),
    explain_routine(uuid, timestamptz),
    explain_topology_run(uuid, timestamptz)
    to ceaseless_user;
-- explain_loop, likewise: a loop's live iteration is explained through
-- explain_topology_run, which checks the owner again.
alter function explain_loop(uuid, timestamptz) security definer;
grant execute on function explain_loop(uuid, timestamptz) to ceaseless_user;
alter function _tg_default_agent() security definer;
alter function _tg_graph_default_agent() security definer;
-- The spend budgets of a lane (db/0022), beside its other governor columns.
grant select (window_cost_usd, window_tokens) on agents to ceaseless_user;
-- Where a lane's agents may connect (db/0027): what a user's prompt can make
-- them reach is the user's business too, and it holds no secret.
grant select (egress) on agents to ceaseless_user;
-- Who hears of a lane's jobs that end for good (db/0060): a user's jobs are
-- announced by these, so the user may read them; they hold no secret.
grant select (notify_on_failed, notify_on_blocked, notify_on_abandoned, notify_channel)
    on agents to ceaseless_user;
-- The default spend ceilings of a lane's jobs (db/0068): a user's job gets
-- them unless it sets its own.
grant select (max_cost_usd, max_tokens) on agents to ceaseless_user;

-- Metrics (94_metrics.sql): the counting triggers fire in whatever
-- transaction changed the row, a user role's too (an event that fires a
-- routine), and a user role may not write metric_deltas: they run as the
-- owner. metrics_snapshot and the counter tables are the listener's and the
-- operator's (granted above with every table and function), not a user's:
-- they count every user's rows.
alter function _tg_agent_run_metrics() security definer;
alter function _tg_routine_runs_insert_metrics() security definer;
alter function _tg_routine_runs_update_metrics() security definer;
alter function _tg_topology_runs_insert_metrics() security definer;
alter function _tg_topology_runs_update_metrics() security definer;
alter function _tg_notifications_update_metrics() security definer;

-- The operator views a user's CLI reads (90_views.sql): each is
-- security_invoker, so a user sees its own jobs and routines. A lane is every
-- owner's: _lane_capacity counts its live jobs and its window's runs as the
-- claim counts them, whoever asks, so it runs as the owner; it returns counts
-- per lane and no owner's row, which is why it checks no ownership. A lane's
-- pause (its reason is the provider's limit message) is the lane's, too.
alter function _lane_capacity(timestamptz, text[], boolean) security definer;
grant execute on function _lane_capacity(timestamptz, text[], boolean) to ceaseless_user;
grant select on job_queue, stuck_jobs, governor_usage, routine_status, lane_pauses
    to ceaseless_user;

-- Owner budgets (12_lanes.sql): a user reads its own budget and what its runs spent
-- against it (owner_budget_usage is security_invoker); operators set them.
grant select on owner_budgets, owner_budget_usage to ceaseless_user;
grant insert, update, delete on owner_budgets to ceaseless_operator;
grant execute on function _owner_spend(owner_budgets, timestamptz) to ceaseless_user;

-- Temporary tables. Every function searches pg_temp last (search_path
-- pg_catalog, ceaseless, pg_temp), so a temporary table can shadow nothing
-- inside them; a user role needs none at all, so on a database of its own it
-- may not create one. TEMPORARY is a database privilege PostgreSQL grants to
-- PUBLIC, so taking it from ceaseless_user alone would change nothing: it is
-- taken from PUBLIC and given back to the listener and operator roles. On a
-- database shared with other applications that would take it from their
-- roles too, so it is done only when the database holds nothing but this
-- schema (and an empty public), and only by a role that may (the database's
-- owner or a superuser); otherwise it is left as it is, with a NOTICE, and
-- docs/migrations.md gives the statements to run by hand. Returns whether it
-- was restricted.
create or replace function _restrict_temporary()
returns boolean
language plpgsql
as $$
declare
    v_database constant text := current_database();
    v_other text;
begin
    if not exists (select from pg_database d
                   where d.datname = v_database and pg_has_role(current_user, d.datdba, 'usage')) then
        raise notice 'ceaseless: % does not own database %, so TEMPORARY stays granted to PUBLIC '
                     '(docs/migrations.md, "Temporary tables")', current_user, v_database;
        return false;
    end if;
    select n.nspname into v_other
    from pg_namespace n
    where n.nspname not in ('ceaseless', 'public', 'information_schema', 'pg_catalog', 'pg_toast')
      and n.nspname !~ '^pg_(temp|toast_temp)_[0-9]+$'
    order by 1
    limit 1;
    if v_other is null
       and (exists (select from pg_class c where c.relnamespace = 'public'::regnamespace)
            or exists (select from pg_proc p where p.pronamespace = 'public'::regnamespace)
            or exists (select from pg_type t where t.typnamespace = 'public'::regnamespace)) then
        v_other := 'public';
    end if;
    if v_other is not null then
        raise notice 'ceaseless: database % is shared (schema % is not ceaseless''s), so TEMPORARY '
                     'stays granted to PUBLIC (docs/migrations.md, "Temporary tables")',
                     v_database, v_other;
        return false;
    end if;
    execute format('revoke temporary on database %I from public', v_database);
    execute format('grant temporary on database %I to ceaseless_listener, ceaseless_operator',
                   v_database);
    return true;
end;
$$;

comment on function _restrict_temporary() is
    'On a database holding only ceaseless, take TEMPORARY from PUBLIC (user roles cannot create '
    'temporary tables) and give it to the listener and operator roles; elsewhere a NOTICE. '
    'Applied by migrate; true when it restricted.';

revoke execute on function _restrict_temporary() from ceaseless_listener, ceaseless_operator;
select _restrict_temporary();

-- Every function of the schema runs with search_path pg_catalog, ceaseless,
-- pg_temp, set here once for all of them (a function that reads nothing of
-- the schema may name a shorter path in a SET clause of its own, which is
-- kept, as the webhook-scheme and secret-hiding helpers do):
-- built-ins come first, so no object of the schema can stand in for one; and
-- pg_temp last, so a caller's temporary table shadows no table inside a
-- function (PostgreSQL searches the temporary schema first unless the path
-- names it). CREATE OR REPLACE resets a function's settings, so this runs
-- last, after every file has been applied, in the same transaction: no session
-- ever sees a function without it (tests/sql/test_search_path.py checks the
-- catalog). ALTER ROUTINE, so a procedure is covered as a function is.
do $$
declare
    v_routine regprocedure;
begin
    for v_routine in
        select p.oid::regprocedure
        from pg_proc p
        where p.pronamespace = 'ceaseless'::regnamespace
          and p.prokind in ('f', 'p')
          and not exists (select from unnest(p.proconfig) c where c like 'search_path=%')
    loop
        execute format('alter routine %s set search_path = pg_catalog, ceaseless, pg_temp',
                       v_routine);
    end loop;
end;
$$;
