-- The CHECK constraints of the tables every job, run and fire writes, in the
-- same rules written as fewer expression nodes.
--
-- PostgreSQL keeps a CHECK as the text of its expression tree and reads that
-- text back, then plans the expression, in every statement that inserts into
-- or updates the table, whatever columns the statement sets. On job that was
-- 60 of the 89 µs of CPU a one-row UPDATE took (PostgreSQL 15, 20,000 of them;
-- 28 µs with no CHECK at all), nearly all of it reading 19,592 characters of
-- node text. The cost follows the length of that text, so the same rules are
-- written shorter:
-- - an IN-list is stored as one node per value (`state in ('pending', …)`,
--   1,762 characters); `= any ('{…}'::text[])` is one array constant (768);
-- - `x is null or x > 0` is `x > 0`: a CHECK passes when its expression is
--   NULL, so the test of NULL said again what PostgreSQL already does
--   (likewise `coalesce(x, 0) >= 0`).
-- Every rule allows and refuses exactly the rows it did, and keeps its name,
-- which the errors users see name.
--
-- Each is added NOT VALID here, which reads no row, and validated by 0099
-- in a transaction of its own, so the table lock taken here is held only for
-- the catalog change. outcome_known and resume_session_id_resumable stay NOT
-- VALID, as they were: rows written before they existed may break them.

set local search_path = ceaseless, pg_catalog, public;

alter table job
    drop constraint job_state_check,
    add constraint job_state_check check (
        state = any ('{pending,claimed,running,delivered,blocked,failed,abandoned,cancelled}'::text[])
    ) not valid,
    drop constraint finished_iff_terminal,
    add constraint finished_iff_terminal check (
        (finished_at is not null) = (state = any ('{delivered,blocked,failed,abandoned,cancelled}'::text[]))
    ) not valid,
    drop constraint live_claim_held,
    add constraint live_claim_held check (
        state <> all ('{claimed,running}'::text[]) or claimed_by is not null
    ) not valid,
    drop constraint job_kind_check,
    add constraint job_kind_check check (
        kind = any ('{discover,plan,implement,routine,loop_node,task}'::text[])
    ) not valid,
    drop constraint issue_ref_required_for_forge_kinds,
    add constraint issue_ref_required_for_forge_kinds check (
        kind <> all ('{discover,plan,implement}'::text[]) or forge is not null
    ) not valid,
    drop constraint job_forge_check,
    add constraint job_forge_check check (forge = any ('{gitea,github}'::text[])) not valid,
    drop constraint issue_ref_complete,
    add constraint issue_ref_complete check (
        num_nonnulls(forge, owner, repo, number) = any ('{0,4}'::integer[])
    ) not valid,
    drop constraint reply_complete,
    add constraint reply_complete check (
        num_nonnulls(reply, replied_by, replied_at) = any ('{0,3}'::integer[])
    ) not valid,
    drop constraint reply_bounded,
    add constraint reply_bounded check (char_length(reply) between 1 and 16000) not valid,
    drop constraint dedup_key_not_empty,
    add constraint dedup_key_not_empty check (dedup_key <> '') not valid,
    drop constraint max_attempts_positive,
    add constraint max_attempts_positive check (max_attempts > 0) not valid,
    drop constraint max_turns_positive,
    add constraint max_turns_positive check (max_turns > 0) not valid,
    drop constraint max_tokens_positive,
    add constraint max_tokens_positive check (max_tokens > 0) not valid,
    drop constraint max_cost_usd_positive,
    add constraint max_cost_usd_positive check (max_cost_usd > 0) not valid;

