-- Jobs: the bounds on what a job carries to its agent.
--
-- Called by: PostgreSQL (BEFORE INSERT or UPDATE of prompt or payload on job),
-- whoever inserts the job: a routine's fire, an operator, a user's client.
-- Guarantees: no job is stored whose prompt is blank (_is_blank: empty or
-- only whitespace, as a routine's or a loop's is refused), or whose prompt or
-- payload is longer than its cap (_input_cap), or whose
-- payload.context_paths names a file outside the workspace (absolute, or
-- with a .. component); the error names the field, the rule and the value,
-- the length or the path (CE422), never a whole long value; a job a user role
-- inserts is due no earlier than its insert.
-- Rows within the bounds do not call the PL/pgSQL function at all: the
-- trigger's WHEN clause tests them in the executor, so a fire of a thousand
-- routines pays for no PL/pgSQL call.

set local search_path = ceaseless, pg_catalog, pg_temp;

-- Is a value a path the listener may read context from: a JSON string, not
-- blank, relative, without a .. component? The listener checks again where
-- the path resolves (symlinks included), against its workspace root.
create or replace function _is_workspace_path(p_value jsonb)
returns boolean
language sql immutable
set search_path = pg_catalog, ceaseless, pg_temp
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
set search_path = pg_catalog, ceaseless, pg_temp
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
-- context path. _is_blank is the one test of blankness (a call of about 2 µs
-- a row on PostgreSQL 15), not a second pattern written out here.
create or replace trigger job_input
    before insert or update of prompt, payload on job
    for each row
    when (char_length(new.prompt) > ceaseless._input_cap('job_prompt')
          or char_length(new.payload::text) > ceaseless._input_cap('job_payload')
          or coalesce(new.payload -> 'context_paths' <> '[]'::jsonb, false)
          or ceaseless._is_blank(new.prompt))
    execute function _tg_job_input();

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
set search_path = pg_catalog, ceaseless, pg_temp
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
