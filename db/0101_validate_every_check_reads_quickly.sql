-- Validate the constraints 0100 wrote again, NOT VALID, in a transaction of
-- its own (SHARE UPDATE EXCLUSIVE: writes go on while each table is read), as
-- 0099 did for 0098's. Every row passes: each rule allows exactly what the
-- validated one it replaced allowed.

set local search_path = ceaseless, pg_catalog, public;

alter table routines
    validate constraint routines_trigger_type_check,
    validate constraint routines_action_type_check,
    validate constraint routines_overlap_policy_known,
    validate constraint dedup_window_secs_positive,
    validate constraint max_cost_usd_positive,
    validate constraint max_tokens_positive;

alter table loops
    validate constraint loops_overlap_policy_known,
    validate constraint repeat_policy_kind_known,
    validate constraint stopped_reason_known;

alter table notifications
    validate constraint kind_known,
    validate constraint notifications_status_check,
    validate constraint source_table_known;

alter table held_fires
    validate constraint held_fires_policy_known,
    validate constraint held_fires_reason_known;

alter table webhook_deliveries
    validate constraint webhook_deliveries_target_check;

alter table approvals
    validate constraint decision_known;

alter table agents
    validate constraint agents_adapter_check,
    validate constraint fairness_known,
    validate constraint max_cost_usd_positive,
    validate constraint max_tokens_positive,
    validate constraint notify_channel_not_empty,
    validate constraint window_budget_positive,
    validate constraint window_cost_usd_positive,
    validate constraint window_tokens_positive;

alter table owner_budgets
    validate constraint window_cost_usd_positive,
    validate constraint window_tokens_positive;

alter table tracked_repo
    validate constraint tracked_repo_forge_check;

alter table listener_reports
    validate constraint sandbox_known;

alter table workspaces
    validate constraint root_path_absolute;