alter table agent_run
    drop constraint outcome_known,
    add constraint outcome_known check (
        outcome = any ('{succeeded,failed,rate_limited,budget_exhausted,output_budget_exhausted,timed_out,cancelled,lease_expired,auth_failed,needs_human}'::text[])
    ) not valid,
    drop constraint ended_by_known,
    add constraint ended_by_known check (
        ended_by = any ('{agent,lease_expiry,release,cancel}'::text[])
    ) not valid,
    drop constraint agent_run_adapter_check,
    add constraint agent_run_adapter_check check (
        adapter = any ('{claude_code,opencode,command,noop}'::text[])
    ) not valid,
    drop constraint agent_run_billing_check,
    add constraint agent_run_billing_check check (
        billing = any ('{subscription,api_key,unknown}'::text[])
    ) not valid,
    drop constraint agent_run_pr_forge_check,
    add constraint agent_run_pr_forge_check check (
        pr_forge = any ('{gitea,github}'::text[])
    ) not valid,
    drop constraint pull_request_complete,
    add constraint pull_request_complete check (
        num_nonnulls(pr_forge, pr_owner, pr_repo, pr_number, pr_head_branch, pr_url)
            = any ('{0,6}'::integer[])
    ) not valid,
    drop constraint reply_complete,
    add constraint reply_complete check (
        num_nonnulls(reply, replied_by) = any ('{0,2}'::integer[])
    ) not valid,
    drop constraint reply_bounded,
    add constraint reply_bounded check (char_length(reply) between 1 and 16000) not valid,
    drop constraint tokens_not_negative,
    add constraint tokens_not_negative check (tokens_in >= 0 and tokens_out >= 0) not valid,
    drop constraint cost_usd_not_negative,
    add constraint cost_usd_not_negative check (cost_usd >= 0) not valid,
    drop constraint final_message_bounded,
    add constraint final_message_bounded check (char_length(final_message) <= 65536) not valid,
    drop constraint error_bounded,
    add constraint error_bounded check (char_length(error) <= 65536) not valid;

alter table routine_runs
    drop constraint routine_runs_status_check,
    add constraint routine_runs_status_check check (
        status = any ('{running,ok,attention,failed,skipped}'::text[])
    ) not valid,
    drop constraint routine_runs_trigger_type_check,
    add constraint routine_runs_trigger_type_check check (
        trigger_type = any ('{cron,event,webhook,manual,backfill}'::text[])
    ) not valid,
    drop constraint skip_reason_known,
    add constraint skip_reason_known check (
        skip_reason = any ('{cooldown,concurrency,dedup,global_cap,missed_slots,disabled,agent_disabled}'::text[])
    ) not valid;

alter table topology_runs
    drop constraint topology_runs_status_check,
    add constraint topology_runs_status_check check (
        status = any ('{pending,running,awaiting_approval,succeeded,failed,cancelled,skipped}'::text[])
    ) not valid,
    drop constraint finished_iff_terminal,
    add constraint finished_iff_terminal check (
        (finished_at is not null) = (status = any ('{succeeded,failed,cancelled,skipped}'::text[]))
    ) not valid,
    drop constraint topology_runs_trigger_type_check,
    add constraint topology_runs_trigger_type_check check (
        trigger_type = any ('{cron,on_completion,webhook,manual,event,backfill}'::text[])
    ) not valid,
    drop constraint topology_runs_skip_reason_check,
    add constraint topology_runs_skip_reason_check check (
        skip_reason = any ('{live_iteration,disabled,agent_disabled}'::text[])
    ) not valid,
    drop constraint iteration_positive,
    add constraint iteration_positive check (iteration >= 1) not valid;

alter table topology_nodes
    drop constraint topology_nodes_state_check,
    add constraint topology_nodes_state_check check (
        state = any ('{waiting,awaiting_approval,queued,running,blocked,succeeded,skipped,failed,cancelled}'::text[])
    ) not valid,
    drop constraint finished_iff_terminal,
    add constraint finished_iff_terminal check (
        (finished_at is not null) = (state = any ('{succeeded,skipped,failed,cancelled}'::text[]))
    ) not valid,
    drop constraint live_node_has_job,
    add constraint live_node_has_job check (
        state <> all ('{queued,running}'::text[]) or job_id is not null
    ) not valid,
    drop constraint on_expiry_known,
    add constraint on_expiry_known check (on_expiry = any ('{fail,skip,approve}'::text[])) not valid,
    drop constraint approval_timeout_positive,
    add constraint approval_timeout_positive check (approval_timeout_secs > 0) not valid;
