-- Loops: validation of what users store, webhook credentials, and when a
-- loop's schedule must be computed again.
--
-- Called by: PostgreSQL, before and after each INSERT, UPDATE and DELETE of
-- loops (the graph is checked by loops_graph_validate, 50_topology_graph.sql,
-- which sorts before loops_validate).
-- Guarantees:
-- - nothing half-valid is stored: title, description, task_template,
--   triggers and repeat_policy are checked in full on every INSERT and on
--   every UPDATE that changes one of them, the flow controls (overlap_policy,
--   debounce, min_interval_secs 0..86400) on every write; the error (CE422)
--   names the field, the rule and a bounded value; defaults are filled
--   (triggers.timezone 'UTC' when cron is set, workspace_id, created_by);
-- - the webhook credential is the database's: generated (webhook_token
--   'loop_' + 64 hex, webhook_signing_key 64 hex or for the standard scheme
--   whsec_ and base64, from gen_random_uuid) when triggers.webhook_enabled
--   becomes true, kept while it stays true, cleared when it becomes false, so
--   turning it off and on again rotates both; a new triggers.webhook_scheme
--   rotates the signing key (the token stays); a
--   statement that sets either by hand is refused; constraint errors on a
--   loop holding a credential never print it (loops_zz_quiet_checks);
-- - next_fire_at is cleared whenever the answer may have changed (cron or
--   timezone changed, loop re-enabled, cron removed, loop disabled), and
--   NOTIFY ceaseless_schedule {"table": "loops", "id"} asks the listeners
--   for a new one;
-- - re-enabling a stopped loop clears stopped_reason and stopped_at and sets
--   policy_from_iteration to its latest iteration: the chain goes on
--   (iteration numbers, parent_run_id) while the repeat policy counts again;
--   re-enabling an on_completion loop starts its next iteration at once
--   when none is live (loops_schedule, through _fire_loop, 56_loop_firing.sql);
-- - the rules a loop's triggers share with a routine's (cron schedule and
--   timezone, webhook scheme, when a next slot is asked for) are the trigger
--   layer's (31_trigger_validation.sql, 32_schedules.sql);
-- - a loop with a live iteration cannot be deleted (CE409): cancel the
--   iteration first, or its jobs would run on for a loop that is gone.

