-- The rest of the schema's CHECK constraints written as 0098 wrote those of
-- the hot tables: an IN-list as one array constant, and no `x is null or`
-- before a test that passes NULL anyway. Routines and loops are updated by
-- every fire and every run's end, notifications, held fires, webhook
-- deliveries and approvals by the fires and runs that make them; the others
-- follow so that the schema writes a CHECK list one way.
--
-- The same rules and names; added NOT VALID here and validated by 0101 in a
-- transaction of its own, as 0098 and 0099 did.

set local search_path = ceaseless, pg_catalog, public;

alter table routines
    drop constraint routines_trigger_type_check,
    add constraint routines_trigger_type_check check (
        trigger_type = any ('{cron,event,webhook,manual}'::text[])
    ) not valid,
    drop constraint routines_action_type_check,
    add constraint routines_action_type_check check (
        action_type = any ('{lightweight,full_job}'::text[])
    ) not valid,
    drop constraint routines_overlap_policy_known,
    add constraint routines_overlap_policy_known check (
        overlap_policy = any ('{skip,buffer_one,buffer_all,cancel_other,allow_all}'::text[])
    ) not valid,
    drop constraint dedup_window_secs_positive,
    add constraint dedup_window_secs_positive check (dedup_window_secs > 0) not valid,
    drop constraint max_cost_usd_positive,
    add constraint max_cost_usd_positive check (max_cost_usd > 0) not valid,
    drop constraint max_tokens_positive,
    add constraint max_tokens_positive check (max_tokens > 0) not valid;

alter table loops
    drop constraint loops_overlap_policy_known,
    add constraint loops_overlap_policy_known check (
        overlap_policy = any ('{skip,buffer_one,buffer_all,cancel_other}'::text[])
    ) not valid,
    drop constraint repeat_policy_kind_known,
    add constraint repeat_policy_kind_known check (
        repeat_policy ->> 'kind' = any ('{infinite,iters,until}'::text[])
    ) not valid,
    drop constraint stopped_reason_known,
    add constraint stopped_reason_known check (
        stopped_reason = any ('{completed,exhausted,failed,cancelled}'::text[])
    ) not valid;

alter table notifications
    drop constraint kind_known,
    add constraint kind_known check (
        kind = any ('{success,failure,attention,stopped,approval}'::text[])
    ) not valid,
    drop constraint notifications_status_check,
    add constraint notifications_status_check check (
        status = any ('{pending,delivered,failed}'::text[])
    ) not valid,
    drop constraint source_table_known,
    add constraint source_table_known check (
        source_table = any ('{routine_runs,topology_runs,job,loops,approvals}'::text[])
    ) not valid;

alter table held_fires
    drop constraint held_fires_policy_known,
    add constraint held_fires_policy_known check (
        policy = any ('{skip,buffer_one,buffer_all,cancel_other,allow_all}'::text[])
    ) not valid,
    drop constraint held_fires_reason_known,
    add constraint held_fires_reason_known check (
        reason = any ('{buffered,debounced}'::text[])
    ) not valid;

alter table webhook_deliveries
    drop constraint webhook_deliveries_target_check,
    add constraint webhook_deliveries_target_check check (
        target = any ('{routine,loop}'::text[])
    ) not valid;

alter table approvals
    drop constraint decision_known,
    add constraint decision_known check (
        decision = any ('{approved,rejected,expired}'::text[])
    ) not valid;

alter table agents
    drop constraint agents_adapter_check,
    add constraint agents_adapter_check check (
        adapter = any ('{claude_code,opencode,command,noop}'::text[])
    ) not valid,
    drop constraint fairness_known,
    add constraint fairness_known check (fairness = any ('{fifo,round_robin}'::text[])) not valid,
    drop constraint max_cost_usd_positive,
    add constraint max_cost_usd_positive check (max_cost_usd > 0) not valid,
    drop constraint max_tokens_positive,
    add constraint max_tokens_positive check (max_tokens > 0) not valid,
    drop constraint notify_channel_not_empty,
    add constraint notify_channel_not_empty check (notify_channel <> '') not valid,
    drop constraint window_budget_positive,
    add constraint window_budget_positive check (window_budget > 0) not valid,
    drop constraint window_cost_usd_positive,
    add constraint window_cost_usd_positive check (window_cost_usd > 0) not valid,
    drop constraint window_tokens_positive,
    add constraint window_tokens_positive check (window_tokens > 0) not valid;

alter table owner_budgets
    drop constraint window_cost_usd_positive,
    add constraint window_cost_usd_positive check (window_cost_usd > 0) not valid,
    drop constraint window_tokens_positive,
    add constraint window_tokens_positive check (window_tokens > 0) not valid;

alter table tracked_repo
    drop constraint tracked_repo_forge_check,
    add constraint tracked_repo_forge_check check (forge = any ('{gitea,github}'::text[])) not valid;

alter table listener_reports
    drop constraint sandbox_known,
    add constraint sandbox_known check (sandbox = any ('{bwrap,none}'::text[])) not valid;

alter table workspaces
    drop constraint root_path_absolute,
    add constraint root_path_absolute check (root_path like '/%') not valid;
