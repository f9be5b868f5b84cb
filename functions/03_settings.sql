-- Settings: what a value of ceaseless.settings may be, checked when it is
-- written, so a bad value fails the operator's UPDATE rather than every claim,
-- fire or delivery that reads it later.
--
-- Called by: PostgreSQL, before an INSERT or UPDATE of a settings row
-- (settings_validate); the default_agent setting has its own trigger, beside
-- the rule it serves (13_default_agent.sql).
-- Guarantees: a numeric setting the SQL functions read (_setting_int) holds an
-- integer within its range (_setting_range): `lease_secs = 'soon'` would make
-- every claim fail with a cast error, `rate_limit_max_wait_secs = -1` would
-- make every reported reset a moment in the past. notification_sinks is a
-- JSON object of sinks each of which can deliver (_notification_sink_problem,
-- 60_notifications.sql). Each refusal is CE422 naming the key, the rule and the
-- value; forge_token_source has the shape listener/forge/tokens.py reads, and
-- its refusal never quotes the value (a token pasted into it by mistake must
-- not be echoed). Keys this file does not know (an operator's note, a later
-- version's setting) are stored as given. Nothing is locked or written.

-- The range of each numeric setting, inclusive. NULL: not a numeric setting.
create or replace function _setting_range(p_key text)
returns int8range
language sql immutable
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
        -- Fires a buffer_all routine or loop keeps waiting: zero would make
        -- buffer_all skip, and each is a row fire_held reads.
        when 'overlap_buffer_max' then int8range(1, 100000, '[]')
        -- Audit rows younger than this are never pruned: at least a day, so
        -- a prune can never empty the log of what just happened.
        when 'audit_log_min_retention_secs' then int8range(86400, 2147483647, '[]')
        -- Slots one backfill call may fire: each is a run and a job.
        when 'backfill_max' then int8range(1, 100000, '[]')
        -- How long finished rows of each kind are kept (96_retention.sql);
        -- 0 keeps them forever. Any positive period is safe: live rows and
        -- the rows a live rule reads are kept whatever their age.
        when 'retention_jobs_secs' then int8range(0, 2147483647, '[]')
        when 'retention_routine_runs_secs' then int8range(0, 2147483647, '[]')
        when 'retention_topology_runs_secs' then int8range(0, 2147483647, '[]')
        when 'retention_events_secs' then int8range(0, 2147483647, '[]')
        when 'retention_notifications_secs' then int8range(0, 2147483647, '[]')
        when 'retention_late_results_secs' then int8range(0, 2147483647, '[]')
        -- The floor audit_log_min_retention_secs applies on top, at prune time.
        when 'retention_audit_log_secs' then int8range(0, 2147483647, '[]')
        -- Between a listener's prunes: at most a week, so a table never grows
        -- for long past its retention.
        when 'prune_interval_secs' then int8range(1, 604800, '[]')
    end;
$$;

comment on function _setting_range(text) is
    'The inclusive range of a numeric setting (lease_secs, retry_*, routine_max_running, '
    'webhook_*, notification_max_attempts, rate_limit_max_wait_secs, topology_upstream_chars, '
    'loop_prior_context_chars, forge_min_interval_secs, forge_plan_max_children, '
    'audit_log_min_retention_secs, backfill_max, overlap_buffer_max, retention_*_secs, '
    'prune_interval_secs); NULL for any other key.';

-- What is wrong with a forge_token_source value, or NULL. The shape:
-- {"env": {forge: variable}, "label_env": {forge: variable}, "file": path,
--  "hosts": {forge: [origin, …]}}, every key optional. hosts binds the
-- whole-forge tokens (env, label_env, the secrets file's forge entry) to the
-- origins named: a token goes to no other (docs/forge.md, "Tokens").
create or replace function _forge_token_source_problem(p_value jsonb)
returns text
language sql immutable
as $$
    select coalesce(
        case when jsonb_typeof(p_value) <> 'object' then ': must be a JSON object' end,
        case when _unknown_key(p_value, '{env, label_env, file, hosts}') is not null
             then ': the only keys are env, label_env, file and hosts' end,
        (select format('.%s: must be an object {forge: variable name} or null', s)
         from unnest(array['env', 'label_env']) s
         where jsonb_typeof(p_value -> s) not in ('object', 'null') limit 1),
        (select case when e.key not in ('github', 'gitea')
                         then format('.%s: the keys must be github or gitea', s)
                     else format('.%s.%s: must name an environment variable (letters, digits '
                                 'and _, not starting with a digit) or be null', s, e.key) end
         from unnest(array['env', 'label_env']) s
         cross join lateral jsonb_each(
             case jsonb_typeof(p_value -> s) when 'object' then p_value -> s else '{}' end) e
         where e.key not in ('github', 'gitea')
            or (jsonb_typeof(e.value) <> 'null'
                and (jsonb_typeof(e.value) <> 'string'
                     or (e.value #>> '{}') !~ '^[A-Za-z_][A-Za-z0-9_]{0,127}$'))
         limit 1),
        case when jsonb_typeof(p_value -> 'file') not in ('string', 'null')
                  or (p_value ->> 'file') !~ '^/'
                  or char_length(p_value ->> 'file') > 4096
             then '.file: must be an absolute path or null' end,
        case when jsonb_typeof(p_value -> 'hosts') not in ('object', 'null')
             then '.hosts: must be an object {forge: [origin, …]} or null' end,
        (select case when e.key not in ('github', 'gitea')
                         then '.hosts: the keys must be github or gitea'
                     else format('.hosts.%s: must be a list of at most 20 origins, or null',
                                 e.key) end
         from jsonb_each(case jsonb_typeof(p_value -> 'hosts')
                             when 'object' then p_value -> 'hosts' else '{}' end) e
         where e.key not in ('github', 'gitea')
            or jsonb_typeof(e.value) not in ('array', 'null')
            or (jsonb_typeof(e.value) = 'array' and jsonb_array_length(e.value) > 20)
         limit 1),
        -- An origin is scheme, host and port only: a path or a user would
        -- suggest a narrower binding than the one the listener enforces.
        (select format('.hosts.%s[%s]: must be an origin scheme://host[:port] (http or https, '
                       'no path, no user), such as https://gitea.example.com', e.key, o.n - 1)
         from jsonb_each(case jsonb_typeof(p_value -> 'hosts')
                             when 'object' then p_value -> 'hosts' else '{}' end) e
         cross join lateral jsonb_array_elements(
             case jsonb_typeof(e.value) when 'array' then e.value else '[]' end)
             with ordinality o(origin, n)
         where jsonb_typeof(o.origin) <> 'string'
            or (o.origin #>> '{}')
               !~* '^https?://([a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*|\[[0-9a-f:.]+\])(:[0-9]{1,5})?/?$'
            or coalesce(substring(o.origin #>> '{}' from ':([0-9]{1,5})/?$')::integer, 1)
               not between 1 and 65535
         limit 1));
$$;

comment on function _forge_token_source_problem(jsonb) is
    'What is wrong with a forge_token_source value ({env, label_env: {forge: variable}, file: '
    'absolute path, hosts: {forge: [origin]}}), or NULL; never quotes the value.';

create or replace function _tg_settings_validate()
returns trigger
language plpgsql
as $$
declare
    v_range constant int8range := _setting_range(new.key);
    v_text text;
    v_value bigint;
    v_sink text;
    v_problem text;
begin
    if new.key = 'forge_token_source' then
        v_problem := _forge_token_source_problem(new.value);
        if v_problem is not null then
            raise exception 'settings.forge_token_source%', v_problem
                using errcode = 'CE422', table = 'settings', column = 'value';
        end if;
        return new;
    end if;
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
    '(_setting_range), forge_token_source must have its shape (_forge_token_source_problem); '
    'CE422 names the key, the rule and (numeric settings) the value.';

create or replace trigger settings_validate
    before insert or update on settings
    for each row execute function _tg_settings_validate();