-- The until-event names a policy accepts, and what each means. The seed's
-- example says {event: 'ok'}: it is read as 'succeeded' (an iteration's
-- outcome is its run's status) and stored as such, so the policy, the view
-- and the completion trigger know only the two statuses.
create or replace function _loop_until_event(p_event jsonb)
returns text
language sql immutable
as $$
    select case p_event #>> '{}'
               when 'succeeded' then 'succeeded'
               when 'ok' then 'succeeded'
               when 'failed' then 'failed'
           end
    where jsonb_typeof(p_event) = 'string';
$$;

comment on function _loop_until_event(jsonb) is
    'The run status an until-policy event names (succeeded, failed; the seed''s ''ok'' is '
    'succeeded), or NULL when it names none.';

-- Check a loop's triggers and repeat_policy in full, filling their defaults.
-- Returns the row to store.
create or replace function _validated_loop(p_row loops)
returns loops
language plpgsql
as $$
declare
    v_triggers jsonb := p_row.triggers;
    v_policy jsonb := p_row.repeat_policy;
    v_spec jsonb;
    v_key text;
begin
    perform _check_not_blank('loops.title', p_row.title);
    perform _refuse_long('loops.title', p_row.title, 'prompt');
    if p_row.description is null then
        perform _invalid_value('loops.description', 'must be text (may be empty)', null);
    end if;
    perform _refuse_long('loops.description', p_row.description, 'prompt');
    -- Every iteration's task starts with it: a blank one asks the agents
    -- nothing.
    perform _check_not_blank('loops.task_template', p_row.task_template);
    perform _refuse_long('loops.task_template', p_row.task_template, 'prompt');
    perform _check_not_blank('loops.user_id', p_row.user_id);

    -- triggers -------------------------------------------------------------
    if v_triggers is null or jsonb_typeof(v_triggers) <> 'object' then
        perform _invalid_value('loops.triggers',
                               'must be an object {cron?, timezone?, on_completion?, webhook_enabled?, '
                               'webhook_scheme?, event?}',
                               v_triggers);
    end if;
    v_key := _unknown_key(v_triggers,
                          '{cron, timezone, on_completion, webhook_enabled, webhook_scheme, event}');
    if v_key is not null then
        perform _invalid_value('loops.triggers', format(
            'unknown key %s (known: cron, timezone, on_completion, webhook_enabled, webhook_scheme, '
            'event)', to_jsonb(left(v_key, 60))), v_triggers);
    end if;
    if jsonb_typeof(v_triggers -> 'event') = 'null' then
        v_triggers := v_triggers - 'event';
    end if;
    if v_triggers ? 'event' then
        if jsonb_typeof(v_triggers -> 'event') <> 'object' then
            perform _invalid_value('loops.triggers.event',
                                   'must be an object {pattern, channel?}', v_triggers -> 'event');
        end if;
        v_key := _unknown_key(v_triggers -> 'event', '{pattern, channel}');
        if v_key is not null then
            perform _invalid_value('loops.triggers.event', format(
                'unknown key %s (known: pattern, channel)', to_jsonb(left(v_key, 60))),
                v_triggers -> 'event');
        end if;
        v_triggers := jsonb_set(v_triggers, '{event}',
                                _validated_event('loops.triggers.event', v_triggers -> 'event'));
    end if;
    if jsonb_typeof(v_triggers -> 'cron') = 'null' then
        v_triggers := v_triggers - 'cron';
    end if;
    v_triggers := _validated_trigger('loops.triggers', v_triggers, 'cron', false, 'webhook_scheme');
    foreach v_key in array array['on_completion', 'webhook_enabled'] loop
        if v_triggers ? v_key and jsonb_typeof(v_triggers -> v_key) <> 'boolean' then
            perform _invalid_value('loops.triggers.' || v_key, 'must be true or false',
                                   v_triggers -> v_key);
        end if;
    end loop;

    -- repeat_policy ---------------------------------------------------------
    if v_policy is null or jsonb_typeof(v_policy) <> 'object'
       or v_policy ->> 'kind' is null
       or (v_policy ->> 'kind') not in ('infinite', 'iters', 'until') then
        perform _invalid_value('loops.repeat_policy.kind', 'must be infinite, iters or until',
                               coalesce(v_policy -> 'kind', v_policy));
    end if;
    v_key := _unknown_key(v_policy, '{kind, spec}');
    if v_key is not null then
        perform _invalid_value('loops.repeat_policy', format('unknown key %s (known: kind, spec)',
                                                      to_jsonb(left(v_key, 60))), v_policy);
    end if;
    v_spec := coalesce(nullif(v_policy -> 'spec', 'null'::jsonb), '{}'::jsonb);
    if jsonb_typeof(v_spec) <> 'object' then
        perform _invalid_value('loops.repeat_policy.spec', 'must be an object', v_spec);
    end if;
    case v_policy ->> 'kind'
    when 'infinite' then
        if v_spec <> '{}'::jsonb then
            perform _invalid_value('loops.repeat_policy.spec',
                                   'an infinite policy takes no spec', v_spec);
        end if;
    when 'iters' then
        v_key := _unknown_key(v_spec, '{n}');
        if v_key is not null then
            perform _invalid_value('loops.repeat_policy.spec', format(
                'unknown key %s (an iters policy takes {n})', to_jsonb(left(v_key, 60))), v_spec);
        end if;
        perform _check_positive_int('loops.repeat_policy.spec.n', v_spec -> 'n',
                                    p_required => true);
    when 'until' then
        v_key := _unknown_key(v_spec, '{event, match, within_iters}');
        if v_key is not null then
            perform _invalid_value('loops.repeat_policy.spec', format(
                'unknown key %s (an until policy takes {event, within_iters} or '
                '{match, within_iters})', to_jsonb(left(v_key, 60))), v_spec);
        end if;
        if (v_spec ? 'event') = (v_spec ? 'match') then
            perform _invalid_value('loops.repeat_policy.spec',
                                   'an until policy takes exactly one of event and match', v_spec);
        end if;
        if v_spec ? 'event' then
            if _loop_until_event(v_spec -> 'event') is null then
                perform _invalid_value('loops.repeat_policy.spec.event',
                                       'must be succeeded or failed (ok means succeeded)',
                                       v_spec -> 'event');
            end if;
            v_spec := jsonb_set(v_spec, '{event}', to_jsonb(_loop_until_event(v_spec -> 'event')));
        else
            perform _check_pattern('loops.repeat_policy.spec.match', v_spec -> 'match');
        end if;
        -- Required: an until policy that never gives up is an infinite loop
        -- that only looks bounded.
        perform _check_positive_int('loops.repeat_policy.spec.within_iters',
                                    v_spec -> 'within_iters',
                                    'an until policy needs a positive integer', true);
    end case;
    v_policy := case when v_policy ->> 'kind' = 'infinite' then jsonb_build_object('kind', 'infinite')
                     else jsonb_build_object('kind', v_policy ->> 'kind', 'spec', v_spec) end;

    p_row.triggers := v_triggers;
    p_row.repeat_policy := v_policy;
    return p_row;
end;
$$;

comment on function _validated_loop(loops) is
    'Validate a loop''s title, description, task_template, triggers and repeat_policy (CE422 '
    'naming field, rule, value) and fill their defaults.';

-- The users row of a loop owner's handle, created on first use. Security
-- definer through its caller (the validation trigger): a user role never
-- writes users itself.
create or replace function _loop_creator(p_handle text)
returns uuid
language plpgsql
as $$
declare
    v_id uuid;
begin
    select id into v_id from users where handle = p_handle;
    if v_id is null then
        insert into users (handle) values (p_handle)
        on conflict (handle) do nothing
        returning id into v_id;
        if v_id is null then
            select id into v_id from users where handle = p_handle;
        end if;
    end if;
    return v_id;
end;
$$;

comment on function _loop_creator(text) is
    'The users row whose handle is a loop owner''s role name, created on first use '
    '(loops.created_by).';

create or replace function _tg_loops_validate()
returns trigger
language plpgsql
as $$
declare
    v_webhook boolean := coalesce((new.triggers ->> 'webhook_enabled')::boolean, false);
    v_was_webhook boolean;
begin
    perform _check_flow_controls('loops', new.overlap_policy, new.debounce_secs,
                                 new.debounce_max_secs);
    -- Checked here, before the column's NOT NULL and CHECK, so the error
    -- names the field, the rule and the value.
    if new.min_interval_secs is null or new.min_interval_secs not between 0 and 86400 then
        perform _invalid_value('loops.min_interval_secs',
                               'must be a whole number of seconds from 0 (unpaced) to 86400',
                               to_jsonb(new.min_interval_secs));
    end if;
    if tg_op = 'UPDATE'
       and new.title = old.title and new.description = old.description
       and new.task_template = old.task_template and new.triggers = old.triggers
       and new.repeat_policy = old.repeat_policy and new.user_id = old.user_id then
        -- Runtime bookkeeping (next_fire_at, last_run_id, stopping) re-checks
        -- nothing.
        null;
    else
        new := _validated_loop(new);
        v_webhook := coalesce((new.triggers ->> 'webhook_enabled')::boolean, false);
    end if;

    -- The credential is generated here and nowhere else: one chosen by hand
    -- could be guessed, or copied from another system.
    -- The error names the column that was set (the token when both were).
    if tg_op = 'INSERT' then
        if new.webhook_token is not null or new.webhook_signing_key is not null then
            perform _invalid_value(case when new.webhook_token is not null
                                        then 'loops.webhook_token'
                                        else 'loops.webhook_signing_key' end,
                                   'is generated when triggers.webhook_enabled is true; do not set '
                                   'it',
                                   '"(hidden)"');
        end if;
        v_was_webhook := false;
    else
        if new.webhook_token is distinct from old.webhook_token
           or new.webhook_signing_key is distinct from old.webhook_signing_key then
            perform _invalid_value(case when new.webhook_token is distinct from old.webhook_token
                                        then 'loops.webhook_token'
                                        else 'loops.webhook_signing_key' end,
                                   'is generated when triggers.webhook_enabled is turned on; to '
                                   'rotate it, set webhook_enabled false, then true',
                                   '"(hidden)"');
        end if;
        v_was_webhook := coalesce((old.triggers ->> 'webhook_enabled')::boolean, false);
    end if;
    if v_webhook and not v_was_webhook then
        new.webhook_token := 'loop_' || _webhook_new_key('ceaseless');
        new.webhook_signing_key := _webhook_new_key(new.triggers ->> 'webhook_scheme');
    elsif v_webhook and tg_op = 'UPDATE' and (new.triggers ->> 'webhook_scheme')
                         is distinct from (old.triggers ->> 'webhook_scheme') then
        -- A key is in its scheme's form (standard: whsec_ and base64), so a
        -- new scheme gets a new key; the token, the URL senders know, stays.
        new.webhook_signing_key := _webhook_new_key(new.triggers ->> 'webhook_scheme');
    elsif not v_webhook then
        new.webhook_token := null;
        new.webhook_signing_key := null;
    end if;

    if tg_op = 'INSERT' then
        new.workspace_id := coalesce(new.workspace_id, _default_workspace());
        new.created_by := coalesce(new.created_by, _loop_creator(new.user_id));
        -- A new loop starts its own history: it was never stopped.
        new.stopped_reason := null;
        new.stopped_at := null;
        new.policy_from_iteration := 0;
        new.last_run_id := null;
    end if;

    -- Re-enabling a stopped loop: the chain continues, the policy counts
    -- again from the latest iteration (or an iters {n: 3} loop would stop at
    -- once).
    if tg_op = 'UPDATE' and new.enabled and not old.enabled and old.stopped_reason is not null then
        new.stopped_reason := null;
        new.stopped_at := null;
        new.policy_from_iteration := coalesce(
            (select max(r.iteration) from topology_runs r where r.loop_id = new.id), 0);
    end if;

    -- next_fire_at is the listener's to compute (croniter): clear it whenever
    -- the answer may have changed, so a stale slot never fires.
    if not new.enabled or not (new.triggers ? 'cron') then
        new.next_fire_at := null;
    elsif tg_op = 'UPDATE'
          and _schedule_changed(new.triggers ->> 'cron', new.triggers ->> 'timezone', new.enabled,
                                old.triggers ->> 'cron', old.triggers ->> 'timezone', old.enabled)
    then
        new.next_fire_at := null;
        new.last_error := null;
    end if;
    new.updated_at := case when tg_op = 'UPDATE' then now() else new.updated_at end;
    return new;
end;
$$;

comment on function _tg_loops_validate() is
    'Before INSERT/UPDATE on loops: validate the configuration, fill defaults (workspace, creator, '
    'timezone), generate / keep / clear the webhook credential, reset a stopped loop''s policy '
    'count on re-enable, and clear next_fire_at whenever the schedule may have changed.';

-- After a loop is stored: ask for a next slot when it needs one, and resume
-- an on_completion chain that was re-enabled with nothing live.
create or replace function _tg_loops_schedule()
returns trigger
language plpgsql
as $$
begin
    perform _ask_for_next_fire('loops', new.id, new.triggers ->> 'cron', new.enabled,
                               new.next_fire_at);
    -- Re-enabling an on_completion loop continues the chain at once: waiting
    -- for a completion that will never come (nothing is live) would leave it
    -- enabled and idle. _fire_loop records a skip when an iteration is live.
    if tg_op = 'UPDATE' and new.enabled and not old.enabled
       and coalesce((new.triggers ->> 'on_completion')::boolean, false)
       and not exists (select from topology_runs r
                       where r.loop_id = new.id
                         and r.status in ('pending', 'running', 'awaiting_approval')) then
        perform _fire_loop(new.id, 'on_completion', 're-enabled', null, now());
    end if;
    return null;
end;
$$;

comment on function _tg_loops_schedule() is
    'After a loop is inserted or updated: NOTIFY ceaseless_schedule when it needs a next_fire_at; '
    'start the next iteration of an on_completion loop that was re-enabled with none live.';

-- loops_validate, loops_schedule and loops_changed (25_notify_audit.sql)
-- fire for an INSERT and for an UPDATE of any column but bookkeeping
-- (_update_of_all_but): every iteration writes its loop's last_run_id, and a
-- cron slot its next_fire_at, and neither changes what they judge or audit,
-- nor leaves a loop waiting for a slot.
do $$
declare
    v_columns constant text := _update_of_all_but('ceaseless.loops',
                                                   array['next_fire_at', 'last_run_id']);
begin
    execute format('create or replace trigger loops_validate '
                   'before insert or update of %s on ceaseless.loops '
                   'for each row execute function ceaseless._tg_loops_validate()',
                   v_columns);
    execute format('create or replace trigger loops_schedule '
                   'after insert or update of %s on ceaseless.loops '
                   'for each row execute function ceaseless._tg_loops_schedule()',
                   v_columns);
    execute format('create or replace trigger loops_changed '
                   'after insert or update of %s or delete on ceaseless.loops '
                   'for each row execute function ceaseless._tg_loops_changed()',
                   v_columns);
end;
$$;

-- Deleting a loop deletes its iterations (ON DELETE CASCADE); one still live
-- would leave its jobs running for nothing, with no run to record their end.
-- Refused: cancel it first (cancel_topology_run), which also stops the loop.
create or replace function _tg_loops_delete()
returns trigger
language plpgsql
as $$
declare
    v_live uuid;
begin
    select r.id into v_live from topology_runs r
    where r.loop_id = old.id and r.status in ('pending', 'running', 'awaiting_approval');
    if v_live is not null then
        raise exception 'loops: loop % has a live iteration (run %); cancel it first', old.id, v_live
            using errcode = 'CE409', table = 'loops',
                  hint = format('select ceaseless.cancel_topology_run(%L); then delete the loop.',
                                v_live);
    end if;
    return old;
end;
$$;

comment on function _tg_loops_delete() is
    'Before a loop is deleted: refuse (CE409) while an iteration is live, so no job runs on for a '
    'deleted loop.';

create or replace trigger loops_delete
    before delete on loops
    for each row execute function _tg_loops_delete();

-- A loop holding a credential never prints it in a constraint error.
select _install_quiet_checks('loops', 'new.webhook_token is not null',
                             array['webhook_token', 'webhook_signing_key']);
