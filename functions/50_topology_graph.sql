-- Topology graphs: the one validation of a graph, wherever it is stored, and
-- the workspace a loop or run lands in when it names none.
--
-- Called by: PostgreSQL, before a loop is inserted or its graph changes
-- (loops_graph_validate) and before a topology run is inserted or its graph
-- would change (topology_runs_validate, which also fills the run's workspace
-- and refuses a run inserted in a state the engine did not put it in).
-- Guarantees: no loop and no live run stores a graph that is not
--   {"nodes": [{"id", "agent", "prompt", "gate"?, "approval_timeout_secs"?,
--               "on_expiry"?, "remind_before_secs"?}],
--    "edges": [{"from", "to"}]}
-- with 1 to 200 nodes (_input_cap graph_nodes) of unique safe ids, each naming
-- a registered agent and a prompt that is not blank and within the prompt cap,
-- a gate only "approval" and a timeout only with it, and up to 2,000 edges
-- (graph_edges) between known nodes, none a self-edge or a duplicate, and no
-- cycle. The error (CE422) names the field, the culprit (node id, edge
-- from→to, the nodes of a cycle or the key) and a bounded value. A run's
-- graph never changes after its insert: a loop's later edit cannot change
-- what a running iteration does. Reads only and takes no lock, except that
-- the first run or loop without a workspace creates the default one.

-- The workspace a loop or run lands in when it names none: one called
-- `default`, created on first use. Security definer, so a user role need not
-- be able to write workspaces; the name is fixed, so it cannot be steered.
create or replace function _default_workspace()
returns uuid
language plpgsql
security definer
as $$
declare
    v_id uuid;
begin
    select id into v_id from workspaces where name = 'default';
    if v_id is null then
        insert into workspaces (name) values ('default')
        on conflict (name) do nothing
        returning id into v_id;
        if v_id is null then
            select id into v_id from workspaces where name = 'default';
        end if;
    end if;
    return v_id;
end;
$$;

comment on function _default_workspace() is
    'The id of the workspace named default, created on first use: where a loop or topology run '
    'that names no workspace lands.';

