-- JSON written from outside is nested at most _input_cap('json_depth') levels.
--
-- Called by: PostgreSQL, BEFORE INSERT or UPDATE of the JSON columns that
-- users, operators and their clients write: events.payload, job.payload,
-- routines.trigger_config / action_config / state, loops.graph /
-- repeat_policy / triggers, topology_runs.graph, settings.value, agents.env.
-- Guarantees: no such column stores a document nested deeper than the cap;
-- the error (CE422) names the column and the rule, never the document. Rows
-- within the cap call no PL/pgSQL: the triggers' WHEN clauses test them in
-- the executor. The triggers are named <table>_bounded_json, so they sort,
-- and fire, before the table's other BEFORE triggers: a document too deep to
-- keep is refused before anything validates or fires on it.
--
-- Why a cap on depth and not only on length: the listener's JSON decoder
-- recurses once per level, and 3,000 levels are only 6 KB of brackets. One
-- such job payload stopped every listener that claimed it.

set local search_path = ceaseless, pg_catalog, pg_temp;

-- Is a document nested deeper than the cap? A value at level N sits inside N
-- arrays or objects; strict mode, so arrays are not unwrapped on the way.
-- The path is built from the cap, so the number lives in one place.
create or replace function _json_too_deep(p_value jsonb)
returns boolean
language sql immutable
set search_path = pg_catalog, ceaseless, pg_temp
as $$
    select coalesce(pg_catalog.jsonb_path_exists(
        p_value,
        ('strict $.**{' || (ceaseless._input_cap('json_depth') + 1) || '}')::pg_catalog.jsonpath),
        false);
$$;

comment on function _json_too_deep(jsonb) is
    'True when the document has a value nested deeper than _input_cap(''json_depth'') levels.';

-- The trigger's arguments name the row's JSON columns; the first one nested
-- too deep is refused. Called only for a row that the WHEN clause found too
-- deep, so reading the row as JSON here costs nothing on the common path.
create or replace function _tg_bounded_json()
returns trigger
language plpgsql
set search_path = pg_catalog, ceaseless, pg_temp
as $$
declare
    v_row constant jsonb := to_jsonb(new);
    v_column text;
begin
    foreach v_column in array tg_argv loop
        if _json_too_deep(v_row -> v_column) then
            raise exception '%.%: must be nested at most % levels deep; this document is nested '
                            'deeper (% characters of JSON)',
                tg_table_name, v_column, _input_cap('json_depth'),
                char_length((v_row -> v_column)::text)
                using errcode = 'CE422', table = tg_table_name, column = v_column,
                      hint = 'Flatten the document: deep nesting is refused so that every '
                             'reader can decode it.';
        end if;
    end loop;
    return new;
end;
$$;

comment on function _tg_bounded_json() is
    'Before INSERT/UPDATE: refuse (CE422) a JSON column (named by the trigger''s arguments) nested '
    'deeper than _input_cap(''json_depth'').';

create or replace trigger events_bounded_json
    before insert or update of payload on events
    for each row
    when (ceaseless._json_too_deep(new.payload))
    execute function _tg_bounded_json('payload');

create or replace trigger job_bounded_json
    before insert or update of payload on job
    for each row
    when (ceaseless._json_too_deep(new.payload))
    execute function _tg_bounded_json('payload');

create or replace trigger routines_bounded_json
    before insert or update of trigger_config, action_config, state on routines
    for each row
    when (ceaseless._json_too_deep(new.trigger_config)
          or ceaseless._json_too_deep(new.action_config)
          or ceaseless._json_too_deep(new.state))
    execute function _tg_bounded_json('trigger_config', 'action_config', 'state');

create or replace trigger loops_bounded_json
    before insert or update of graph, repeat_policy, triggers on loops
    for each row
    when (ceaseless._json_too_deep(new.graph)
          or ceaseless._json_too_deep(new.repeat_policy)
          or ceaseless._json_too_deep(new.triggers))
    execute function _tg_bounded_json('graph', 'repeat_policy', 'triggers');

create or replace trigger topology_runs_bounded_json
    before insert or update of graph on topology_runs
    for each row
    when (ceaseless._json_too_deep(new.graph))
    execute function _tg_bounded_json('graph');

create or replace trigger settings_bounded_json
    before insert or update of value on settings
    for each row
    when (ceaseless._json_too_deep(new.value))
    execute function _tg_bounded_json('value');

create or replace trigger agents_bounded_json
    before insert or update of env on agents
    for each row
    when (ceaseless._json_too_deep(new.env))
    execute function _tg_bounded_json('env');
