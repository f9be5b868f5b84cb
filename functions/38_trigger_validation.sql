-- Triggers: the validation rules routines and loops share, written once, and
-- the small tests of JSON values both use.
--
-- Called by: the validation triggers of routines (40_routine_validation.sql)
-- and loops (55_loop_validation.sql), which name their own fields.
-- Guarantees: a cron schedule is a string that is not blank, within the
-- schedule cap, that the cron gate (35_cron.sql) accepts, so the listener can
-- always compute its next slot; its timezone an IANA name, UTC when absent; a
-- webhook's signature scheme one of 46_webhook_schemes.sql; a regular
-- expression run against untrusted text (a routine's event pattern, a loop's
-- until-match) is bounded and free of back-references. Each refusal is CE422
-- naming the field as its table spells it (routines.trigger_config.schedule,
-- loops.triggers.cron), the rule and the value; nothing is locked or written.

set local search_path = ceaseless, pg_catalog, pg_temp;

-- Is a value a JSON string with something other than whitespace in it? Any
-- Unicode whitespace counts as blank (_is_blank), not only spaces.
create or replace function _is_text(p_value jsonb)
returns boolean
language sql immutable
set search_path = pg_catalog, ceaseless, pg_temp
as $$
    -- coalesce: an absent key is NULL, and "not NULL" would let it through.
    select coalesce(jsonb_typeof(p_value) = 'string' and not _is_blank(p_value #>> '{}'), false);
$$;

comment on function _is_text(jsonb) is 'True for a JSON string that is not blank (Unicode whitespace).';

-- Is a value absent, or a positive JSON integer?
create or replace function _is_positive_int_or_null(p_value jsonb)
returns boolean
language sql immutable
set search_path = pg_catalog, ceaseless, pg_temp
as $$
    select p_value is null or jsonb_typeof(p_value) = 'null'
        or (jsonb_typeof(p_value) = 'number' and (p_value #>> '{}') ~ '^[0-9]+$'
            and (p_value #>> '{}')::numeric between 1 and 2147483647);
$$;

comment on function _is_positive_int_or_null(jsonb) is 'True for null/absent or a positive JSON integer.';

-- A trigger object (routines.trigger_config, loops.triggers: p_object) checked
-- and completed where a routine's rules and a loop's are one:
-- - the cron schedule at p_schedule_key, when the object has one (p_cron:
--   it must), and its timezone, UTC when absent; a timezone given beside a
--   schedule key but without a schedule is checked too;
-- - the webhook signature scheme at p_scheme_key (absent means ceaseless): a
--   misspelt one would be a webhook no sender can ever sign for.
-- Returns the object to store.
create or replace function _validated_trigger(
    p_object text, p_config jsonb, p_schedule_key text, p_cron boolean, p_scheme_key text
)
returns jsonb
language plpgsql
set search_path = pg_catalog, ceaseless, pg_temp
as $$
declare
    v_field constant text := p_object || '.' || p_schedule_key;
    v_error text;
begin
    if p_cron or p_config ? p_schedule_key then
        if not _is_text(p_config -> p_schedule_key) then
            perform _invalid_value(v_field, 'must be a cron expression string that is not blank',
                                   p_config -> p_schedule_key);
        end if;
        -- Before _cron_error, which refuses it too but whose message the
        -- error would follow with the whole schedule.
        perform _refuse_long(v_field, p_config ->> p_schedule_key, 'schedule');
        v_error := _cron_error(p_config ->> p_schedule_key);
        if v_error is not null then
            perform _invalid_value(v_field, v_error, p_config -> p_schedule_key);
        end if;
        if coalesce(jsonb_typeof(p_config -> 'timezone'), 'null') = 'null' then
            p_config := p_config || '{"timezone": "UTC"}';
        end if;
    end if;
    if p_schedule_key is not null and coalesce(jsonb_typeof(p_config -> 'timezone'), 'null') <> 'null'
    then
        if jsonb_typeof(p_config -> 'timezone') <> 'string' then
            perform _invalid_value(p_object || '.timezone', 'must be an IANA time zone name',
                                   p_config -> 'timezone');
        end if;
        v_error := _timezone_error(p_config ->> 'timezone');
        if v_error is not null then
            perform _invalid_value(p_object || '.timezone', v_error, p_config -> 'timezone');
        end if;
    end if;
    v_error := case when p_scheme_key is not null
                    then _webhook_scheme_error(p_config -> p_scheme_key) end;
    if v_error is not null then
        perform _invalid_value(p_object || '.' || p_scheme_key, v_error, p_config -> p_scheme_key);
    end if;
    return p_config;
end;
$$;

comment on function _validated_trigger(text, jsonb, text, boolean, text) is
    'Check a trigger object where routines and loops share the rules (cron schedule: not blank, '
    'bounded, accepted by the cron gate; timezone: IANA, UTC when absent; webhook scheme), CE422 '
    'naming the field; returns the object with its defaults filled.';

-- Check a regular expression stored to run against untrusted text (a
-- routine's event pattern against every event of its user, a loop's
-- until-match against every iteration's output): a string that is not blank,
-- within the pattern cap (compiling it, and extracting its literal, cost time
-- in its length), free of back-references, and valid. Back-references are the
-- one feature that makes PostgreSQL's regex engine backtrack:
-- "(a*)(a*)(a*)\3\2\1b?$" held one INSERT INTO events of 1,000 'a's past
-- 4 s; without them it runs as an automaton.
create or replace function _check_pattern(p_field text, p_pattern jsonb)
returns void
language plpgsql
set search_path = pg_catalog, ceaseless, pg_temp
as $$
declare
    v_backreference text;
begin
    if not _is_text(p_pattern) then
        perform _invalid_value(p_field, 'must be a regular expression that is not blank',
                               p_pattern);
    end if;
    perform _refuse_long(p_field, p_pattern #>> '{}', 'pattern');
    v_backreference := _regex_backreference(p_pattern #>> '{}');
    if v_backreference is not null then
        perform _invalid_value(p_field,
                               format('must not contain back-references (%s); write the repeated '
                                      'text out, or for an octal character escape use \x or \u',
                                      v_backreference),
                               p_pattern);
    end if;
    perform '' ~ (p_pattern #>> '{}');
exception when invalid_regular_expression then
    perform _invalid_value(p_field, 'must be a valid regular expression (' || sqlerrm || ')',
                           p_pattern);
end;
$$;

comment on function _check_pattern(text, jsonb) is
    'Refuse (CE422) a regular expression that is blank, too long, uses back-references or does '
    'not compile: the rule for patterns run against untrusted text.';
