-- Settings: the numeric ones and the notification sinks are checked when
-- they are written.
--
-- Called by: PostgreSQL, before an INSERT or UPDATE of a settings row.
-- Guarantees: a numeric setting the SQL functions read (_setting_int) holds an
-- integer within its range, and notification_sinks a JSON object of sinks each
-- of which can deliver (_notification_sink_problem, 60_notifications.sql), or
-- the write fails with CE422 naming the key, the rule and the value. Without
-- it, `lease_secs = 'soon'` was stored and every claim then failed with a
-- cast error, and `rate_limit_max_wait_secs = -1` made every reported reset a
-- moment in the past. Keys this file does not
-- know (an operator's note, a later version's setting) are stored as given.

set local search_path = ceaseless, pg_catalog, pg_temp;

-- The range of each numeric setting, inclusive. NULL: not a numeric setting.
create or replace function _setting_range(p_key text)
returns int8range
language sql immutable
set search_path = pg_catalog, ceaseless, pg_temp
as $$
    select case p_key
        -- A lease under 2 s cannot be renewed in time (a quarter of it is
        -- the fence margin); over a day, a dead listener's jobs wait a day.
        when 'lease_secs' then int8range(2, 86400, '[]')
        when 'retry_base_secs' then int8range(1, 86400, '[]')
        when 'retry_max_secs' then int8range(1, 2592000, '[]')
        -- Zero stops every routine run from starting: an emergency brake.
        when 'routine_max_running' then int8range(0, 2147483647, '[]')
        when 'webhook_window_secs' then int8range(1, 86400, '[]')
        -- A body reaches the job's prompt, whose cap is 2,000,000 characters
        -- (_input_cap('job_prompt')): a larger body could never fire.
        when 'webhook_max_body_bytes' then int8range(1, 1900000, '[]')
        when 'notification_max_attempts' then int8range(1, 1000, '[]')
        -- Zero: a reported reset is never waited for beyond the retry delay.
        when 'rate_limit_max_wait_secs' then int8range(0, 604800, '[]')
        when 'topology_upstream_chars' then int8range(0, 1000000, '[]')
        when 'loop_prior_context_chars' then int8range(0, 1000000, '[]')
        -- The floor on a tracked repository's poll interval.
        when 'forge_min_interval_secs' then int8range(1, 86400, '[]')
        -- Children per plan: each is an issue on the forge and a job.
        when 'forge_plan_max_children' then int8range(0, 100, '[]')
        -- Audit rows younger than this are never pruned: at least a day, so
        -- a prune can never empty the log of what just happened.
        when 'audit_log_min_retention_secs' then int8range(86400, 2147483647, '[]')
    end;
$$;

comment on function _setting_range(text) is
    'The inclusive range of a numeric setting (lease_secs, retry_*, routine_max_running, '
    'webhook_*, notification_max_attempts, rate_limit_max_wait_secs, topology_upstream_chars, '
    'loop_prior_context_chars, forge_min_interval_secs, forge_plan_max_children, '
    'audit_log_min_retention_secs); NULL for any other key.';

create or replace function _tg_settings_validate()
returns trigger
language plpgsql
set search_path = pg_catalog, ceaseless, pg_temp
as $$
declare
    v_range constant int8range := _setting_range(new.key);
    v_text text;
    v_value bigint;
    v_sink text;
    v_problem text;
begin
    -- Prevents storing sinks no notification can be delivered through (a
    -- JSON string holding the object, a webhook without a url): each would
    -- fail only at delivery. The problem named is the one delivery names;
    -- the value is never shown, since sinks hold credentials.
    if new.key = 'notification_sinks' then
        if jsonb_typeof(new.value) is distinct from 'object' then
            raise exception 'settings.notification_sinks: must be a JSON object mapping sink names '
                            'to their configuration, e.g. {"default": {"type": "log"}}; got a %',
                coalesce(jsonb_typeof(new.value), 'NULL')
                using errcode = 'CE422', table = 'settings', column = 'value';
        end if;
        for v_sink in select k from jsonb_object_keys(new.value) k order by k loop
            v_problem := _notification_sink_problem(v_sink, new.value);
            if v_problem is not null then
                raise exception 'settings.notification_sinks: %', v_problem
                    using errcode = 'CE422', table = 'settings', column = 'value';
            end if;
        end loop;
        return new;
    end if;
    if v_range is null then
        return new;
    end if;
    -- A JSON number or a string of digits: _setting_int reads either.
    if jsonb_typeof(new.value) in ('number', 'string') then
        v_text := new.value #>> '{}';
    end if;
    if v_text ~ '^-?[0-9]{1,18}$' then
        v_value := v_text::bigint;
    end if;
    if v_value is null or not v_range @> v_value then
        raise exception 'settings.%: must be an integer from % to %; got %', new.key,
            lower(v_range), upper(v_range) - 1, left(new.value::text, 100)
            using errcode = 'CE422', table = 'settings', column = 'value';
    end if;
    return new;
end;
$$;

comment on function _tg_settings_validate() is
    'Before INSERT/UPDATE on settings: a numeric setting must be an integer within its range '
    '(_setting_range); CE422 names the key, the range and the value.';

create or replace trigger settings_validate
    before insert or update on settings
    for each row execute function _tg_settings_validate();
