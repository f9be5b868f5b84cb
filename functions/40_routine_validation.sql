-- Routines: validation of what users store.
--
-- Called by: PostgreSQL (BEFORE and AFTER triggers on routines).
-- Guarantees: nothing half-valid is stored: a routine is checked in full on
-- every INSERT and UPDATE that changes its configuration, and the error names
-- the field, the rule and the value (CE422); an event routine stores the
-- literal its pattern requires (event_literal), which the events trigger
-- matches first; NOTIFY ceaseless_schedule when a cron routine needs its
-- next_fire_at (created, schedule or timezone changed, re-enabled);
-- operator-visible changes are audited. The rules a routine's trigger shares
-- with a loop's (cron schedule and timezone, webhook scheme, patterns run
-- against untrusted text, when a next slot is asked for) are the trigger
-- layer's (31_trigger_validation.sql, 32_schedules.sql).

-- Check a routine's trigger_config and action_config in full, filling their
-- defaults (timezone UTC, channel null, context_paths []). Returns the row to
-- store.
create or replace function _validated_routine(p_row routines)
returns routines
language plpgsql
as $$
declare
    v_trigger jsonb := p_row.trigger_config;
    v_action jsonb := p_row.action_config;
    v_error text;
    v_path jsonb;
begin
    -- A blank user_id is also a routine no event can ever fire.
    perform _check_not_blank('routines.name', p_row.name);
    perform _check_not_blank('routines.user_id', p_row.user_id);

    case p_row.trigger_type
    when 'cron' then
        v_trigger := _validated_trigger('routines.trigger_config', v_trigger, 'schedule', true,
                                        null);
    when 'event' then
        v_trigger := _validated_event('routines.trigger_config', v_trigger);
    when 'webhook' then
        if not _is_text(v_trigger -> 'path')
           or (v_trigger ->> 'path') !~ _webhook_token_pattern() then
            perform _invalid_value('routines.trigger_config.path',
                                   'a webhook routine needs a URL-safe path (letters, digits, . _ ~ -)',
                                   v_trigger -> 'path');
        end if;
        if not _is_text(v_trigger -> 'secret') or length(v_trigger ->> 'secret') < 16 then
            perform _invalid_value('routines.trigger_config.secret',
                                   'a webhook routine needs a signing secret of at least 16 characters, not all blank',
                                   to_jsonb(case when v_trigger ? 'secret' then '(hidden)' end));
        end if;
        v_trigger := _validated_trigger('routines.trigger_config', v_trigger, null, false, 'scheme');
        v_error := _webhook_secret_error(v_trigger ->> 'scheme', v_trigger ->> 'secret');
        if v_error is not null then
            perform _invalid_value('routines.trigger_config.secret', v_error, '"(hidden)"');
        end if;
    when 'manual' then
        null;
    else
        -- An unknown type: the CHECK constraint names it once the row is built.
        null;
    end case;

    case p_row.action_type
    when 'lightweight' then
        perform _check_text('routines.action_config.prompt', v_action -> 'prompt',
                            'a lightweight routine needs a prompt that is not blank');
        perform _refuse_long('routines.action_config.prompt', v_action ->> 'prompt', 'prompt');
        if v_action -> 'context_paths' is null then
            v_action := v_action || '{"context_paths": []}';
        elsif jsonb_typeof(v_action -> 'context_paths') <> 'array' then
            perform _invalid_value('routines.action_config.context_paths',
                                   'must be an array of relative paths',
                                   v_action -> 'context_paths');
        end if;
        for v_path in select value from jsonb_array_elements(v_action -> 'context_paths') loop
            -- Read relative to the workspace root, never outside it.
            if not _is_workspace_path(v_path) then
                perform _invalid_value('routines.action_config.context_paths',
                                       'each entry must be a relative path inside the workspace', v_path);
            end if;
        end loop;
        perform _check_positive_int('routines.action_config.max_tokens',
                                    v_action -> 'max_tokens');
    when 'full_job' then
        perform _check_text('routines.action_config.title', v_action -> 'title',
                            'a full_job routine needs a title that is not blank');
        perform _check_text('routines.action_config.description', v_action -> 'description',
                            'a full_job routine needs a description that is not blank');
        perform _refuse_long('routines.action_config.title', v_action ->> 'title', 'prompt');
        perform _refuse_long('routines.action_config.description', v_action ->> 'description',
                             'prompt');
        perform _check_positive_int('routines.action_config.max_iterations',
                                    v_action -> 'max_iterations');
    else
        null;
    end case;

    p_row.trigger_config := v_trigger;
    p_row.action_config := v_action;
    return p_row;
