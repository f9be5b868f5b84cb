-- Routines: validation, firing with guardrails, events, manual runs, and the
-- flow of a run's outcome back to routine_runs, routines and notifications.
--
-- Called by: PostgreSQL (triggers on routines, events, job, routine_runs),
-- listeners (fire_cron_routines, set_next_fire, disable_routine), users
-- (run_routine, INSERT INTO events).
-- Guarantees:
-- - nothing half-valid is stored: a routine is checked in full on every INSERT
--   and UPDATE, and the error names the field, the rule and the value (CE422);
-- - a fire and its guardrails are one transaction: the routine row is locked
--   (FOR UPDATE) so concurrent fires of one routine see each other, and the
--   routine_run_gauge row so fires everywhere see each other against the cap;
-- - every fire, and every refused fire, leaves a routine_runs row;
-- - NOTIFY ceaseless_schedule when a cron routine needs its next_fire_at
--   (created, schedule or timezone changed, re-enabled, fired), and
--   ceaseless_run when a routine run starts or ends.

set local search_path = ceaseless, pg_catalog, public;

-- ---------------------------------------------------------------------------
-- Validation
-- ---------------------------------------------------------------------------

-- Raise the one kind of error validation produces: which field, which rule,
-- which value.
create or replace function _invalid(p_field text, p_rule text, p_value jsonb)
returns void
language plpgsql
set search_path = ceaseless, pg_catalog
as $$
begin
    raise exception 'routines.%: %; got %', p_field, p_rule, coalesce(p_value::text, 'nothing')
        using errcode = 'CE422', column = split_part(p_field, '.', 1);
end;
$$;

comment on function _invalid(text, text, jsonb) is
    'Raise CE422 naming the field, the rule and the bad value (routine validation).';

