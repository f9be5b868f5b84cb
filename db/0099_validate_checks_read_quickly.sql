-- Validate the constraints 0098 wrote again, NOT VALID.
--
-- A transaction of its own: VALIDATE CONSTRAINT takes a SHARE UPDATE
-- EXCLUSIVE lock, which lets claims, finishes and fires go on while it reads
-- each table; in 0098's transaction it would have run under the ACCESS
-- EXCLUSIVE lock of the DROP CONSTRAINT. Every row passes: each rule allows
-- exactly what the one it replaced allowed, and that one was validated.

set local search_path = ceaseless, pg_catalog, public;

alter table job
    validate constraint job_state_check,
    validate constraint finished_iff_terminal,
    validate constraint live_claim_held,
    validate constraint job_kind_check,
    validate constraint issue_ref_required_for_forge_kinds,
    validate constraint job_forge_check,
    validate constraint issue_ref_complete,
    validate constraint reply_complete,
    validate constraint reply_bounded,
    validate constraint dedup_key_not_empty,
    validate constraint max_attempts_positive,
    validate constraint max_turns_positive,
    validate constraint max_tokens_positive,
    validate constraint max_cost_usd_positive;

alter table agent_run
    validate constraint ended_by_known,
    validate constraint agent_run_adapter_check,
    validate constraint agent_run_billing_check,
    validate constraint agent_run_pr_forge_check,
    validate constraint pull_request_complete,
    validate constraint reply_complete,
    validate constraint reply_bounded,
    validate constraint tokens_not_negative,
    validate constraint cost_usd_not_negative,
    validate constraint final_message_bounded,
    validate constraint error_bounded;

alter table routine_runs
    validate constraint routine_runs_status_check,
    validate constraint routine_runs_trigger_type_check,
    validate constraint skip_reason_known;

alter table topology_runs
    validate constraint topology_runs_status_check,
    validate constraint finished_iff_terminal,
    validate constraint topology_runs_trigger_type_check,
    validate constraint topology_runs_skip_reason_check,
    validate constraint iteration_positive;

alter table topology_nodes
    validate constraint topology_nodes_state_check,
    validate constraint finished_iff_terminal,
    validate constraint live_node_has_job,
    validate constraint on_expiry_known,
    validate constraint approval_timeout_positive;