end;
$$;

comment on function _validated_routine(routines) is
    'Validate a routine''s trigger_config and action_config (CE422 naming field, rule, value) '
    'and fill their defaults.';

-- The longest literal that every string matching the PostgreSQL regular
-- expression p_pattern must contain, or '' when none can be promised.
--
-- Conservative by construction: it reads only a top-level sequence of atoms;
-- anything it does not fully understand (alternation, embedded options,
-- back-references, escapes other than escaped punctuation) yields '' or ends
-- the current run of literal characters. A quantifier that can repeat zero
-- times (?, *, {0,...}) takes its character back out of the run; one that must
-- match at least once (+, {n,...}) keeps it but ends the run. A property test
-- checks the promise against the regex engine itself.
--
-- Linear in the pattern's length: each character is read once or twice, by
-- subscript of an array (PL/pgSQL keeps array variables expanded, so v_chars[i]
-- and v_lit[n] := c cost the same at any index). Reading characters with
-- substr(), which counts from the start of a multibyte text on every call,
-- and growing the run by concatenation, which copies it, would be quadratic:
-- a 40,000-character pattern took 6.8 s that way.
create or replace function _regex_required_literal(p_pattern text)
returns text
language plpgsql immutable
as $$
declare
    v_chars constant text[] := string_to_array(p_pattern, null);
    v_len constant integer := coalesce(cardinality(v_chars), 0);
    v_i integer := 1;
    v_c text;
    v_next text;
    -- The literal characters read so far. The current run is
    -- v_lit[v_run_start .. v_lit_len]; the best run ended so far starts at
    -- v_best_start and is v_best_len long. Runs only ever grow at the end of
    -- v_lit, so a finished run is never overwritten.
    v_lit text[] := '{}';
    v_lit_len integer := 0;
    v_run_start integer := 1;
    v_best_start integer := 1;
    v_best_len integer := 0;
    v_end_run boolean;
    v_depth integer;
    v_from integer;
    v_zero_min boolean;
