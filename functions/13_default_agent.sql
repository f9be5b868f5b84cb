-- The default agent: settings.default_agent names the lane that runs a
-- routine, a job or a topology node which names none.
--
-- Called by: PostgreSQL, before an INSERT into routines, job, loops or
-- topology_runs that leaves an agent out (and an UPDATE that sets one to
-- NULL or drops a node's), and before a write of the default_agent setting.
-- Guarantees:
-- - the default is filled in when the row is written, so the stored row
--   names its agent like any other: changing the default later moves no
--   existing routine, job or loop;
-- - with no default set (the setting absent or JSON null), the write fails
--   with CE422 naming the field that needs an agent and how to set a
--   default; a default naming an agent that no longer exists fails the same
--   way, naming it (a rename does not follow into the setting);
-- - settings.default_agent holds JSON null or the name of a registered agent
--   when it is written (CE422 otherwise);
-- - a row that names its agent costs no function call (the triggers' WHEN
--   clauses); seed-shaped routine inserts, which have no agent column, work
--   once a default exists.

-- The default agent's name, for a row at p_where that names none; raises
-- CE422 naming p_where when there is no usable default.
create or replace function _default_agent(p_where text)
returns text
language plpgsql stable
as $$
declare
    v_value jsonb;
begin
    select s.value into v_value from settings s where s.key = 'default_agent';
    if v_value is null or jsonb_typeof(v_value) <> 'string' then
        perform _invalid_value(p_where,
            'must name a registered agent (ceaseless.agents), and no default agent is set: name '
            'one, or set a default with update ceaseless.settings '
            'set value = to_jsonb(''NAME''::text) where key = ''default_agent''', null);
    end if;
    if not exists (select from agents a where a.name = v_value #>> '{}') then
        perform _invalid_value(p_where,
            'must name a registered agent, and settings.default_agent names one that is not '
            'registered (renamed or deleted?): name one, or set the default again', v_value);
    end if;
    return v_value #>> '{}';
end;
$$;

comment on function _default_agent(text) is
    'The name in settings.default_agent for a row at p_where that names no agent; CE422 naming '
    'p_where when no default is set or it names no registered agent.';

-- routines.agent and job.agent: NULL (left out) becomes the default.
create or replace function _tg_default_agent()
returns trigger
language plpgsql
as $$
begin
    new.agent := _default_agent(tg_table_name || '.agent');
    return new;
end;
$$;

comment on function _tg_default_agent() is
    'Before INSERT or UPDATE of routines or job with agent NULL: fill settings.default_agent '
    '(CE422 naming the field when there is none).';

-- Named to sort before the other BEFORE triggers of each table
-- (routines_validate, job_input, job_validate), which then see the agent.
create or replace trigger routines_default_agent
    before insert or update of agent on routines
    for each row when (new.agent is null)
    execute function _tg_default_agent();

create or replace trigger job_default_agent
    before insert or update of agent on job
    for each row when (new.agent is null)
    execute function _tg_default_agent();

-- A graph whose nodes name no agent ("agent" absent or JSON null) gets the
-- default written into them; any other graph is returned as it is, and its
-- shape is left to _validate_topology_graph, which names what is wrong.
create or replace function _graph_with_default_agent(p_where text, p_graph jsonb)
returns jsonb
language plpgsql stable
as $$
declare
    v_agent text;
begin
    if jsonb_typeof(p_graph) is distinct from 'object'
       or jsonb_typeof(p_graph -> 'nodes') is distinct from 'array'
       or not exists (select from jsonb_array_elements(p_graph -> 'nodes') n
                      where jsonb_typeof(n) = 'object'
                        and coalesce(jsonb_typeof(n -> 'agent'), 'null') = 'null') then
        return p_graph;
    end if;
    v_agent := _default_agent(p_where || '.nodes.agent');
    return jsonb_set(p_graph, '{nodes}', (
        select jsonb_agg(case when jsonb_typeof(n) = 'object'
                                   and coalesce(jsonb_typeof(n -> 'agent'), 'null') = 'null'
                              then n || jsonb_build_object('agent', v_agent)
                              else n end
                         order by o)
        from jsonb_array_elements(p_graph -> 'nodes') with ordinality as e(n, o)));
end;
$$;

comment on function _graph_with_default_agent(text, jsonb) is
    'p_graph with settings.default_agent written into every node that names no agent (CE422 '
    'naming p_where.nodes.agent when there is no default).';

-- loops.graph and topology_runs.graph: nodes without an agent get the default.
create or replace function _tg_graph_default_agent()
returns trigger
language plpgsql
as $$
begin
    new.graph := _graph_with_default_agent(tg_table_name || '.graph', new.graph);
    return new;
end;
$$;

comment on function _tg_graph_default_agent() is
    'Before a loop or a topology run is inserted, or its graph updated: write the default agent '
    'into nodes that name none.';

-- Sort before loops_graph_validate / topology_runs_loop_lock and
-- topology_runs_validate, which then validate the completed graph.
create or replace trigger loops_default_agent
    before insert or update of graph on loops
    for each row execute function _tg_graph_default_agent();

create or replace trigger topology_runs_default_agent
    before insert on topology_runs
    for each row execute function _tg_graph_default_agent();

-- The setting itself: JSON null (no default) or a registered agent's name.
-- Checked when written, so a typo fails the operator's UPDATE rather than the
-- next user's INSERT.
create or replace function _tg_settings_default_agent()
returns trigger
language plpgsql
as $$
begin
    if jsonb_typeof(new.value) = 'null' then
        return new;
    end if;
    if jsonb_typeof(new.value) <> 'string'
       or not exists (select from agents a where a.name = new.value #>> '{}') then
        perform _invalid_value('settings.default_agent',
            'must be the name of a registered agent (ceaseless.agents) as a JSON string, or '
            'null for no default', new.value);
    end if;
    return new;
end;
$$;

comment on function _tg_settings_default_agent() is
    'Before INSERT/UPDATE of the default_agent setting: JSON null or a registered agent''s name '
    '(CE422 otherwise).';

create or replace trigger settings_default_agent
    before insert or update on settings
    for each row when (new.key = 'default_agent')
    execute function _tg_settings_default_agent();