-- Is a value a non-empty JSON string?
create or replace function _is_text(p_value jsonb)
returns boolean
language sql immutable
set search_path = ceaseless, pg_catalog
as $$
    -- coalesce: an absent key is NULL, and "not NULL" would let it through.
    select coalesce(jsonb_typeof(p_value) = 'string' and btrim(p_value #>> '{}') <> '', false);
$$;

comment on function _is_text(jsonb) is 'True for a non-empty JSON string.';

-- Is a value absent, or a positive JSON integer?
create or replace function _is_positive_int_or_null(p_value jsonb)
returns boolean
language sql immutable
set search_path = ceaseless, pg_catalog
as $$
    select p_value is null or jsonb_typeof(p_value) = 'null'
        or (jsonb_typeof(p_value) = 'number' and (p_value #>> '{}') ~ '^[0-9]+$'
            and (p_value #>> '{}')::numeric between 1 and 2147483647);
$$;

comment on function _is_positive_int_or_null(jsonb) is 'True for null/absent or a positive JSON integer.';

-- Check a routine's trigger_config and action_config in full, filling the
-- defaults the spec gives (timezone UTC, channel null, context_paths []).
-- Returns the row to store.
create or replace function _validated_routine(p_row routines)
returns routines
language plpgsql
set search_path = ceaseless, pg_catalog
as $$
declare
    v_trigger jsonb := p_row.trigger_config;
    v_action jsonb := p_row.action_config;
    v_error text;
    v_path jsonb;
begin
    case p_row.trigger_type
    when 'cron' then
        if not _is_text(v_trigger -> 'schedule') then
            perform _invalid('trigger_config.schedule', 'a cron routine needs a schedule string',
                             v_trigger -> 'schedule');
        end if;
        v_error := _cron_error(v_trigger ->> 'schedule');
        if v_error is not null then
            perform _invalid('trigger_config.schedule', v_error, v_trigger -> 'schedule');
        end if;
        if v_trigger -> 'timezone' is null or jsonb_typeof(v_trigger -> 'timezone') = 'null' then
            v_trigger := v_trigger || '{"timezone": "UTC"}';
        end if;
        if jsonb_typeof(v_trigger -> 'timezone') <> 'string' then
            perform _invalid('trigger_config.timezone', 'must be an IANA time zone name',
                             v_trigger -> 'timezone');
        end if;
        v_error := _timezone_error(v_trigger ->> 'timezone');
        if v_error is not null then
            perform _invalid('trigger_config.timezone', v_error, v_trigger -> 'timezone');
        end if;
    when 'event' then
        if not _is_text(v_trigger -> 'pattern') then
            perform _invalid('trigger_config.pattern', 'an event routine needs a regex pattern',
                             v_trigger -> 'pattern');
        end if;
        begin
            perform '' ~ (v_trigger ->> 'pattern');
        exception when invalid_regular_expression then
            perform _invalid('trigger_config.pattern', 'must be a valid regular expression ('
                             || sqlerrm || ')', v_trigger -> 'pattern');
        end;
        if v_trigger -> 'channel' is null then
            v_trigger := v_trigger || '{"channel": null}';
        elsif jsonb_typeof(v_trigger -> 'channel') not in ('string', 'null') then
            perform _invalid('trigger_config.channel', 'must be a channel name or null',
                             v_trigger -> 'channel');
        end if;
    when 'webhook' then
        if not _is_text(v_trigger -> 'path')
           or (v_trigger ->> 'path') !~ '^[A-Za-z0-9._~-]{1,200}$' then
            perform _invalid('trigger_config.path',
                             'a webhook routine needs a URL-safe path (letters, digits, . _ ~ -)',
                             v_trigger -> 'path');
        end if;
        if not _is_text(v_trigger -> 'secret') or length(v_trigger ->> 'secret') < 16 then
            perform _invalid('trigger_config.secret',
                             'a webhook routine needs a signing secret of at least 16 characters',
                             to_jsonb(case when v_trigger ? 'secret' then '(hidden)' end));
        end if;
    when 'manual' then
        null;
    else
        -- An unknown type: the CHECK constraint names it once the row is built.
        null;
    end case;

    case p_row.action_type
    when 'lightweight' then
        if not _is_text(v_action -> 'prompt') then
            perform _invalid('action_config.prompt', 'a lightweight routine needs a prompt',
                             v_action -> 'prompt');
        end if;
        if v_action -> 'context_paths' is null then
            v_action := v_action || '{"context_paths": []}';
        elsif jsonb_typeof(v_action -> 'context_paths') <> 'array' then
            perform _invalid('action_config.context_paths', 'must be an array of relative paths',
                             v_action -> 'context_paths');
        end if;
        for v_path in select value from jsonb_array_elements(v_action -> 'context_paths') loop
            -- Read relative to the workspace root, never outside it.
            if not _is_text(v_path) or (v_path #>> '{}') like '/%'
               or (v_path #>> '{}') ~ '(^|/)\.\.(/|$)' then
                perform _invalid('action_config.context_paths',
                                 'each entry must be a relative path inside the workspace', v_path);
            end if;
        end loop;
        if not _is_positive_int_or_null(v_action -> 'max_tokens') then
            perform _invalid('action_config.max_tokens', 'must be a positive integer',
                             v_action -> 'max_tokens');
        end if;
    when 'full_job' then
        if not _is_text(v_action -> 'title') then
            perform _invalid('action_config.title', 'a full_job routine needs a title',
                             v_action -> 'title');
        end if;
        if not _is_text(v_action -> 'description') then
            perform _invalid('action_config.description', 'a full_job routine needs a description',
                             v_action -> 'description');
        end if;
        if not _is_positive_int_or_null(v_action -> 'max_iterations') then
            perform _invalid('action_config.max_iterations', 'must be a positive integer',
                             v_action -> 'max_iterations');
        end if;
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
create or replace function _regex_required_literal(p_pattern text)
returns text
language plpgsql immutable
set search_path = ceaseless, pg_catalog
as $$
declare
    v_len integer := length(p_pattern);
    v_i integer := 1;
    v_c text;
    v_run text := '';
    v_best text := '';
    v_depth integer;
    v_next text;
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
        v_c := substr(p_pattern, v_i, 1);
        v_next := substr(p_pattern, v_i + 1, 1);
        if v_c = '|' then
            return '';  -- alternation: no single literal is required
        elsif v_c = '\' then
            if v_next ~ '^[^A-Za-z0-9]$' then
                -- Escaped punctuation stands for itself, unless a quantifier
                -- follows (handled when the quantifier is read).
                v_run := v_run || v_next;
                v_i := v_i + 2;
                continue;
            end if;
            -- A class, a back-reference or a control escape: not literal.
            if length(v_run) > length(v_best) then v_best := v_run; end if;
            v_run := '';
            v_i := v_i + 2;
            continue;
        elsif v_c in ('*', '?') or (v_c = '{' and substr(p_pattern, v_i + 1) ~ '^0*(,[0-9]*)?}') then
            -- The previous atom may be absent: take it back out of the run.
            v_run := left(v_run, greatest(length(v_run) - 1, 0));
            if length(v_run) > length(v_best) then v_best := v_run; end if;
            v_run := '';
            if v_c = '{' then
                v_i := v_i + position('}' in substr(p_pattern, v_i));  -- past the bound
                continue;
            end if;
        elsif v_c = '+' or (v_c = '{' and substr(p_pattern, v_i + 1) ~ '^[0-9]+(,[0-9]*)?}') then
            -- At least once: the character stays, but what follows may repeat it.
            if length(v_run) > length(v_best) then v_best := v_run; end if;
            v_run := '';
            if v_c = '{' then
                v_i := v_i + position('}' in substr(p_pattern, v_i));
                continue;
            end if;
        elsif v_c = '{' then
            return '';  -- a brace that is not a bound: promise nothing
        elsif v_c = '[' then
            if length(v_run) > length(v_best) then v_best := v_run; end if;
            v_run := '';
            -- Skip the bracket expression whole; a ] first is literal.
            v_i := v_i + 1;
            if substr(p_pattern, v_i, 1) = '^' then v_i := v_i + 1; end if;
            if substr(p_pattern, v_i, 1) = ']' then v_i := v_i + 1; end if;
            while v_i <= v_len and substr(p_pattern, v_i, 1) <> ']' loop
                if substr(p_pattern, v_i, 2) in ('[:', '[.', '[=') then
                    return '';  -- named classes and collating elements: give up
                end if;
                v_i := v_i + 1;
            end loop;
        elsif v_c = '(' then
            if length(v_run) > length(v_best) then v_best := v_run; end if;
            v_run := '';
            -- Skip the group whole, counting nested parentheses.
            v_depth := 1;
            v_i := v_i + 1;
            while v_i <= v_len and v_depth > 0 loop
                v_c := substr(p_pattern, v_i, 1);
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
        elsif v_c in ('.', '^', '$', ')', ']', '}') then
            if length(v_run) > length(v_best) then v_best := v_run; end if;
            v_run := '';
        else
            v_run := v_run || v_c;
        end if;
        v_i := v_i + 1;
    end loop;
    if length(v_run) > length(v_best) then v_best := v_run; end if;
    return v_best;
exception when others then
    return '';  -- never let a strange pattern break validation
end;
$$;

comment on function _regex_required_literal(text) is
    'A literal that every match of the regular expression must contain (empty when none is '
    'known): the cheap prefilter of event matching.';

create or replace function _tg_routines_validate()
returns trigger
language plpgsql
set search_path = ceaseless, pg_catalog
as $$
begin
    if tg_op = 'UPDATE'
       and new.trigger_type = old.trigger_type and new.trigger_config = old.trigger_config
       and new.action_type = old.action_type and new.action_config = old.action_config then
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
          and (new.trigger_config is distinct from old.trigger_config
               or new.trigger_type is distinct from old.trigger_type
               or (new.enabled and not old.enabled)) then
        new.next_fire_at := null;
        new.last_error := null;
    end if;
    new.event_literal := case when new.trigger_type = 'event'
                              then _regex_required_literal(new.trigger_config ->> 'pattern')
                              else '' end;
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
set search_path = ceaseless, pg_catalog
as $$
begin
    if tg_op = 'DELETE' then
        insert into audit_log (actor, entity, entity_id, action, old_state)
        values (_actor(), 'routine', old.id, 'delete',
                case when old.enabled then 'enabled' else 'disabled' end);
        return null;
    end if;
    if new.trigger_type = 'cron' and new.enabled and new.next_fire_at is null then
        perform pg_notify('ceaseless_schedule',
                          jsonb_build_object('table', 'routines', 'id', new.id)::text);
    end if;
    if tg_op = 'INSERT' then
        insert into audit_log (actor, entity, entity_id, action, new_state)
        values (_actor(), 'routine', new.id, 'insert',
                case when new.enabled then 'enabled' else 'disabled' end);
    elsif new.enabled is distinct from old.enabled
          or new.trigger_config is distinct from old.trigger_config
          or new.action_config is distinct from old.action_config then
        insert into audit_log (actor, entity, entity_id, action, old_state, new_state, detail)
        values (_actor(), 'routine', new.id, 'update',
                case when old.enabled then 'enabled' else 'disabled' end,
                case when new.enabled then 'enabled' else 'disabled' end,
                jsonb_build_object('last_error', new.last_error));
    end if;
    return null;
end;
$$;

comment on function _tg_routines_changed() is
    'After a routine changes: NOTIFY ceaseless_schedule when it needs a next_fire_at; audit '
    'operator-visible changes.';

-- CREATE OR REPLACE, never drop and create: DROP TRIGGER takes ACCESS
-- EXCLUSIVE on the table, stalling even its readers until migrate commits.
create or replace trigger routines_validate
    before insert or update on routines
    for each row execute function _tg_routines_validate();

create or replace trigger routines_changed
    after insert or update or delete on routines
    for each row execute function _tg_routines_changed();

-- ---------------------------------------------------------------------------
-- Firing
-- ---------------------------------------------------------------------------

-- The instruction that ends every lightweight prompt (spec 5.8).
create or replace function _routine_ok_instruction()
returns text
language sql immutable
set search_path = ceaseless, pg_catalog
as $$
    select 'If nothing needs attention, answer exactly ROUTINE_OK and nothing else. '
           'Otherwise, answer with what needs attention.';
$$;

comment on function _routine_ok_instruction() is
    'The closing instruction of every lightweight routine prompt.';

-- What the job of one routine run looks like, assembled in the order of spec
-- 5.8: the routine's prompt (and what fired it), then the context files —
-- which only the listener can read, so they are named in
-- payload.context_paths and inserted by the listener between `prompt` and
-- payload.prompt_tail — then the previous run's state, then the ROUTINE_OK
-- instruction. One definition for single fires and batch fires alike.
--
-- Plain SQL without a SET clause, so the planner inlines it into its two
-- callers' plans (which PL/pgSQL caches): with a SET clause it could not be
-- inlined and was planned afresh on every call, over a millisecond of each
-- event's insert; as PL/pgSQL it cost a function call and a tuplestore per
-- routine of a cron batch. Without SET, names outside pg_catalog are
-- schema-qualified.
create or replace function _routine_job_spec(p_routine routines, p_context text)
returns table (prompt text, payload jsonb, expects_reply boolean, max_attempts integer,
               max_turns integer)
language sql stable
as $$
    with fired as (
        select case when p_context is not null and p_context <> ''
                    then E'\n\n## What fired this run\n\n' || p_context else '' end as context
    )
    select case when p_routine.action_type = 'lightweight'
                then (p_routine.action_config ->> 'prompt') || fired.context
                else (p_routine.action_config ->> 'title') || E'\n\n'
                     || (p_routine.action_config ->> 'description') || fired.context
           end,
           case when p_routine.action_type = 'lightweight'
                then jsonb_build_object(
                         'routine_id', p_routine.id, 'action', 'lightweight',
                         'context_paths', p_routine.action_config -> 'context_paths',
                         'max_tokens', p_routine.action_config -> 'max_tokens',
                         'prompt_tail',
                         case when p_routine.state <> '{}'::jsonb
                              then E'\n\n## State from the previous run\n\n' || p_routine.state::text
                              else '' end
                         || E'\n\n' || ceaseless._routine_ok_instruction())
                else jsonb_build_object('routine_id', p_routine.id, 'action', 'full_job')
           end,
           -- A lightweight run's whole product is its reply: an empty one is
           -- a failure, retried at most twice (three attempts).
           p_routine.action_type = 'lightweight',
           case when p_routine.action_type = 'lightweight' then 3 end,
           case when p_routine.action_type = 'full_job'
                then (p_routine.action_config ->> 'max_iterations')::integer end
    from fired;
$$;

comment on function _routine_job_spec(routines, text) is
    'The prompt, payload and limits of a routine run''s job: lightweight (prompt + context + '
    'state + ROUTINE_OK, replies required) or full_job (title + description, max_turns).';

-- Fire one routine, checking its guardrails atomically; returns the
-- routine_runs row written (running, or skipped with its reason).
--
-- Guardrails, in order: disabled; cooldown_secs since the last run finished
-- (unless p_ignore_cooldown, for manual runs); max_concurrent running runs;
-- dedup_window_secs on the hash of p_context; the global cap on running routine
-- runs (setting routine_max_running).
--
-- Locks: the routine row, then the routine_run_gauge row (both FOR UPDATE),
-- always in that order (_finish_routine_run takes them in the same order).
-- Raises: CE404 unknown routine.
create or replace function _fire_routine(
    p_routine_id uuid,
    p_trigger text,
    p_now timestamptz,
    p_detail text default null,
    p_context text default null,
    p_missed integer default 0,
    p_ignore_cooldown boolean default false
)
returns routine_runs
language plpgsql
set search_path = ceaseless, pg_catalog
as $$
declare
    v_routine routines;
    v_run routine_runs;
    v_hash text;
    v_reason text;
    v_run_id uuid;
    v_job_id uuid;
begin
    select * into v_routine from routines where id = p_routine_id for update;
    if not found then
        raise exception 'no routine with id %', p_routine_id using errcode = 'CE404';
    end if;
    if p_context is not null and v_routine.dedup_window_secs is not null then
        v_hash := encode(sha256(convert_to(p_context, 'UTF8')), 'hex');
    end if;

    if not v_routine.enabled then
        v_reason := 'disabled';
    elsif not p_ignore_cooldown and v_routine.last_run_at is not null
          and p_now < v_routine.last_run_at + make_interval(secs => v_routine.cooldown_secs) then
        v_reason := 'cooldown';
    elsif (select count(*) from routine_runs r
           where r.routine_id = v_routine.id and r.status = 'running')
          >= v_routine.max_concurrent then
        v_reason := 'concurrency';
    elsif v_hash is not null and exists (
            select 1 from routine_runs r
            where r.routine_id = v_routine.id and r.content_hash = v_hash
              and r.status <> 'skipped'
              and r.started_at > p_now - make_interval(secs => v_routine.dedup_window_secs)) then
        v_reason := 'dedup';
    -- The gauge row's lock serialises fires against the global cap.
    elsif (select g.running from routine_run_gauge g for update)
          >= _setting_int('routine_max_running') then
        v_reason := 'global_cap';
    end if;

    v_run_id := gen_random_uuid();
    v_job_id := case when v_reason is null then gen_random_uuid() end;
    -- The run and its job point at each other: one statement writes both,
    -- and its foreign keys are checked when it ends.
    with run as (
        insert into routine_runs (id, routine_id, trigger_type, trigger_detail, started_at,
                                  status, skip_reason, completed_at, missed_slots, content_hash,
                                  context, created_at, job_id)
        values (v_run_id, v_routine.id, p_trigger, left(p_detail, 200), p_now,
                case when v_reason is null then 'running' else 'skipped' end,
                v_reason, case when v_reason is null then null else p_now end,
                greatest(p_missed, 0), v_hash, p_context, p_now, v_job_id)
        returning *
    ),
    work as (
        insert into job (id, kind, agent, prompt, payload, routine_run_id, expects_reply,
                         max_attempts, max_turns, run_after, created_at)
        select v_job_id, 'routine', v_routine.agent, s.prompt, s.payload, v_run_id,
               s.expects_reply, s.max_attempts, s.max_turns, p_now, p_now
        from _routine_job_spec(v_routine, p_context) s
        where v_job_id is not null
        returning id
    )
    select run.* into v_run from run;
    return v_run;
end;
$$;

comment on function _fire_routine(uuid, text, timestamptz, text, text, integer, boolean) is
    'Fire one routine through its guardrails (disabled, cooldown, concurrency, dedup, global '
    'cap); writes a running or skipped routine_runs row and, when running, its job.';

-- Fire the due cron routines a listener has locked and scheduled: the
-- listener selects them FOR UPDATE SKIP LOCKED, computes each one's next slot
-- and missed-slot count with croniter, and calls this in the same
-- transaction, so no two listeners fire one slot.
--
-- Set-based: one statement judges the whole batch against the guardrails
-- that apply to cron (cooldown — deferred to its end, spec 5.6 —,
-- max_concurrent, the global cap, filled in the order given) and writes every
-- run, every job and every next_fire_at, so a fan-out of thousands of
-- routines costs a few statements, not thousands.
--
-- Locks: the routine_run_gauge row (the cap's serialisation point, as for a
-- single fire), then the batch's routine rows, which the caller holds already.
create or replace function fire_cron_routines(
    p_routine_ids uuid[],
    p_next_fire_ats timestamptz[],
    p_missed integer[],
    p_now timestamptz default now()
)
returns table (routine_id uuid, run_id uuid, status text, skip_reason text,
               next_fire_at timestamptz)
language plpgsql
set search_path = ceaseless, pg_catalog
as $$
#variable_conflict use_column
declare
    v_free bigint;
begin
    if cardinality(p_routine_ids) is distinct from cardinality(p_next_fire_ats)
       or cardinality(p_routine_ids) is distinct from cardinality(p_missed) then
        raise exception 'fire_cron_routines: the three arrays must have one entry per routine'
            using errcode = 'CE422';
    end if;
    select greatest(_setting_int('routine_max_running') - g.running, 0) into v_free
    from routine_run_gauge g for update;

    return query
    with input as (
        select * from unnest(p_routine_ids, p_next_fire_ats, p_missed) with ordinality
            as i(id, next_at, missed, ord)
    ),
    -- Changed or disabled since the listener read it: its new schedule gets a
    -- fresh next_fire_at through ceaseless_schedule instead.
    due as (
        select r as routine, i.next_at, i.missed, i.ord,
               (select count(*) from routine_runs rr
                where rr.routine_id = r.id and rr.status = 'running') as running
        from routines r
        join input i on i.id = r.id
        where r.enabled and r.trigger_type = 'cron'
          and r.next_fire_at is not null and r.next_fire_at <= p_now
        for update of r
    ),
    judged as (
        select d.*,
               case when (d.routine).last_run_at is not null
                         and p_now < (d.routine).last_run_at
                                     + make_interval(secs => (d.routine).cooldown_secs)
                    then 'cooldown'
                    when d.running >= (d.routine).max_concurrent then 'concurrency'
               end as reason
        from due d
    ),
    -- The global cap admits the first v_free runnable routines, in order.
    capped as (
        select j.routine, j.next_at, j.missed,
               case when j.reason is null
                         and count(*) filter (where j.reason is null) over (order by j.ord) > v_free
                    then 'global_cap' else j.reason end as reason,
               gen_random_uuid() as run_id,
               gen_random_uuid() as job_id
        from judged j
    ),
    -- Runs and jobs point at each other; both are written by this one
    -- statement, whose foreign keys are checked when it ends.
    runs as (
        insert into routine_runs (id, routine_id, trigger_type, trigger_detail, started_at,
                                  status, skip_reason, completed_at, missed_slots, created_at,
                                  job_id)
        select c.run_id, (c.routine).id, 'cron', left((c.routine).trigger_config ->> 'schedule', 200),
               p_now, case when c.reason is null then 'running' else 'skipped' end, c.reason,
               case when c.reason is null then null else p_now end, greatest(c.missed, 0), p_now,
               case when c.reason is null then c.job_id end
        from capped c
        returning routine_runs.id
    ),
    jobs as (
        insert into job (id, kind, agent, prompt, payload, routine_run_id, expects_reply,
                         max_attempts, max_turns, run_after, created_at)
        select c.job_id, 'routine', (c.routine).agent, s.prompt, s.payload, c.run_id,
               s.expects_reply, s.max_attempts, s.max_turns, p_now, p_now
        from capped c
        cross join lateral _routine_job_spec(c.routine, null) s
        where c.reason is null
        returning job.id
    ),
    moved as (
        update routines r
        set next_fire_at = case when c.reason = 'cooldown'
                                then greatest((c.routine).last_run_at
                                              + make_interval(secs => (c.routine).cooldown_secs),
                                              p_now)
                                else c.next_at end
        from capped c
        where r.id = (c.routine).id
        returning r.id, r.next_fire_at
    )
    select (c.routine).id, c.run_id,
           case when c.reason is null then 'running' else 'skipped' end, c.reason, m.next_fire_at
    from capped c
    join moved m on m.id = (c.routine).id;
end;
$$;

comment on function fire_cron_routines(uuid[], timestamptz[], integer[], timestamptz) is
    'Fire a batch of due cron routines the caller locked, set-based: guardrails (cooldown '
    'deferred, max_concurrent, global cap), runs, jobs and each next slot in one statement.';

-- The listener's answer to ceaseless_schedule: store freshly computed
-- next_fire_at values, but only where the schedule and timezone they were
-- computed from are still the routine's (an edit in between wins). Returns how
-- many were stored.
create or replace function set_next_fires(
    p_routine_ids uuid[], p_schedules text[], p_timezones text[], p_next_fire_ats timestamptz[]
)
returns integer
language sql
set search_path = ceaseless, pg_catalog
as $$
    with computed as (
        select * from unnest(p_routine_ids, p_schedules, p_timezones, p_next_fire_ats)
            as c(id, schedule, timezone, next_fire_at)
    ),
    stored as (
        update routines r
        set next_fire_at = c.next_fire_at
        from computed c
        where r.id = c.id
          and r.enabled and r.trigger_type = 'cron'
          and r.trigger_config ->> 'schedule' = c.schedule
          and r.trigger_config ->> 'timezone' = c.timezone
        returning r.id
    )
    select count(*)::integer from stored;
$$;

comment on function set_next_fires(uuid[], text[], text[], timestamptz[]) is
    'Store listener-computed next_fire_at values where the routine still has that schedule '
    'and timezone; returns how many were stored.';

-- Disable a routine whose stored configuration the listener cannot use (a
-- schedule croniter rejects despite validation), recording why, so it stops
-- failing silently and never blocks the others.
create or replace function disable_routine(p_routine_id uuid, p_error text)
returns void
language sql
set search_path = ceaseless, pg_catalog
as $$
    update routines set enabled = false, last_error = p_error where id = p_routine_id;
$$;

comment on function disable_routine(uuid, text) is
    'Disable a routine the engine cannot run, recording the error in last_error.';

-- Manual trigger: ignores cooldown, respects max_concurrent and the global
-- cap. Returns the routine_runs id (a skipped run when refused).
create or replace function run_routine(p_routine_id uuid, p_now timestamptz default now())
returns uuid
language sql
set search_path = ceaseless, pg_catalog
as $$
    select (_fire_routine(p_routine_id, 'manual', p_now, 'manual', null, 0, true)).id;
$$;

comment on function run_routine(uuid, timestamptz) is
    'Fire a routine by hand (ignores cooldown, respects max_concurrent); returns the '
    'routine_runs id, whose status says whether it runs or was skipped and why.';

-- ---------------------------------------------------------------------------
-- Events
-- ---------------------------------------------------------------------------

-- The event routines of p_user_id whose literal occurs in p_content: the
-- candidates whose channel and pattern the event's trigger then checks.
--
-- Two ways to find them, the cheaper one chosen per event. Reading a
-- routine's entry and literal costs about a quarter of an index probe, so a
-- user with no more event routines than a quarter of the content's
-- four-character windows (a handful of routines, or a long event) is read
-- whole. Otherwise each distinct window of the content is probed in
-- routines_event_key_idx (db/0005_event_key.sql), and the routines whose
-- literal is too short to have a key are added: a thousand routines then
-- cost what ten do.
create or replace function _event_candidates(p_user_id text, p_content text)
returns setof uuid
language plpgsql stable
set search_path = ceaseless, pg_catalog
-- The probe's generic plan guesses a thousand windows and looks dearer than
-- the plan for this event's actual few, so PL/pgSQL would plan it afresh on
-- every event (most of a millisecond); its shape is fixed by the LATERAL
-- fence anyway, so the one generic plan is the right one.
set plan_cache_mode = force_generic_plan
as $$
declare
    v_windows integer := greatest(char_length(p_content) - 3, 0);
    v_few integer := v_windows / 4;
    v_ids uuid[];
    v_literals text[];
begin
    -- One more than "few" from each index tells whether there are more.
    select array_agg(u.id), array_agg(u.event_literal) into v_ids, v_literals
    from ((select r.id, r.event_literal
           from routines r
           where r.user_id = p_user_id and r.enabled and r.trigger_type = 'event'
             and char_length(r.event_literal) >= 4
           limit v_few + 1)
          union all
          (select r.id, r.event_literal
           from routines r
           where r.user_id = p_user_id and r.enabled and r.trigger_type = 'event'
             and char_length(r.event_literal) < 4
           limit v_few + 1)) u;
    if coalesce(cardinality(v_ids), 0) <= v_few then
        return query
        select u.id from unnest(v_ids, v_literals) as u(id, literal)
        where strpos(p_content, u.literal) > 0;
        return;
    end if;

    return query
    select r.id
    from (select distinct substr(p_content, i, 4) as key
          from generate_series(1, v_windows) i) w
    -- One probe per window, both columns of the key index equal: with
    -- `key = any (windows)` instead, a planner without statistics prefers
    -- reading all of the user's routines through another index.
    cross join lateral (
        select r.id, r.event_literal
        from routines r
        where r.user_id = p_user_id and right(r.event_literal, 4) = w.key
          and r.enabled and r.trigger_type = 'event' and char_length(r.event_literal) >= 4
        offset 0
    ) r
    where strpos(p_content, r.event_literal) > 0
    union all
    select r.id
    from routines r
    where r.user_id = p_user_id and r.enabled and r.trigger_type = 'event'
      and char_length(r.event_literal) < 4
      and strpos(p_content, r.event_literal) > 0;
end;
$$;

comment on function _event_candidates(text, text) is
    'The enabled event routines of a user whose literal occurs in the content, found by reading '
    'them all or by probing routines_event_key_idx, whichever is cheaper for this event.';

-- Fire every matching event routine of the event's user, in the inserting
-- transaction: the routine's user equals the event's, its channel (when set)
-- equals the event's ignoring case, and its pattern matches anywhere in the
-- content. A refused fire (cooldown, dedup, …) is recorded and dropped.
create or replace function _tg_events_fire()
returns trigger
language plpgsql
set search_path = ceaseless, pg_catalog
as $$
declare
    v_routine record;
    v_run routine_runs;
    v_fired integer := 0;
begin
    for v_routine in
        select r.id
        -- The candidates passed the literal test, which rules most routines
        -- out without compiling their pattern (db/0004_event_literal.sql);
        -- each is read by primary key (OFFSET 0 keeps it that way).
        from _event_candidates(new.user_id, new.content) as c(id)
        cross join lateral (
            select r.id, r.trigger_config from routines r where r.id = c.id offset 0
        ) r
        where (r.trigger_config ->> 'channel' is null
               or lower(r.trigger_config ->> 'channel') = lower(new.channel))
          and new.content ~ (r.trigger_config ->> 'pattern')
        order by r.id
    loop
        v_run := _fire_routine(v_routine.id, 'event', new.created_at,
                               left(new.content, 200), new.content);
        if v_run.status = 'running' then
            v_fired := v_fired + 1;
        end if;
    end loop;
    new.fired_count := v_fired;
    return new;
end;
$$;

comment on function _tg_events_fire() is
    'Before INSERT on events: fire the user''s matching event routines in the same transaction.';

create or replace trigger events_fire
    before insert on events
    for each row execute function _tg_events_fire();

-- ---------------------------------------------------------------------------
-- Outcomes flowing back
-- ---------------------------------------------------------------------------

-- A routine run's job ended: set the run's status from the job and its last
-- agent reply, update the routine's counters and state, and queue the
-- notifications its notify_on_* flags ask for.
--
-- lightweight: reply exactly ROUTINE_OK → ok; another non-empty reply →
-- attention, the reply as summary; anything else → failed. full_job:
-- delivered → ok; anything else → failed.
create or replace function _finish_routine_run(p_run_id uuid, p_now timestamptz)
returns void
language plpgsql
set search_path = ceaseless, pg_catalog
as $$
declare
    v_run routine_runs;
    v_routine routines;
    v_job job;
    v_reply text;
    v_tokens bigint;
    v_status text;
    v_summary text;
    v_notify text;
begin
    -- The routine first, then the run (whose update takes the gauge): the
    -- order _fire_routine uses, so the two never deadlock.
    select r.* into v_routine
    from routines r join routine_runs rr on rr.routine_id = r.id
    where rr.id = p_run_id
    for update of r;
    select * into v_run from routine_runs where id = p_run_id for update;
    if not found or v_run.status <> 'running' then
        return;
    end if;
    select * into v_job from job where id = v_run.job_id;
    select r.final_message into v_reply
    from agent_run r where r.job_id = v_job.id order by r.started_at desc limit 1;
    select sum(coalesce(r.tokens_in, 0) + coalesce(r.tokens_out, 0)) into v_tokens
    from agent_run r where r.job_id = v_job.id;

    if v_job.state = 'delivered' then
        if v_job.payload ->> 'action' = 'lightweight' then
            if btrim(coalesce(v_reply, '')) = 'ROUTINE_OK' then
                v_status := 'ok';
            elsif btrim(coalesce(v_reply, '')) <> '' then
                v_status := 'attention';
                v_summary := btrim(v_reply);
            else
                v_status := 'failed';
                v_summary := 'the agent''s reply was empty';
            end if;
        else
            v_status := 'ok';
            v_summary := v_reply;
        end if;
    else
        v_status := 'failed';
        v_summary := format('job %s: %s', v_job.state, coalesce(v_job.last_error, 'no detail'));
    end if;

    update routine_runs
    set status = v_status, completed_at = p_now, result_summary = left(v_summary, 4000),
        tokens_used = least(v_tokens, 2147483647)::integer
    where id = v_run.id;

    update routines
    set last_run_at = p_now,
        run_count = run_count + 1,
        consecutive_failures = case when v_status = 'failed' then consecutive_failures + 1 else 0 end,
        state = jsonb_build_object('last_status', v_status, 'last_summary', left(v_summary, 2000),
                                   'last_run_at', p_now)
    where id = v_routine.id;

    v_notify := case
        when v_status = 'ok' and v_routine.notify_on_success then 'success'
        when v_status = 'failed' and v_routine.notify_on_failure then 'failure'
        when v_status = 'attention' and v_routine.notify_on_attention then 'attention'
    end;
    if v_notify is not null then
        insert into notifications (source_table, source_id, kind, channel, recipient, subject, body)
        values ('routine_runs', v_run.id, v_notify, v_routine.notify_channel,
                v_routine.notify_user,
                format('routine %s: %s', v_routine.name, v_status),
                coalesce(v_summary, ''));
    end if;
end;
$$;

comment on function _finish_routine_run(uuid, timestamptz) is
    'Close a routine run from its job''s end state and reply (ok / attention / failed), update '
    'the routine''s counters and state, and queue notifications.';

-- Row-level with a WHEN clause, not statement-level: the clause is checked
-- in C before any trigger is queued, so the finish of a batch of plain jobs
-- pays nothing here. A statement trigger with transition tables made every
-- job update copy its old and new rows aside and join them, for routine
-- jobs that are a small share of the work.
create or replace function _tg_job_routine_outcome()
returns trigger
language plpgsql
set search_path = ceaseless, pg_catalog
as $$
begin
    perform _finish_routine_run(new.routine_run_id, now());
    return null;
end;
$$;

comment on function _tg_job_routine_outcome() is
    'After a routine''s job ends: close its routine run.';

create or replace trigger job_routine_outcome
    after update of finished_at on job
    for each row
    when (new.routine_run_id is not null
          and new.finished_at is not null and old.finished_at is null)
    execute function _tg_job_routine_outcome();

-- Keep routine_run_gauge, audit and announce routine run starts and ends.
-- Statement-level, like the job triggers: a cron batch writes hundreds of
-- runs in one statement, and the gauge then moves once, not once per row.
create or replace function _tg_routine_runs_insert()
returns trigger
language plpgsql
set search_path = ceaseless, pg_catalog
as $$
begin
    update routine_run_gauge
    set running = running + (select count(*) from new_rows where status = 'running')
    where exists (select from new_rows where status = 'running');

    insert into audit_log (actor, entity, entity_id, action, new_state, detail)
    select _actor(), 'routine_run', n.id, 'insert', n.status,
           jsonb_build_object('routine_id', n.routine_id, 'skip_reason', n.skip_reason)
    from new_rows n;

    perform _notify_group('ceaseless_run', array_agg(n.id),
                          jsonb_build_object('table', 'routine_runs', 'status', n.status))
    from new_rows n
    group by n.status;
    return null;
end;
$$;

comment on function _tg_routine_runs_insert() is
    'After INSERT on routine_runs: move routine_run_gauge, audit each run, NOTIFY ceaseless_run '
    'once per status.';

-- enable_nestloop: the old rows are joined to the new ones; see _tg_job_update
-- (30_notify_audit.sql).
create or replace function _tg_routine_runs_update()
returns trigger
language plpgsql
set search_path = ceaseless, pg_catalog
set enable_nestloop = off
as $$
begin
    update routine_run_gauge
    set running = running + d.delta
    from (select sum(case when n.status = 'running' then 1 else 0 end
                     - case when o.status = 'running' then 1 else 0 end) as delta
          from new_rows n join old_rows o on o.id = n.id) d
    where d.delta <> 0;

    insert into audit_log (actor, entity, entity_id, action, old_state, new_state, detail)
    select _actor(), 'routine_run', n.id, 'update', o.status, n.status,
           jsonb_build_object('routine_id', n.routine_id, 'skip_reason', n.skip_reason)
    from new_rows n
    join old_rows o on o.id = n.id
    where n.status is distinct from o.status;

    perform _notify_group('ceaseless_run', array_agg(n.id),
                          jsonb_build_object('table', 'routine_runs', 'status', n.status))
    from new_rows n
    join old_rows o on o.id = n.id
    where n.status is distinct from o.status
    group by n.status;
    return null;
end;
$$;

comment on function _tg_routine_runs_update() is
    'After UPDATE on routine_runs: move routine_run_gauge, audit status changes, NOTIFY '
    'ceaseless_run once per new status.';

-- The name these triggers replaced: a database migrated before the rename
-- would otherwise run both, auditing and counting every run twice.
drop trigger if exists routine_runs_changed on routine_runs;
drop function if exists _tg_routine_runs_changed();

create or replace trigger routine_runs_insert
    after insert on routine_runs
    referencing new table as new_rows
    for each statement execute function _tg_routine_runs_insert();

create or replace trigger routine_runs_update
    after update on routine_runs
    referencing old table as old_rows new table as new_rows
    for each statement execute function _tg_routine_runs_update();

-- A running run deleted with its routine still leaves the gauge.
create or replace function _tg_routine_runs_deleted()
returns trigger
language plpgsql
set search_path = ceaseless, pg_catalog
as $$
begin
    update routine_run_gauge
    set running = running - (select count(*) from old_rows where status = 'running');
    return null;
end;
$$;

comment on function _tg_routine_runs_deleted() is
    'After routine_runs rows are deleted: take their running ones off routine_run_gauge.';

create or replace trigger routine_runs_deleted
    after delete on routine_runs
    referencing old table as old_rows
    for each statement execute function _tg_routine_runs_deleted();