begin
    if p_pattern is null or p_pattern = '' then
        return '';
    end if;
    -- Director prefixes: ***= makes the rest a plain literal; other *** forms
    -- and embedded options (?...) change the rules, so promise nothing.
    if left(p_pattern, 4) = '***=' then
        return substr(p_pattern, 5);
    end if;
    if left(p_pattern, 3) = '***' or left(p_pattern, 2) = '(?' then
        return '';
    end if;
    while v_i <= v_len loop
        v_c := v_chars[v_i];
        v_next := v_chars[v_i + 1];  -- NULL past the end
        v_end_run := true;
        if v_c = '|' then
            return '';  -- alternation: no single literal is required
        elsif v_c = '\' then
            if v_next ~ '^[^A-Za-z0-9]$' then
                -- Escaped punctuation stands for itself, unless a quantifier
                -- follows (handled when the quantifier is read).
                v_lit_len := v_lit_len + 1;
                v_lit[v_lit_len] := v_next;
                v_end_run := false;
            end if;
            -- Else a class, a back-reference or a control escape: not literal.
            v_i := v_i + 1;
        elsif v_c in ('*', '?', '+', '{') then
            v_zero_min := v_c <> '+';
            if v_c = '{' then
                -- A bound is {m}, {m,} or {m,n} (digits may be absent): read
                -- it to its }, else the brace is not a bound.
                v_from := v_i + 1;
                while ascii(v_chars[v_from]) between 48 and 57 loop  -- 0-9, in any collation
                    v_from := v_from + 1;
                end loop;
                -- The minimum is zero when its digits are all zeros, or none.
                v_zero_min := ltrim(array_to_string(v_chars[v_i + 1 : v_from - 1], ''), '0') = '';
                if v_chars[v_from] = ',' then
                    v_from := v_from + 1;
                    while ascii(v_chars[v_from]) between 48 and 57 loop
                        v_from := v_from + 1;
                    end loop;
                end if;
                if v_chars[v_from] is distinct from '}' then
                    return '';  -- a brace that is not a bound: promise nothing
                end if;
                -- {} reads as a bound with no minimum, as the pattern did
                -- before (PostgreSQL refuses it at validation anyway).
                v_i := v_from;
            end if;
            if v_zero_min then
                -- The previous atom may be absent: take it back out of the run.
                v_lit_len := greatest(v_lit_len - 1, v_run_start - 1);
            end if;
            -- Else at least once: the character stays, but what follows may
            -- repeat it.
        elsif v_c = '[' then
            -- Skip the bracket expression whole; a ] first is literal.
            v_i := v_i + 1;
            if v_chars[v_i] = '^' then v_i := v_i + 1; end if;
            if v_chars[v_i] = ']' then v_i := v_i + 1; end if;
            while v_i <= v_len and v_chars[v_i] <> ']' loop
                if v_chars[v_i] = '[' and v_chars[v_i + 1] in (':', '.', '=') then
                    return '';  -- named classes and collating elements: give up
                end if;
                v_i := v_i + 1;
            end loop;
        elsif v_c = '(' then
            -- Skip the group whole, counting nested parentheses.
            v_depth := 1;
            v_i := v_i + 1;
            while v_i <= v_len and v_depth > 0 loop
                v_c := v_chars[v_i];
                if v_c = '\' then
                    v_i := v_i + 1;
                elsif v_c = '[' then
                    return '';  -- brackets inside groups: not worth the risk
                elsif v_c = '(' then
                    v_depth := v_depth + 1;
                elsif v_c = ')' then
                    v_depth := v_depth - 1;
                end if;
                v_i := v_i + 1;
            end loop;
            v_i := v_i - 1;
        elsif v_c not in ('.', '^', '$', ')', ']', '}') then
            v_lit_len := v_lit_len + 1;
            v_lit[v_lit_len] := v_c;
            v_end_run := false;
        end if;
        if v_end_run then
            if v_lit_len - v_run_start + 1 > v_best_len then
                v_best_start := v_run_start;
                v_best_len := v_lit_len - v_run_start + 1;
            end if;
            v_run_start := v_lit_len + 1;
        end if;
        v_i := v_i + 1;
    end loop;
    if v_lit_len - v_run_start + 1 > v_best_len then
        v_best_start := v_run_start;
        v_best_len := v_lit_len - v_run_start + 1;
    end if;
    return array_to_string(v_lit[v_best_start : v_best_start + v_best_len - 1], '');
exception when others then
    return '';  -- never let a strange pattern break validation
end;
$$;

comment on function _regex_required_literal(text) is
    'A literal that every match of the regular expression must contain (empty when none is '
    'known): the cheap prefilter of event matching. Linear in the pattern''s length.';

