-- Jobs: what a job row may carry to its agent, checked where it is written.
--
-- Called by: PostgreSQL, before each INSERT of job and each UPDATE of its
-- prompt, payload or resume_session_id (job_input, job_user_due,
-- job_validate), whoever writes the row: a routine's fire, a topology node,
-- the forge intake, an operator, a user's client; and the paths that hand an
-- agent's session to the job's next attempt (_resumable: finish_runs,
-- expire_leases, release_jobs) or store it on a run (_session_id_ok:
-- note_sessions, finish_runs).
-- Guarantees: no job is stored whose prompt is blank (_is_blank: empty or
-- only whitespace, as a routine's or a loop's is refused), or whose prompt or
-- payload is longer than its cap (_input_cap), or whose
-- payload.context_paths names a file outside the workspace (absolute, or
-- with a .. component), or whose resume_session_id no agent CLI could
-- resume; the error names the field, the rule and the value, the length or
-- the path (CE422), never a whole long value; a job a user role inserts is
-- due no earlier than its insert. Rows within the bounds call no PL/pgSQL:
-- the triggers' WHEN clauses test them in the executor, so a fire of a
-- thousand routines pays for no PL/pgSQL call.

-- Is a value a path the listener may read context from: a JSON string, not
-- blank, relative, without a .. component? The listener checks again where
-- the path resolves (symlinks included), against its workspace root.
create or replace function _is_workspace_path(p_value jsonb)
returns boolean
language sql immutable
as $$
    select coalesce(jsonb_typeof(p_value) = 'string'
                    and not ceaseless._is_blank(p_value #>> '{}')
                    and left(p_value #>> '{}', 1) <> '/'
                    and (p_value #>> '{}') !~ '(^|/)\.\.(/|$)', false);
$$;

comment on function _is_workspace_path(jsonb) is
    'True for a JSON string that is a relative path without a .. component (a context path).';

create or replace function _tg_job_input()
returns trigger
language plpgsql
as $$
declare
    v_path jsonb;
begin
    perform _refuse_long('job.prompt', new.prompt, 'job_prompt');
    perform _refuse_long('job.payload', new.payload::text, 'job_payload');
    -- Prevents a job that makes the listener read any file its OS user can:
    -- the listener reads context_paths and pastes them into the prompt.
    if jsonb_typeof(new.payload -> 'context_paths') not in ('array', 'null') then
        raise exception 'job.payload.context_paths: must be an array of relative paths; got %',
            left((new.payload -> 'context_paths')::text, 200)
            using errcode = 'CE422', table = 'job', column = 'payload';
    end if;
    for v_path in select value from jsonb_array_elements(
                      case jsonb_typeof(new.payload -> 'context_paths')
                          when 'array' then new.payload -> 'context_paths' else '[]' end) loop
        if not _is_workspace_path(v_path) then
            raise exception 'job.payload.context_paths: each entry must be a relative path inside '
                            'the workspace (no leading /, no .. component); got %',
                left(v_path::text, 200)
                using errcode = 'CE422', table = 'job', column = 'payload';
        end if;
    end loop;
    -- An agent given a blank prompt is given no task: it runs, costs, and
    -- answers nothing anyone asked. Judged when the prompt is written: an
    -- UPDATE of the payload alone leaves the row's prompt as it was.
    if _is_blank(new.prompt) and (tg_op = 'INSERT' or new.prompt is distinct from old.prompt) then
        perform _invalid_value('job.prompt', 'a job needs a prompt that is not blank',
                               to_jsonb(new.prompt));
    end if;
    return new;
end;
$$;

comment on function _tg_job_input() is
    'Before INSERT/UPDATE of prompt or payload on job: refuse (CE422) a blank prompt, a prompt or '
    'payload over its cap, or a context path outside the workspace.';

-- The WHEN clause lets through, without a PL/pgSQL call, every row that is
-- certainly within bounds: a prompt that is not blank, short, and naming no
-- context path. _is_blank is the one test of blankness, not a second pattern
-- written out here. The caps are written into the clause as numbers when the
-- trigger is made, from _input_cap, where they live: a function called in a
-- WHEN clause is called for every row (a SQL function with a SET clause is
-- never inlined), and the two calls cost a job insert about 40 µs on
-- PostgreSQL 15, a third of the whole insert.
do $$
begin
    execute format(
        'create or replace trigger job_input '
        'before insert or update of prompt, payload on ceaseless.job '
        'for each row '
        'when (char_length(new.prompt) > %s '
        '      or char_length(new.payload::text) > %s '
        '      or coalesce(new.payload -> ''context_paths'' <> ''[]''::jsonb, false) '
        '      or ceaseless._is_blank(new.prompt)) '
        'execute function ceaseless._tg_job_input()',
        _input_cap('job_prompt'), _input_cap('job_payload'));
end;
$$;

-- A user's job is due no earlier than its insert: claims take the oldest due
-- work first (run_after), so a job dated back would go ahead of every other
-- owner's in its lane. The engine dates its own jobs (a fire's p_now).
--
-- Runs as the inserting role (not security definer): current_user is a user
-- role for a user's own INSERT, and the owner when the engine inserts on a
-- user's behalf from a security definer function (a routine's fire).
create or replace function _tg_job_user_due()
returns trigger
language plpgsql
as $$
begin
    if pg_has_role(current_user, 'ceaseless_user', 'usage')
       and not pg_has_role(current_user, 'ceaseless_listener', 'usage')
       and not pg_has_role(current_user, 'ceaseless_operator', 'usage') then
        new.run_after := now();
    end if;
    return new;
end;
$$;

comment on function _tg_job_user_due() is
    'Before INSERT on job of a row due before now: a user role''s job is due from now (its '
    'place in the queue), the engine''s keeps its time.';

-- Only rows dated back call it: a job inserted without run_after is due now.
create or replace trigger job_user_due
    before insert on job
    for each row
    when (new.run_after < now())
    execute function _tg_job_user_due();

-- Whether an agent-reported session id may be stored and later passed back
-- on an agent's command line (db/0008: session_id_plausible).
create or replace function _session_id_ok(p_session_id text)
returns boolean
language sql immutable
as $$
    select p_session_id ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$';
$$;

comment on function _session_id_ok(text) is
    'True when a session id is plausible: 1-200 characters of [A-Za-z0-9._:-], not starting '
    'with punctuation (so it can never be read as a command-line flag).';

-- A session id, if it may go back onto an agent's command line, else NULL:
-- the shape Claude Code prints (a UUID) or opencode's (ses_ and 26 letters
-- or digits). Agents print what their prompt asks, and a looser rule would
-- let an id that is no session either CLI knows reach `--resume`; every id
-- of this shape is plausible too (_session_id_ok). The same rule is CHECK
-- resume_session_id_resumable on job (db/0014), spelled out there. The paths
-- that hand sessions over (finish_runs, expire_leases, release_jobs) keep
-- the job's previous session on NULL instead of failing the batch on one
-- agent's odd output.
create or replace function _resumable(p_session_id text)
returns text
language sql immutable
as $$
    select case when p_session_id ~ '^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|ses_[0-9A-Za-z]{26})$'
                then p_session_id end;
$$;

comment on function _resumable(text) is
    'The session id when an agent CLI can resume it (a UUID for Claude Code, ses_ and 26 letters '
    'or digits for opencode), else NULL.';

-- Refuse a job whose resume_session_id no agent CLI could resume, naming the
-- field, the rule and the value (CE422), before the CHECK constraint could
-- (its message would print the whole row, prompt included).
create or replace function _tg_job_validate()
returns trigger
language plpgsql
as $$
begin
    if _resumable(new.resume_session_id) is null then
        raise exception 'job.resume_session_id: must be a Claude Code session id (a UUID) or an '
                        'opencode session id (ses_ and 26 letters or digits); got %',
                        to_jsonb(left(new.resume_session_id, 100))
            using errcode = 'CE422', table = 'job', column = 'resume_session_id';
    end if;
    return new;
end;
$$;

comment on function _tg_job_validate() is
    'Before INSERT or UPDATE of resume_session_id on job: refuse an id no agent CLI can resume '
    '(CE422, naming the field and the value).';

-- Only rows that carry a session: the WHEN clause keeps every other insert
-- and update free of a function call.
create or replace trigger job_validate
    before insert or update of resume_session_id on job
    for each row when (new.resume_session_id is not null)
    execute function _tg_job_validate();

-- The spend ceilings a job gets when it sets none (db/0068): its loop node's
-- ("max_cost_usd", "max_tokens" in the graph), else its agent's. A routine
-- run's job is not this trigger's: _fire_routines inserts it with its
-- routine's, else its agent's (its statement also writes the routine run,
-- which a trigger could not yet read, and reads the agent anyway); a user
-- role cannot set routine_run_id, so every job a user inserts comes here.
-- Resolved once, at insert, so the row says what holds it and every reader
-- (claim_jobs, finish_runs, explain_job) reads one column; a later change of
-- the default leaves the jobs already queued as they were, and
-- raise_job_budget changes only the job. The job's own value always wins.
--
-- Runs after job_default_agent (name order), so the agent is known.
create or replace function _tg_job_spend_ceiling()
returns trigger
language plpgsql
as $$
declare
    v_node jsonb;
    v_usd numeric;
    v_tokens bigint;
begin
    if new.topology_run_id is not null then
        select n into v_node
        from topology_runs t, jsonb_array_elements(t.graph -> 'nodes') n
        where t.id = new.topology_run_id and n ->> 'id' = new.payload ->> 'node_id';
        v_usd := (v_node ->> 'max_cost_usd')::numeric;
        v_tokens := (v_node ->> 'max_tokens')::bigint;
    end if;
    select coalesce(new.max_cost_usd, v_usd, a.max_cost_usd),
           coalesce(new.max_tokens, v_tokens, a.max_tokens)
    into new.max_cost_usd, new.max_tokens
    from agents a where a.name = new.agent;
    return new;
end;
$$;

comment on function _tg_job_spend_ceiling() is
    'Before INSERT of a job (not a routine run''s) without both ceilings: max_cost_usd and '
    'max_tokens from its loop node, else its agent; the job''s own value wins.';

create or replace trigger job_spend_ceiling
    before insert on job
    for each row when ((new.max_cost_usd is null or new.max_tokens is null)
                       and new.routine_run_id is null)
    execute function _tg_job_spend_ceiling();

-- What is left of a job's spend ceilings after its runs so far: NULL where it
-- has no ceiling. The one sum of a job's spend, for claim_jobs (what the
-- agent may still spend: Claude Code's --max-budget-usd, the listener's
-- watch of streamed usage), finish_runs (has a run passed it) and
-- raise_job_budget (a ceiling below what was spent is refused). A probe of
-- agent_run_job_idx, and none for a job without a ceiling.
create or replace function _job_budget_left(p_job_id uuid, p_max_cost_usd numeric,
                                            p_max_tokens bigint,
                                            out usd numeric, out tokens bigint)
language plpgsql stable
as $$
begin
    if p_max_cost_usd is null and p_max_tokens is null then
        return;
    end if;
    select p_max_cost_usd - coalesce(sum(r.cost_usd), 0),
           p_max_tokens - coalesce(sum(coalesce(r.tokens_in, 0) + coalesce(r.tokens_out, 0)), 0)
    into usd, tokens
    from agent_run r
    where r.job_id = p_job_id;
end;
$$;

comment on function _job_budget_left(uuid, numeric, bigint) is
    'What is left of a job''s max_cost_usd and max_tokens after all its runs (NULL: no ceiling); '
    'zero or less: spent.';