-- A node id goes into job dedup keys, prompt headings ("## Output of <id>")
-- and NOTIFY payloads: letters, digits and ._- only, so it can neither forge
-- a heading nor carry a megabyte.
create or replace function _topology_node_id_ok(p_id jsonb)
returns boolean
language plpgsql immutable
as $$
begin
    return coalesce(pg_catalog.jsonb_typeof(p_id) = 'string'
                    and (p_id #>> '{}') ~ '^[A-Za-z0-9_.-]{1,64}$', false);
end;
$$;

comment on function _topology_node_id_ok(jsonb) is
    'True for a JSON string that may be a topology node id: 1-64 of A-Z a-z 0-9 _ . -.';

-- Refuse a graph's nodes or edges (p_part) that outnumber their cap
-- (_input_cap graph_nodes, graph_edges): each node becomes a row and a job of
-- every run, and the cycle check walks the edges. p_items is an array.
create or replace function _check_graph_size(p_where text, p_part text, p_items jsonb)
returns void
language plpgsql
as $$
declare
    v_cap constant integer := _input_cap('graph_' || p_part);
begin
    if jsonb_array_length(p_items) > v_cap then
        perform _invalid_value(p_where || '.' || p_part,
            format('must have at most %s %s, this graph has %s', v_cap, p_part,
                   jsonb_array_length(p_items)), null);
    end if;
end;
$$;

comment on function _check_graph_size(text, text, jsonb) is
    'Raise CE422 naming p_where.p_part when the array p_items is longer than the graph_<p_part> '
    'cap (nodes or edges).';

-- Validate a topology graph, raising CE422 on the first rule it breaks.
--
-- The size caps are checked before any per-node work, so a graph of a
-- million nodes costs one jsonb_array_length. The cycle check computes which
-- nodes reach which (at most 200 x 200 pairs) only when a topological peel
-- (linear in the edges) leaves nodes over, and then names the nodes of one cycle: the strongly
-- connected component of the first node (in graph order) that reaches
-- itself.
create or replace function _validate_topology_graph(p_where text, p_graph jsonb)
returns void
language plpgsql
as $$
declare
    v_nodes jsonb;
    v_edges jsonb;
    v_node jsonb;
    v_edge jsonb;
    v_key text;
    v_id text;
    v_ids text[] := '{}';
    v_pairs text[] := '{}';
    v_pair text;
    v_at integer := 0;
    v_left integer;
    v_cycle text[];
    v_indeg integer[];
    v_out jsonb;
    v_queue integer[];
    v_head integer;
    v_next integer;
begin
    if p_graph is null or jsonb_typeof(p_graph) <> 'object' then
        perform _invalid_value(p_where,
            'must be an object {"nodes": [...], "edges": [...]}', p_graph);
    end if;
    v_key := _unknown_key(p_graph, '{nodes, edges}');
    if v_key is not null then
        perform _invalid_value(p_where,
            format('unknown key %s: a graph has only nodes and edges', to_jsonb(v_key)),
            p_graph);
    end if;

    v_nodes := p_graph -> 'nodes';
    if jsonb_typeof(v_nodes) is distinct from 'array' or jsonb_array_length(v_nodes) = 0 then
        perform _invalid_value(p_where || '.nodes', 'must be a non-empty array of nodes', v_nodes);
    end if;
    perform _check_graph_size(p_where, 'nodes', v_nodes);
    v_edges := coalesce(p_graph -> 'edges', '[]');
    if jsonb_typeof(v_edges) = 'null' then
        v_edges := '[]';
    end if;
    if jsonb_typeof(v_edges) <> 'array' then
        perform _invalid_value(p_where || '.edges',
            'must be an array of {"from", "to"} objects (or absent)', v_edges);
    end if;
    perform _check_graph_size(p_where, 'edges', v_edges);

    for v_node in select value from jsonb_array_elements(v_nodes) loop
        v_at := v_at + 1;
        if jsonb_typeof(v_node) <> 'object' then
            perform _invalid_value(p_where || '.nodes',
                format('node %s must be an object {"id", "agent", "prompt"}', v_at), v_node);
        end if;
        if not _topology_node_id_ok(v_node -> 'id') then
            perform _invalid_value(p_where || '.nodes',
                format('node %s: id must be 1-64 letters, digits, _ . or -', v_at),
                v_node -> 'id');
        end if;
        v_id := v_node ->> 'id';
        if v_id = any (v_ids) then
            perform _invalid_value(p_where || '.nodes',
                format('node id %s appears twice: ids must be unique', to_jsonb(v_id)),
                v_node -> 'id');
        end if;
        v_ids := v_ids || v_id;
        v_key := _unknown_key(v_node, '{id, agent, prompt, gate, approval_timeout_secs, '
                                      'on_expiry, remind_before_secs, max_cost_usd, max_tokens}');
        if v_key is not null then
            perform _invalid_value(p_where || '.nodes',
                format('node %s: unknown key %s (a node has id, agent, prompt, gate, '
                       'approval_timeout_secs, on_expiry, remind_before_secs, max_cost_usd, '
                       'max_tokens)',
                       to_jsonb(v_id), to_jsonb(v_key)),
                v_node);
        end if;
        -- The spend ceilings of the node's job (job_spend_ceiling,
        -- 11_job_input.sql): a ceiling of zero would block the job unrun.
        -- Nested, not OR: the cast must not see a value that is no number.
        if coalesce(jsonb_typeof(v_node -> 'max_cost_usd'), 'null') <> 'null' then
            if jsonb_typeof(v_node -> 'max_cost_usd') <> 'number'
               or (case when jsonb_typeof(v_node -> 'max_cost_usd') = 'number'
                        then (v_node ->> 'max_cost_usd')::numeric end)
                  not between 0.000001 and 999999 then
                perform _invalid_value(p_where || '.nodes',
                    format('node %s: max_cost_usd must be a number of USD above 0 (at most '
                           '999999)', to_jsonb(v_id)),
                    v_node -> 'max_cost_usd');
            end if;
        end if;
        perform _check_positive_int(
            p_where || '.nodes', v_node -> 'max_tokens',
            format('node %s: max_tokens must be a positive integer', to_jsonb(v_id)));
        if jsonb_typeof(v_node -> 'agent') is distinct from 'string'
           or not exists (select from agents a where a.name = v_node ->> 'agent') then
            perform _invalid_value(p_where || '.nodes',
                format('node %s: agent must name a registered agent (ceaseless.agents)',
                       to_jsonb(v_id)),
                v_node -> 'agent');
        end if;
        perform _check_text(p_where || '.nodes', v_node -> 'prompt',
                            format('node %s: prompt must be a string that is not blank',
                                   to_jsonb(v_id)));
        perform _refuse_long(format('%s.nodes[%s].prompt', p_where, v_id),
                             v_node ->> 'prompt', 'prompt');
        if coalesce(jsonb_typeof(v_node -> 'gate'), 'null') <> 'null'
           and v_node -> 'gate' <> '"approval"' then
            perform _invalid_value(p_where || '.nodes',
                format('node %s: gate must be "approval" or absent', to_jsonb(v_id)),
                v_node -> 'gate');
        end if;
        if coalesce(jsonb_typeof(v_node -> 'approval_timeout_secs'), 'null') <> 'null' then
            if coalesce(jsonb_typeof(v_node -> 'gate'), 'null') = 'null' then
                perform _invalid_value(p_where || '.nodes',
                    format('node %s: approval_timeout_secs needs "gate": "approval"',
                           to_jsonb(v_id)),
                    v_node -> 'approval_timeout_secs');
            end if;
            perform _check_positive_int(
                p_where || '.nodes', v_node -> 'approval_timeout_secs',
                format('node %s: approval_timeout_secs must be a positive integer of seconds',
                       to_jsonb(v_id)));
        end if;
        -- What an expiry does, and a reminder before it, only mean something
        -- for a gate that expires.
        if coalesce(jsonb_typeof(v_node -> 'on_expiry'), 'null') <> 'null' then
            if coalesce(jsonb_typeof(v_node -> 'approval_timeout_secs'), 'null') = 'null' then
                perform _invalid_value(p_where || '.nodes',
                    format('node %s: on_expiry needs approval_timeout_secs', to_jsonb(v_id)),
                    v_node -> 'on_expiry');
            end if;
            if v_node -> 'on_expiry' not in ('"fail"', '"skip"', '"approve"') then
                perform _invalid_value(p_where || '.nodes',
                    format('node %s: on_expiry must be "fail", "skip" or "approve"',
                           to_jsonb(v_id)),
                    v_node -> 'on_expiry');
            end if;
        end if;
        if coalesce(jsonb_typeof(v_node -> 'remind_before_secs'), 'null') <> 'null' then
            perform _check_positive_int(
                p_where || '.nodes', v_node -> 'remind_before_secs',
                format('node %s: remind_before_secs must be a positive integer of seconds',
                       to_jsonb(v_id)));
            if coalesce(jsonb_typeof(v_node -> 'approval_timeout_secs'), 'null') = 'null'
               or (v_node ->> 'remind_before_secs')::numeric
                  >= (v_node ->> 'approval_timeout_secs')::numeric then
                perform _invalid_value(p_where || '.nodes',
                    format('node %s: remind_before_secs must be less than approval_timeout_secs',
                           to_jsonb(v_id)),
                    v_node -> 'remind_before_secs');
            end if;
        end if;
    end loop;

    for v_edge in select value from jsonb_array_elements(v_edges) loop
        if jsonb_typeof(v_edge) <> 'object' then
            perform _invalid_value(p_where || '.edges',
                'each edge must be an object {"from", "to"}', v_edge);
        end if;
        v_key := _unknown_key(v_edge, '{from, to}');
        if v_key is not null then
            perform _invalid_value(p_where || '.edges',
                format('unknown key %s in an edge (an edge has from and to)', to_jsonb(v_key)),
                v_edge);
        end if;
        if jsonb_typeof(v_edge -> 'from') is distinct from 'string'
           or not (v_edge ->> 'from' = any (v_ids)) then
            perform _invalid_value(p_where || '.edges',
                format('edge %s→%s: from must name a node of the graph',
                       coalesce(v_edge ->> 'from', '?'), coalesce(v_edge ->> 'to', '?')),
                v_edge -> 'from');
        end if;
        if jsonb_typeof(v_edge -> 'to') is distinct from 'string'
           or not (v_edge ->> 'to' = any (v_ids)) then
            perform _invalid_value(p_where || '.edges',
                format('edge %s→%s: to must name a node of the graph',
                       v_edge ->> 'from', coalesce(v_edge ->> 'to', '?')),
                v_edge -> 'to');
        end if;
        if v_edge ->> 'from' = v_edge ->> 'to' then
            perform _invalid_value(p_where || '.edges',
                format('edge %s→%s: a node cannot be its own upstream',
                       v_edge ->> 'from', v_edge ->> 'to'),
                v_edge);
        end if;
        -- Node ids cannot hold a space, so the pair is unambiguous.
        v_pair := (v_edge ->> 'from') || ' ' || (v_edge ->> 'to');
        if v_pair = any (v_pairs) then
            perform _invalid_value(p_where || '.edges',
                format('edge %s→%s appears twice', v_edge ->> 'from', v_edge ->> 'to'), v_edge);
        end if;
        v_pairs := v_pairs || v_pair;
    end loop;

    if cardinality(v_pairs) = 0 then
        return;
    end if;

    -- Peel the graph from its sources (Kahn): what cannot be peeled lies on
    -- a cycle or downstream of one. Nodes by position, each node's
    -- downstream positions in one array, so the walk is linear in the edges.
    select coalesce(array_agg(coalesce(d.n, 0) order by u.at), '{}')
    into v_indeg
    from unnest(v_ids) with ordinality as u(id, at)
    left join (select split_part(p, ' ', 2) as dst, count(*)::integer as n
               from unnest(v_pairs) p group by 1) d on d.dst = u.id;
    select jsonb_object_agg(e.src, e.dsts) into v_out
    from (select split_part(p, ' ', 1) as src,
                 jsonb_agg(array_position(v_ids, split_part(p, ' ', 2))) as dsts
          from unnest(v_pairs) p group by 1) e;
    v_queue := array(select i from generate_subscripts(v_indeg, 1) i where v_indeg[i] = 0);
    v_left := cardinality(v_ids);
    v_head := 1;
    while v_head <= cardinality(v_queue) loop
        v_left := v_left - 1;
        for v_next in select value::integer
                      from jsonb_array_elements_text(
                          coalesce(v_out -> v_ids[v_queue[v_head]], '[]')) loop
            v_indeg[v_next] := v_indeg[v_next] - 1;
            if v_indeg[v_next] = 0 then
                v_queue := v_queue || v_next;
            end if;
        end loop;
        v_head := v_head + 1;
    end loop;
    if v_left = 0 then
        return;
    end if;

    -- A cycle: which nodes reach which, and the component of the first node
    -- (in graph order) that reaches itself.
    with recursive edge as (
        select split_part(p, ' ', 1) as src, split_part(p, ' ', 2) as dst
        from unnest(v_pairs) p
    ),
    reach (src, dst) as (
        select src, dst from edge
        union
        select r.src, e.dst from reach r join edge e on e.src = r.dst
    ),
    first_in_cycle as (
        select n.id
        from unnest(v_ids) with ordinality as n(id, at)
        where exists (select from reach r where r.src = n.id and r.dst = n.id)
        order by n.at
        limit 1
    )
    select array_agg(n.id order by n.at) into v_cycle
    from unnest(v_ids) with ordinality as n(id, at), first_in_cycle f
    where n.id = f.id
       or (exists (select from reach r where r.src = f.id and r.dst = n.id)
           and exists (select from reach r where r.src = n.id and r.dst = f.id));
    perform _invalid_value(p_where || '.edges',
        format('must not form a cycle; these nodes form one: %s%s',
               array_to_string(v_cycle[1:20], ', '),
               case when cardinality(v_cycle) > 20
                    then format(' … (%s nodes)', cardinality(v_cycle)) else '' end),
        to_jsonb(v_cycle[1:20]));
end;
$$;

comment on function _validate_topology_graph(text, jsonb) is
    'Raise CE422 unless p_graph is a valid topology graph (shape, known agents, unique safe ids, '
    'bounded prompts and size, edges between known nodes, acyclic), naming the culprit.';

-- A loop's graph is checked when the loop is created and whenever it is
-- edited, so every iteration copies a graph that was valid when stored.
-- Sorts before loops_validate (the loop's other columns), so a bad graph is
-- named first.
create or replace function _tg_loops_graph_validate()
returns trigger
language plpgsql
as $$
begin
    perform _validate_topology_graph('loops.graph', new.graph);
    return new;
end;
$$;

comment on function _tg_loops_graph_validate() is
    'Before a loop is inserted or its graph is updated: refuse an invalid graph (CE422).';

create or replace trigger loops_graph_validate
    before insert or update of graph on loops
    for each row execute function _tg_loops_graph_validate();

-- A run is inserted pending (to run) or skipped (a refused fire, recorded):
-- any other state would be one the engine never put it in — a run inserted
-- as succeeded with a made-up final_message, or running with no nodes. A
-- skipped run never runs, and copies a loop graph that was checked when the
-- loop stored it (an agent renamed since would otherwise make the skip
-- itself fail), so only runs that will run are checked. The task is bounded
-- like a job's prompt, which it becomes part of. NOT NULL is checked after
-- BEFORE triggers, so the default workspace can be filled in here.
create or replace function _tg_topology_runs_validate()
returns trigger
language plpgsql
as $$
begin
    if tg_op = 'UPDATE' then
        if new.graph is distinct from old.graph then
            raise exception 'topology_runs.graph: a run keeps the graph it was created with; '
                            'start a new run (or edit the loop) instead'
                using errcode = 'CE422', table = 'topology_runs', column = 'graph';
        end if;
        return new;
    end if;
    if new.status not in ('pending', 'skipped') then
        raise exception 'topology_runs.status: a run is inserted pending (or skipped, for a '
                        'refused fire); the engine moves it on; got %', to_jsonb(new.status)
            using errcode = 'CE422', table = 'topology_runs', column = 'status';
    end if;
    if new.status <> 'skipped' then
        perform _validate_topology_graph('topology_runs.graph', new.graph);
        perform _refuse_long('topology_runs.task', new.task, 'job_prompt');
        if new.started_at is not null or new.final_message is not null or new.error is not null
        then
            raise exception 'topology_runs: started_at, final_message and error are the '
                            'engine''s to set; insert a run without them'
                using errcode = 'CE422', table = 'topology_runs';
        end if;
    end if;
    new.workspace_id := coalesce(new.workspace_id, _default_workspace());
    return new;
end;
$$;

comment on function _tg_topology_runs_validate() is
    'Before a topology run is inserted: refuse an invalid graph, an oversized task or a state '
    'other than pending or skipped (CE422), and fill the default workspace; before an update: '
    'refuse a change of the graph.';

create or replace trigger topology_runs_validate
    before insert or update of graph on topology_runs
    for each row execute function _tg_topology_runs_validate();