create or replace function _tg_routines_validate()
returns trigger
language plpgsql
as $$
begin
    perform _check_flow_controls('routines', new.overlap_policy, new.debounce_secs,
                                 new.debounce_max_secs);
    if tg_op = 'UPDATE'
       and new.trigger_type = old.trigger_type and new.trigger_config = old.trigger_config
       and new.action_type = old.action_type and new.action_config = old.action_config
       and new.name = old.name and new.user_id = old.user_id then
        -- Runtime bookkeeping (next_fire_at, run counts) re-checks nothing.
        null;
    else
        new := _validated_routine(new);
    end if;

    -- next_fire_at is the listener's to compute (croniter): clear it whenever
    -- the answer may have changed, so a stale slot never fires.
    if new.trigger_type <> 'cron' or not new.enabled then
        new.next_fire_at := null;
    elsif tg_op = 'UPDATE'
          and _schedule_changed(new.trigger_config ->> 'schedule',
                                new.trigger_config ->> 'timezone', new.enabled,
                                case when old.trigger_type = 'cron'
                                     then old.trigger_config ->> 'schedule' end,
                                old.trigger_config ->> 'timezone', old.enabled) then
        new.next_fire_at := null;
        new.last_error := null;
    end if;
    -- Only when the trigger may have changed: every finish batch updates its
    -- routines' counters, and the literal is not free to extract.
    if tg_op = 'INSERT' or new.trigger_type is distinct from old.trigger_type
       or new.trigger_config is distinct from old.trigger_config then
        new.event_literal := case when new.trigger_type = 'event'
                                  then _regex_required_literal(new.trigger_config ->> 'pattern')
                                  else '' end;
    end if;
    new.updated_at := case when tg_op = 'UPDATE' then now() else new.updated_at end;
    return new;
end;
$$;

comment on function _tg_routines_validate() is
    'Before INSERT/UPDATE on routines: validate the configuration, fill defaults, and clear '
    'next_fire_at whenever the schedule may have changed.';

-- Tell listeners which cron routines need a next_fire_at, and audit what an
-- operator changed (runtime bookkeeping is not audited: it is in routine_runs).
create or replace function _tg_routines_changed()
returns trigger
language plpgsql
as $$
begin
    if tg_op = 'DELETE' then
        perform _audit_enabling('routine', tg_op, old.id, old.enabled, null);
        return null;
    end if;
    perform _ask_for_next_fire('routines', new.id,
                               case when new.trigger_type = 'cron'
                                    then new.trigger_config ->> 'schedule' end,
                               new.enabled, new.next_fire_at);
    if tg_op = 'INSERT' then
        perform _audit_enabling('routine', tg_op, new.id, null, new.enabled);
    elsif new.enabled is distinct from old.enabled
          or new.trigger_config is distinct from old.trigger_config
          or new.action_config is distinct from old.action_config then
        perform _audit_enabling('routine', tg_op, new.id, old.enabled, new.enabled,
                                jsonb_build_object('last_error', new.last_error));
    end if;
    return null;
end;
$$;

comment on function _tg_routines_changed() is
    'After a routine changes: NOTIFY ceaseless_schedule when it needs a next_fire_at; audit '
    'operator-visible changes.';

-- Runtime bookkeeping (a cron fire's next_fire_at; a finish batch's
-- last_run_at, run_count, consecutive_failures and state) changes nothing
-- these two triggers judge or announce: they fire for an INSERT, a DELETE,
-- and an UPDATE of any other column (_update_of_all_but), so a fire and a
-- finish pay no trigger call (about 12 µs of a cron fire on PostgreSQL 15).
-- CREATE OR REPLACE, never drop and create: DROP TRIGGER takes ACCESS
-- EXCLUSIVE on the table, stalling even its readers until migrate commits.
do $$
declare
    v_columns constant text := _update_of_all_but(
        'ceaseless.routines',
        array['next_fire_at', 'last_run_at', 'run_count', 'consecutive_failures', 'state']);
begin
    execute format('create or replace trigger routines_validate '
                   'before insert or update of %s on ceaseless.routines '
                   'for each row execute function ceaseless._tg_routines_validate()',
                   v_columns);
    execute format('create or replace trigger routines_changed '
                   'after insert or update of %s or delete on ceaseless.routines '
                   'for each row execute function ceaseless._tg_routines_changed()',
                   v_columns);
end;
$$;
