-- Triggers: the validation rules routines and loops share, written once.
--
-- Called by: the validation triggers of routines (40_routine_validation.sql)
-- and loops (55_loop_validation.sql), which name their own fields.
-- Guarantees: a cron schedule is a string that is not blank, within the
-- schedule cap, that the cron gate (30_cron.sql) accepts, so the listener can
-- always compute its next slot; its timezone an IANA name, UTC when absent; a
-- webhook's signature scheme one of _webhook_schemes() (35_webhook_schemes.sql);
-- an event trigger (a routine's trigger_config, a loop's triggers.event) is
-- a pattern and a channel or null; a regular expression run against untrusted
-- text (an event pattern, a loop's until-match) is bounded and free of
-- back-references. Each
-- refusal is CE422 naming the field as its table spells it
-- (routines.trigger_config.schedule, loops.triggers.cron), the rule and the
-- value; nothing is locked or written.

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
as $$
declare
    v_field constant text := p_object || '.' || p_schedule_key;
    v_error text;
begin
    if p_cron or p_config ? p_schedule_key then
        perform _check_text(v_field, p_config -> p_schedule_key,
                            'must be a cron expression string that is not blank');
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

-- The first back-reference in a PostgreSQL regular expression (\1 .. \9,
-- \10 and up), or NULL when it has none. PostgreSQL has no other form: no
-- \k<name>, no (?P=name). Conservative: an escape of a nonzero digit is
-- reported wherever it stands, also where the engine would read it as an
-- octal character (write \x or \u for those). A pattern led by ***= is a
-- literal string, so its digits escape nothing.
--
-- A single regular expression, with no back-reference of its own: linear in
-- the pattern's length. An even run of backslashes before the digit escapes
-- itself ("\\1" is a backslash and a 1).
create or replace function _regex_backreference(p_pattern text)
returns text
language sql immutable
as $$
    select case when left(p_pattern, 4) <> '***=' then
        (regexp_match(p_pattern, '(?:^|[^\\])(?:\\\\)*(\\[1-9][0-9]*)'))[1]
    end;
$$;

comment on function _regex_backreference(text) is
    'The first back-reference (\1 and up) in a regular expression, or NULL when it has none.';

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
as $$
declare
    v_backreference text;
begin
    perform _check_text(p_field, p_pattern, 'must be a regular expression that is not blank');
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

-- An event trigger (routines.trigger_config of an event routine, a loop's
-- triggers.event: p_object) checked and completed where a routine's rules
-- and a loop's are one: a pattern run against every event's content, and a
-- channel the event's must equal (ignoring case), or null for any channel.
-- Returns the object to store, its channel written out.
create or replace function _validated_event(p_object text, p_config jsonb)
returns jsonb
language plpgsql
as $$
begin
    perform _check_pattern(p_object || '.pattern', p_config -> 'pattern');
    if p_config -> 'channel' is null then
        p_config := p_config || '{"channel": null}';
    elsif jsonb_typeof(p_config -> 'channel') not in ('string', 'null') then
        perform _invalid_value(p_object || '.channel', 'must be a channel name or null',
                               p_config -> 'channel');
    end if;
    return p_config;
end;
$$;

comment on function _validated_event(text, jsonb) is
    'Check an event trigger where routines and loops share the rules (a bounded pattern without '
    'back-references; a channel name or null), CE422 naming the field; returns it with its '
    'channel written out.';

-- The overlap policy and debounce of a routine or loop (p_table names the
-- table), checked where the rules are one: a known policy (loops have no
-- allow_all: their iterations form one chain), debounce_secs a positive
-- number of seconds, and debounce_max_secs one no shorter than it, given
-- only beside it. Refusals are CE422 naming the column, the rule and the
-- value; the named CHECKs of db/0061 hold the same rules for any writer.
create or replace function _check_flow_controls(
    p_table text, p_policy text, p_secs integer, p_max_secs integer
)
returns void
language plpgsql
as $$
declare
    v_policies constant text[] := case when p_table = 'loops'
        then array['skip', 'buffer_one', 'buffer_all', 'cancel_other']
        else array['skip', 'buffer_one', 'buffer_all', 'cancel_other', 'allow_all'] end;
begin
    if p_policy is null or p_policy <> all (v_policies) then
        perform _invalid_value(p_table || '.overlap_policy',
                               'must be one of ' || array_to_string(v_policies, ', ')
                               || case when p_table = 'loops' and p_policy = 'allow_all'
                                       then ' (a loop''s iterations form one chain: one is live '
                                            'at a time)'
                                       else '' end,
                               to_jsonb(p_policy));
    end if;
    if p_secs <= 0 then
        perform _invalid_value(p_table || '.debounce_secs',
                               'must be a positive number of seconds, or null for no debounce',
                               to_jsonb(p_secs));
    end if;
    if p_max_secs is not null and p_secs is null then
        perform _invalid_value(p_table || '.debounce_max_secs',
                               'needs debounce_secs: it bounds a debounce window',
                               to_jsonb(p_max_secs));
    end if;
    if p_max_secs < p_secs then
        perform _invalid_value(p_table || '.debounce_max_secs',
                               format('must be at least debounce_secs (%s)', p_secs),
                               to_jsonb(p_max_secs));
    end if;
end;
$$;

comment on function _check_flow_controls(text, text, integer, integer) is
    'Refuse (CE422) an unknown overlap_policy (no allow_all for loops), a debounce_secs under 1, '
    'or a debounce_max_secs without debounce_secs or shorter than it.';
