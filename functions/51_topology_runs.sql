-- Topology runs: start, fan-out, fan-in, finish, fail, cancel.
--
-- Called by: PostgreSQL — after a topology run is inserted pending (a user's
-- INSERT, run_loop, a loop's fire), and after every UPDATE statement on job
-- (finish_runs, claim_jobs, expire_leases, release_jobs, cancel_job,
-- retry_job, a plain UPDATE) and after an agent is disabled; operators and
-- owners (cancel_topology_run, retry_topology_run);
-- listeners' maintenance tick (cancel_orphaned_topology_jobs); decide_approval
-- and expire_approvals (52_approvals.sql).
-- Guarantees:
-- - a pending run gets one topology_nodes row per graph node (upstream_left =
--   its in-degree), becomes running, and starts every node without upstreams,
--   all in its INSERT's transaction; a skipped run is never started;
-- - a node starts exactly once: when its last upstream is done (succeeded,
--   or skipped: its approval expired under on_expiry skip), under its
--   run's row lock, the decrement that reaches zero is the one that starts it
--   (a gated node asks for approval, any other gets a loop_node job whose
--   prompt carries the task and its upstreams' outputs, bounded, a skipped
--   upstream said plainly in place of its output);
-- - a node follows its job: claimed / running → running, back to pending (a
--   retry, a reply) → queued, blocked (its agent asks for a person, spent
--   its ceiling, could not log in) → blocked, its run live and waiting with
--   it until reply_job, raise_job_budget or retry_job sends the job on, or
--   cancel_job ends it; delivered → succeeded with the job's reply as
--   output, failed / abandoned / cancelled (after the job's own retries) →
--   failed, which fails the run, cancels its unfinished nodes and its live
--   and blocked jobs;
-- - a run is awaiting_approval while a node awaits approval and none is
--   queued or running, running otherwise, and succeeded when every node is
--   done (succeeded or skipped),
--   with the sink nodes' outputs as final_message; a terminal run never moves
--   again, whatever its jobs do later (a sibling finishing after the run
--   failed): such jobs are cancelled, now or by the sweep; only
--   retry_topology_run brings a failed or cancelled run back to running, its
--   failed and cancelled nodes queued or waiting again and its succeeded ones
--   kept; a node's job is never run again on its own (retry_job on it is
--   refused, CE409, naming retry_topology_run), so a run never holds a live
--   job it does not follow;
-- - NOTIFY and audit of every run, node and approval change: by the triggers
--   of 25_notify_audit.sql.
--
-- Lock order (no deadlock between any two of: finishing, claiming, expiring
-- or cancelling jobs of one run on several listeners, cancel_topology_run,
-- decide_approval, expire_approvals, the orphan sweep):
--   1. job rows — held already by the statement that changes them;
--   2. the run row, FOR NO KEY UPDATE (runs of one statement in id order):
--      every write to a run's nodes, approvals or status happens under it, so
--      node rows need no lock order of their own;
--   3. other jobs of the run: new ones are inserted (no wait); live ones are
--      cancelled FOR UPDATE SKIP LOCKED, never waited for — a job held by
--      another statement (a listener finishing it, waiting for the run row we
--      hold) is left to the maintenance sweep, cancel_orphaned_topology_jobs,
--      which cancels the live jobs of terminal runs.
--   retry_topology_run takes the run, then its jobs NOWAIT (refusing, never
--   waiting, when one is held), then (an iteration) its loop, last, as an
--   iteration's end does (56_loop_firing.sql).
-- Nothing waits for a job row while holding a run row, so no cycle forms.
-- Foreign keys to the run (nodes, jobs, approvals) take KEY SHARE, which FOR
-- NO KEY UPDATE does not block.

-- A text cut to p_chars characters, with a visible marker saying how much
-- was cut, so the next agent knows it sees a part.
create or replace function _topology_cut(p_text text, p_chars integer)
returns text
language plpgsql immutable
as $$
begin
    return case when pg_catalog.char_length(p_text) <= p_chars then p_text
                else pg_catalog.left(p_text, p_chars)
                     || pg_catalog.format(E'\n\n[… cut: %s more characters not shown]',
                                          pg_catalog.char_length(p_text) - p_chars) end;
end;
$$;

comment on function _topology_cut(text, integer) is
    'p_text cut to p_chars characters, followed by a marker naming how many were cut.';

-- The nodes of a run's graph with their position, the order in which
-- prompts list upstreams and final messages list sinks.
create or replace function _topology_graph_order(p_graph jsonb)
returns table (node_id text, at bigint)
language plpgsql immutable
as $$
begin
    return query
    select n.value ->> 'id', n.at
    from pg_catalog.jsonb_array_elements(p_graph -> 'nodes') with ordinality as n(value, at);
end;
$$;

comment on function _topology_graph_order(jsonb) is
    'The node ids of a topology graph with their 1-based position in its nodes array.';

-- What a node's agent is asked: its own prompt, the run's task, and each
-- upstream node's output (in graph order, each cut to the setting
-- topology_upstream_chars; a skipped upstream says so instead, so the agent
-- knows the input is missing rather than empty), the whole within the job
-- prompt cap.
create or replace function _topology_node_prompt(p_run_id uuid, p_node_id text)
returns text
language plpgsql stable
as $$
declare
    v_chars constant integer := _setting_int('topology_upstream_chars');
    v_cap constant integer := _input_cap('job_prompt');
    v_prompt text;
begin
    select n.prompt || E'\n\n## Task\n\n' || r.task
           || coalesce((select string_agg(format(E'\n\n## Output of %s\n\n%s', u.node_id,
                                                 _topology_node_output(u.state, u.output,
                                                                       v_chars)),
                                          '' order by g.at)
                        from jsonb_array_elements(r.graph -> 'edges') e
                        join topology_nodes u
                          on u.topology_run_id = r.id and u.node_id = e.value ->> 'from'
                        join _topology_graph_order(r.graph) g on g.node_id = u.node_id
                        where e.value ->> 'to' = n.node_id), '')
    into v_prompt
    from topology_runs r
    join topology_nodes n on n.topology_run_id = r.id and n.node_id = p_node_id
    where r.id = p_run_id;
    -- 100 characters of room for the marker.
    return _topology_cut(v_prompt, v_cap - 100);
end;
$$;

comment on function _topology_node_prompt(uuid, text) is
    'The prompt of a node''s job: its prompt, "## Task" and the run''s task, then "## Output of '
    '<node>" and each upstream''s output cut to topology_upstream_chars (a skipped one says so); '
    'within the job prompt cap.';

-- A finished node's output as its downstream nodes and the run's final
-- message read it: the output cut to p_chars (NULL: whole, for a final
-- message that is cut as a whole), or for a skipped node a line saying it
-- was skipped and why, never an empty output that looks like one.
create or replace function _topology_node_output(p_state text, p_output text, p_chars integer)
returns text
language plpgsql immutable
as $$
begin
    return case when p_state = 'skipped' then '(skipped: its approval expired)'
                when p_chars is null then coalesce(p_output, '')
                else _topology_cut(coalesce(p_output, ''), p_chars) end;
end;
$$;

comment on function _topology_node_output(text, text, integer) is
    'A node''s output as downstream prompts and final messages show it: cut to p_chars (NULL: '
    'whole), or "(skipped: its approval expired)" for a skipped node.';

-- Give a node its job: a loop_node job owned by the run's owner, one per
-- (run, node) by its dedup key, and the node queued with it. A node whose
-- agent is disabled fails instead, and its run with it: its job would wait
-- for a lane nobody claims from, holding the run (and its loop's one live
-- iteration) forever. The caller holds the run row. Returns the job, or
-- NULL when the node failed.
create or replace function _enqueue_topology_node(p_run_id uuid, p_node_id text)
returns uuid
language plpgsql
as $$
declare
    v_job_id uuid;
    v_agent text;
begin
    select n.agent into v_agent
    from topology_nodes n
    join agents a on a.name = n.agent
    where n.topology_run_id = p_run_id and n.node_id = p_node_id and not a.enabled;
    if v_agent is not null then
        perform _fail_topology_node(p_run_id, p_node_id,
                                    format('agent %s is disabled', v_agent), now());
        return null;
    end if;

    -- A loop's iterations give every node's job the loop's priority and
    -- fairness key (a run started without a loop: the defaults, the run's
    -- owner as key).
    insert into job (kind, agent, prompt, payload, topology_run_id, user_id, dedup_key,
                     priority, fairness_key)
    select 'loop_node', n.agent, _topology_node_prompt(p_run_id, p_node_id),
           jsonb_build_object('topology_run_id', p_run_id, 'node_id', p_node_id),
           p_run_id, r.user_id, format('topology:%s:%s', p_run_id, p_node_id),
           coalesce(l.job_priority, 0), coalesce(l.job_fairness_key, r.user_id)
    from topology_runs r
    join topology_nodes n on n.topology_run_id = r.id and n.node_id = p_node_id
    left join loops l on l.id = r.loop_id
    where r.id = p_run_id
    returning id into v_job_id;

    update topology_nodes
    set state = 'queued', job_id = v_job_id
    where topology_run_id = p_run_id and node_id = p_node_id;
    return v_job_id;
end;
$$;

comment on function _enqueue_topology_node(uuid, text) is
    'Insert the loop_node job of a run''s node (prompt from _topology_node_prompt, owned by the '
    'run''s owner) and mark the node queued, or fail it when its agent is disabled; the caller '
    'holds the run row.';

-- Start nodes whose upstreams have all succeeded: a gated node asks for
-- approval (_request_approval, 52_approvals.sql), any other is enqueued. The
-- caller holds the run row and passes only nodes still waiting.
create or replace function _start_topology_nodes(p_run_id uuid, p_node_ids text[],
                                                 p_now timestamptz)
returns void
language plpgsql
as $$
declare
    v_node record;
begin
    for v_node in
        select n.node_id, n.gate
        from topology_nodes n
        join topology_runs r on r.id = n.topology_run_id
        join _topology_graph_order(r.graph) g on g.node_id = n.node_id
        where n.topology_run_id = p_run_id
          and n.node_id = any (p_node_ids)
          and n.state = 'waiting'
          and n.upstream_left = 0
        order by g.at
    loop
        -- A node that could not start (its agent disabled) ended the run.
        exit when not exists (select from topology_runs r
                              where r.id = p_run_id
                                and r.status in ('running', 'awaiting_approval'));
        if v_node.gate = 'approval' then
            perform _request_approval(p_run_id, v_node.node_id, p_now);
        else
            perform _enqueue_topology_node(p_run_id, v_node.node_id);
        end if;
    end loop;
end;
$$;

comment on function _start_topology_nodes(uuid, text[], timestamptz) is
    'Start the given waiting nodes of a run whose upstreams have all succeeded: a gated node '
    'asks for approval, any other gets its job. The caller holds the run row.';

-- The run's outcome as its nodes stand: succeeded (with the sinks' outputs)
-- when every node is done (succeeded, or skipped), awaiting_approval while a
-- node waits for a person and nothing else runs, running otherwise. Failure
-- and cancellation are decided where they happen (_end_topology_run). The
-- caller holds the run row; a terminal run is left as it is.
create or replace function _settle_topology_run(p_run_id uuid, p_now timestamptz)
returns void
language plpgsql
as $$
declare
    v_run topology_runs;
    v_total integer;
    v_done integer;
    v_live integer;
    v_gated integer;
    v_final text;
begin
    select * into v_run from topology_runs where id = p_run_id;
    if v_run.status not in ('running', 'awaiting_approval') then
        return;
    end if;
    select count(*), count(*) filter (where state in ('succeeded', 'skipped')),
           count(*) filter (where state in ('queued', 'running')),
           count(*) filter (where state = 'awaiting_approval')
    into v_total, v_done, v_live, v_gated
    from topology_nodes where topology_run_id = p_run_id;

    if v_done = v_total then
        -- Sinks: nodes nothing depends on. One sink's output is the message;
        -- several are each headed by their node, in graph order.
        with sinks as (
            select n.node_id,
                   _topology_node_output(n.state, n.output, null) as output,
                   g.at
            from topology_nodes n
            join _topology_graph_order(v_run.graph) g on g.node_id = n.node_id
            where n.topology_run_id = p_run_id
              and not exists (select from jsonb_array_elements(v_run.graph -> 'edges') e
                              where e.value ->> 'from' = n.node_id)
        )
        select case when count(*) = 1 then min(s.output)
                    else string_agg(format(E'## %s\n\n%s', s.node_id, s.output), E'\n\n'
                                    order by s.at) end
        into v_final
        from sinks s;
        update topology_runs
        set status = 'succeeded', finished_at = p_now, updated_at = p_now,
            final_message = _topology_cut(v_final, _input_cap('run_final_message'))
        where id = p_run_id;
    elsif v_gated > 0 and v_live = 0 then
        update topology_runs set status = 'awaiting_approval', updated_at = p_now
        where id = p_run_id and status <> 'awaiting_approval';
    else
        update topology_runs set status = 'running', updated_at = p_now
        where id = p_run_id and status <> 'running';
    end if;
end;
$$;

comment on function _settle_topology_run(uuid, timestamptz) is
    'Set a live run''s status from its nodes: succeeded (final_message = the sink outputs) when '
    'all succeeded or were skipped, awaiting_approval while only gates wait, else running. '
    'Caller holds the run.';

-- Cancel live jobs of the given runs without waiting for any: a job locked
-- by another statement (a listener finishing it) is skipped and left to the
-- sweep. The rest end as every cancelled job does (_end_jobs). Returns how
-- many were cancelled.
create or replace function _cancel_topology_jobs(p_run_ids uuid[], p_reason text,
                                                 p_now timestamptz)
returns integer
language sql
as $$
    -- Probed by run (job_topology_run_idx), each run's few jobs; a blocked
    -- job waits for a person on behalf of its run, and ends with it.
    select _end_jobs(array(select j.id
                           from unnest(p_run_ids) as u(id)
                           join job j on j.topology_run_id = u.id
                           where j.state in ('pending', 'claimed', 'running', 'blocked')
                           for update of j skip locked),
                     'cancel', p_reason, p_now);
$$;

comment on function _cancel_topology_jobs(uuid[], text, timestamptz) is
    'Cancel the live jobs of these runs (their open agent runs too), skipping any another '
    'statement holds; returns how many. The orphan sweep catches the skipped ones.';

-- End a live run as failed or cancelled: its unfinished nodes cancelled, its
-- live jobs cancelled (those another statement holds, by the sweep later).
-- Its open approvals stay undecided: decide_approval and expire_approvals act
-- only on approvals whose node still awaits one, so they are dead, and the
-- record shows nobody decided. The caller holds the run row.
create or replace function _end_topology_run(p_run_id uuid, p_status text, p_error text,
                                             p_now timestamptz)
returns void
language plpgsql
as $$
begin
    update topology_runs
    set status = p_status, error = left(p_error, 4000), finished_at = p_now, updated_at = p_now
    where id = p_run_id and status in ('pending', 'running', 'awaiting_approval');
    if not found then
        return;
    end if;
    -- The run is terminal before its jobs are cancelled: the job trigger
    -- those cancels fire finds it so and changes nothing.
    update topology_nodes
    set state = 'cancelled', finished_at = p_now,
        error = case when state = 'waiting' then null
                     else format('run %s: %s', p_status, left(p_error, 500)) end
    where topology_run_id = p_run_id
      and state in ('waiting', 'awaiting_approval', 'queued', 'running', 'blocked');
    perform _cancel_topology_jobs(array[p_run_id], format('topology run %s %s', p_run_id, p_status),
                                  p_now);
end;
$$;

comment on function _end_topology_run(uuid, text, text, timestamptz) is
    'End a live run as failed or cancelled: its unfinished nodes cancelled, its live jobs '
    'cancelled (SKIP LOCKED), its open approvals left undecided. Caller holds the run row.';

-- Fail a node and with it its run: the error names the node. The caller
-- holds the run row.
create or replace function _fail_topology_node(p_run_id uuid, p_node_id text, p_error text,
                                               p_now timestamptz)
returns void
language plpgsql
as $$
begin
    update topology_nodes
    set state = 'failed', error = left(p_error, 4000), finished_at = p_now
    where topology_run_id = p_run_id and node_id = p_node_id;
    perform _end_topology_run(p_run_id, 'failed', format('node %s failed: %s', p_node_id, p_error),
                              p_now);
end;
$$;

comment on function _fail_topology_node(uuid, text, text, timestamptz) is
    'Mark a node failed and fail its run (error naming the node), cancelling the rest. Caller '
    'holds the run row.';

-- Start a run inserted pending: its nodes, then every node without an
-- upstream. In the INSERT's transaction, so a run is never seen pending by
-- anyone else, and a failure to start rolls the insert back.
create or replace function _tg_topology_runs_start()
returns trigger
language plpgsql
as $$
begin
    insert into topology_nodes (topology_run_id, node_id, agent, prompt, gate,
                                approval_timeout_secs, on_expiry, remind_before_secs,
                                upstream_left)
    select new.id, n.value ->> 'id', n.value ->> 'agent', n.value ->> 'prompt',
           n.value ->> 'gate', (n.value ->> 'approval_timeout_secs')::integer,
           coalesce(n.value ->> 'on_expiry', 'fail'), (n.value ->> 'remind_before_secs')::integer,
           (select count(*) from jsonb_array_elements(coalesce(new.graph -> 'edges', '[]')) e
            where jsonb_typeof(new.graph -> 'edges') = 'array'
              and e.value ->> 'to' = n.value ->> 'id')
    from jsonb_array_elements(new.graph -> 'nodes') n;

    update topology_runs
    set status = 'running', started_at = now(), updated_at = now()
    where id = new.id;

    perform _start_topology_nodes(
        new.id,
        array(select node_id from topology_nodes
              where topology_run_id = new.id and upstream_left = 0),
        now());
    -- Every source gated: the run waits for a person from the start.
    perform _settle_topology_run(new.id, now());
    return null;
end;
$$;

comment on function _tg_topology_runs_start() is
    'After a topology run is inserted pending: create its nodes, mark it running and start '
    'every node without upstreams.';

create or replace trigger topology_runs_start
    after insert on topology_runs
    for each row when (new.status = 'pending')
    execute function _tg_topology_runs_start();

-- The node state a loop_node job in state p_job_state puts its node in
-- while the run is live; 'ended' for the job states that end the node
-- (delivered: succeeded; the others: failed), which no live node is in.
create or replace function _topology_node_state_of(p_job_state text)
returns text
language plpgsql immutable
as $$
begin
    return case when p_job_state = 'pending' then 'queued'
                when p_job_state in ('claimed', 'running') then 'running'
                when p_job_state = 'blocked' then 'blocked'
                else 'ended' end;
end;
$$;

comment on function _topology_node_state_of(text) is
    'The live node state a loop_node job''s state implies (queued, running, blocked), else '
    '''ended''.';

-- Move the nodes of these jobs as their jobs moved, and their runs with
-- them: succeeded nodes pass their outputs downstream and start what they
-- unblock, a failed node fails its run, a blocked one waits with its run.
--
-- Locks: the runs of the jobs whose nodes must move, in id order, FOR NO KEY
-- UPDATE (the caller holds the jobs). A terminal run is left alone: its
-- nodes are already ended, and a job of it finishing late changes nothing.
create or replace function _topology_jobs_changed(p_job_ids uuid[])
returns void
language plpgsql
as $$
declare
    v_run_id uuid;
    v_node record;
    v_output text;
    v_now timestamptz;
begin
    -- Which runs have a node out of step with its job; a heartbeat or a
    -- claim already applied costs this one probe per job and no lock.
    for v_run_id in
        select distinct n.topology_run_id
        from unnest(p_job_ids) as u(id)
        join topology_nodes n on n.job_id = u.id
        join job j on j.id = u.id
        where n.state in ('queued', 'running', 'blocked')
          and n.state <> _topology_node_state_of(j.state)
        order by 1
    loop
        perform from topology_runs r
        where r.id = v_run_id and r.status in ('running', 'awaiting_approval')
        for no key update;
        if not found then
            continue;
        end if;

        -- Under the run's lock, read again: another statement may have moved
        -- these nodes while this one waited.
        for v_node in
            select n.node_id, n.state as node_state, j.id as job_id, j.state, j.last_error,
                   j.claimed_at, j.finished_at
            from unnest(p_job_ids) as u(id)
            join topology_nodes n on n.job_id = u.id
            join job j on j.id = u.id
            where n.topology_run_id = v_run_id
              and n.state in ('queued', 'running', 'blocked')
              and n.state <> _topology_node_state_of(j.state)
            order by n.node_id
        loop
            -- A node started here may have ended the run (its agent disabled).
            exit when not exists (select from topology_runs r
                                  where r.id = v_run_id
                                    and r.status in ('running', 'awaiting_approval'));
            v_now := coalesce(v_node.finished_at, now());
            if v_node.state in ('claimed', 'running') then
                update topology_nodes
                set state = 'running', started_at = coalesce(started_at, v_node.claimed_at, now())
                where topology_run_id = v_run_id and node_id = v_node.node_id;
            elsif v_node.state = 'pending' then
                update topology_nodes set state = 'queued'
                where topology_run_id = v_run_id and node_id = v_node.node_id;
            elsif v_node.state = 'blocked' then
                update topology_nodes set state = 'blocked'
                where topology_run_id = v_run_id and node_id = v_node.node_id;
            elsif v_node.state = 'delivered' then
                select r.final_message into v_output
                from agent_run r
                where r.job_id = v_node.job_id and r.outcome = 'succeeded'
                order by r.finished_at desc, r.started_at desc
                limit 1;
                update topology_nodes
                set state = 'succeeded', output = v_output, finished_at = v_now,
                    started_at = coalesce(started_at, v_node.claimed_at, v_now)
                where topology_run_id = v_run_id and node_id = v_node.node_id;
                perform _pass_topology_node(v_run_id, v_node.node_id, v_now);
            elsif v_node.state in ('failed', 'abandoned', 'cancelled') then
                perform _fail_topology_node(
                    v_run_id, v_node.node_id,
                    format('job %s %s: %s', v_node.job_id, v_node.state,
                           coalesce(left(v_node.last_error, 1000), 'no detail')),
                    v_now);
            end if;
        end loop;
        perform _settle_topology_run(v_run_id, coalesce(v_now, now()));
    end loop;
end;
$$;

comment on function _topology_jobs_changed(uuid[]) is
    'Move the nodes of these loop_node jobs as their jobs moved (running, queued, blocked, '
    'succeeded, failed), start the nodes a success unblocks, and settle their runs.';

-- A node of a run is done (succeeded, or skipped): the fan-in counter of each
-- downstream node loses one, and those reaching zero start now, exactly once
-- (the caller holds the run row, so no other statement counts at once).
create or replace function _pass_topology_node(p_run_id uuid, p_node_id text,
                                               p_now timestamptz)
returns void
language plpgsql
as $$
declare
    v_ready text[];
begin
    with downstream as (
        select e.value ->> 'to' as node_id
        from topology_runs r, jsonb_array_elements(r.graph -> 'edges') e
        where r.id = p_run_id and e.value ->> 'from' = p_node_id
    ),
    counted as (
        update topology_nodes n
        set upstream_left = n.upstream_left - 1
        from downstream d
        where n.topology_run_id = p_run_id and n.node_id = d.node_id
          and n.state = 'waiting'
        returning n.node_id, n.upstream_left
    )
    select coalesce(array_agg(c.node_id), '{}') into v_ready
    from counted c where c.upstream_left = 0;
    perform _start_topology_nodes(p_run_id, v_ready, p_now);
end;
$$;

comment on function _pass_topology_node(uuid, text, timestamptz) is
    'A done (succeeded or skipped) node passes: each downstream node''s upstream count drops by '
    'one and those reaching zero start. The caller holds the run row.';

-- Skip a node awaiting approval whose approval expired under on_expiry skip:
-- the node is done without an output, its downstream nodes run without it
-- (their prompts say it was skipped), and the run settles. The caller holds
-- the run row.
create or replace function _skip_topology_node(p_run_id uuid, p_node_id text,
                                               p_now timestamptz)
returns void
language plpgsql
as $$
begin
    update topology_nodes
    set state = 'skipped', finished_at = p_now
    where topology_run_id = p_run_id and node_id = p_node_id and state = 'awaiting_approval';
    if found then
        perform _pass_topology_node(p_run_id, p_node_id, p_now);
        perform _settle_topology_run(p_run_id, p_now);
    end if;
end;
$$;

comment on function _skip_topology_node(uuid, text, timestamptz) is
    'Skip a node awaiting approval (its approval expired under on_expiry skip): done without '
    'output, its downstream nodes start, the run settles. The caller holds the run row.';

-- Statement-level, like job_routine_outcome (44_routine_outcomes.sql): a
-- statement's new rows are scanned once for loop_node jobs, so a batch of
-- other work pays one pass and no call.
--
-- A node's job that ended and is sent back to pending (retry_job, a plain
-- UPDATE) while its run has ended is refused: the run would stay failed while
-- the job ran for nobody, and only its run can take the node back
-- (retry_topology_run). A job going back to pending from claimed or running
-- (a lease expiry, a release) is the run's own retry and passes.
--
-- Raises: CE409 a loop_node job of an ended run sent back to pending.
create or replace function _tg_job_topology_outcome()
returns trigger
language plpgsql
as $$
declare
    v_jobs uuid[];
    v_revived record;
begin
    select array_agg(n.id order by n.id) into v_jobs
    from new_rows n
    where n.kind = 'loop_node' and n.topology_run_id is not null;
    if v_jobs is null then
        return null;
    end if;
    -- Revived: pending now, ended before this statement.
    select n.id, n.topology_run_id, r.status, n.payload ->> 'node_id' as node_id
    into v_revived
    from new_rows n
    join old_rows o on o.id = n.id
    join topology_runs r on r.id = n.topology_run_id
    where n.kind = 'loop_node' and n.state = 'pending'
      and o.state not in ('pending', 'claimed', 'running')
      and r.status in ('succeeded', 'failed', 'cancelled')
    order by n.id
    limit 1;
    if v_revived.id is not null then
        if v_revived.status = 'succeeded' then
            raise exception 'job %: it is node % of topology run %, which has succeeded; a node '
                            'runs only within its run, so start a new run instead',
                            v_revived.id, v_revived.node_id, v_revived.topology_run_id
                using errcode = 'CE409';
        end if;
        raise exception 'job %: it is node % of topology run %, which is %; a node runs again '
                        'only with its run', v_revived.id, v_revived.node_id,
                        v_revived.topology_run_id, v_revived.status
            using errcode = 'CE409',
                  hint = format('Run its failed and cancelled nodes again: '
                                'select ceaseless.retry_topology_run(%L);',
                                v_revived.topology_run_id);
    end if;
    perform _topology_jobs_changed(v_jobs);
    return null;
end;
$$;

comment on function _tg_job_topology_outcome() is
    'After UPDATE on job: move the topology nodes of the loop_node jobs the statement changed; '
    'refuse (CE409) sending a node''s ended job back to pending while its run has ended.';

select _statement_trigger('job_topology_outcome', 'update', 'job');

-- The live jobs of terminal runs: those a run's end could not cancel because
-- another statement held them. Called by every listener's maintenance tick; SKIP
-- LOCKED, so sweeps split the work and never wait.
create or replace function cancel_orphaned_topology_jobs(p_now timestamptz default now())
returns integer
language plpgsql
as $$
declare
    v_runs uuid[];
begin
    -- Live and blocked jobs only, through the partial indexes that hold
    -- nothing else (job_claimable_idx per lane, the claim indexes,
    -- job_blocked_idx): one condition on state over the whole table reads
    -- every finished job a run ever had. A blocked job outlives its run's
    -- end when a reply held it as the run ended (the reply then fails,
    -- CE409, naming the run).
    select array_agg(distinct l.topology_run_id) into v_runs
    from agents a
    cross join lateral (
        select j.topology_run_id from job j
        where j.agent = a.name and j.state = 'pending' and j.topology_run_id is not null
        union all
        select j.topology_run_id from job j
        where j.agent = a.name and j.state in ('claimed', 'running')
          and j.topology_run_id is not null
        union all
        select j.topology_run_id from job j
        where j.agent = a.name and j.state = 'blocked' and j.topology_run_id is not null
    ) l
    join topology_runs r on r.id = l.topology_run_id
    where r.status in ('succeeded', 'failed', 'cancelled');
    if v_runs is null then
        return 0;
    end if;
    return _cancel_topology_jobs(v_runs, 'its topology run had already ended', p_now);
end;
$$;

comment on function cancel_orphaned_topology_jobs(timestamptz) is
    'Cancel live jobs whose topology run has ended (skipped by the run''s end because another '
    'statement held them); returns how many. Maintenance, every listener.';

-- The run p_run_id, locked FOR NO KEY UPDATE, when the caller may act on it:
-- its own, or any for an operator or a listener. Ownership is read before the
-- lock, so a caller cannot make another owner's run wait; a run it may not
-- act on is as unknown as one that does not exist.
-- Raises: CE404 naming p_verb.
create or replace function _topology_run_for(p_verb text, p_run_id uuid)
returns topology_runs
language plpgsql
as $$
declare
    v_run topology_runs;
begin
    select * into v_run from topology_runs where id = p_run_id;
    if v_run.id is null or not _acts_for(v_run.user_id) then
        raise exception '%: no topology run with id %', p_verb, p_run_id using errcode = 'CE404';
    end if;
    select * into v_run from topology_runs where id = p_run_id for no key update;
    return v_run;
end;
$$;

comment on function _topology_run_for(text, uuid) is
    'The topology run, locked FOR NO KEY UPDATE, when the caller owns it or acts for everyone; '
    'CE404 naming p_verb otherwise (ownership read before the lock).';

-- Cancel a run: every unfinished node cancelled, every live job cancelled
-- (a running agent is stopped by its listener), open approvals left
-- undecided and dead.
--
-- Security definer: the caller must own the run, or be an operator or a
-- listener; a run it may not act on is as unknown as one that does not exist.
-- Locks: the run row, then its jobs SKIP LOCKED (lock order above).
-- Raises: CE404 unknown run; CE409 the run already ended.
create or replace function cancel_topology_run(p_run_id uuid, p_now timestamptz default now())
returns void
language plpgsql
as $$
declare
    v_status text := (_topology_run_for('cancel_topology_run', p_run_id)).status;
begin
    if v_status not in ('pending', 'running', 'awaiting_approval') then
        raise exception 'cancel_topology_run: run % is already %; only a pending, running or '
                        'awaiting_approval run can be cancelled', p_run_id, v_status
            using errcode = 'CE409';
    end if;
    perform _end_topology_run(p_run_id, 'cancelled', format('cancelled by %s', _actor()), p_now);
end;
$$;

comment on function cancel_topology_run(uuid, timestamptz) is
    'Cancel a live topology run: unfinished nodes and live jobs cancelled (running agents '
    'stopped), open approvals left undecided. Raises CE404 (unknown) or CE409 (already ended).';


-- Run a failed or cancelled run again from where it stopped: its succeeded
-- nodes keep their outputs; every failed or cancelled node that had a job
-- gets that job back, pending with its attempts reset (the dedup key stays
-- the node's one job), or follows it when it is still live (a sibling the
-- run's end could not cancel); every other failed or cancelled node waits
-- again for its upstreams, counted anew, and those whose upstreams have all
-- succeeded start now (a gated one asks for approval again). The run is
-- running again, without its error and finished_at.
--
-- A loop's iteration keeps the loop coherent: only its latest iteration can
-- be retried (a loop has at most one live iteration, and its chain only goes
-- forward), and when that iteration's end stopped the loop (stopped_reason
-- failed, cancelled or, for an until-failed policy, completed), the loop is
-- enabled again as it was before that end: the repeat policy still counts
-- from the same iteration, so the retried iteration's end is judged as its
-- first end would have been (iters {n: 3} completes when iteration 3
-- succeeds, not three iterations later), and an on_completion loop chains on
-- from it. A loop stopped or disabled otherwise stays as it is.
--
-- Security definer: the caller must own the run, or be an operator or a
-- listener; a run it may not act on is as unknown as one that does not exist.
-- Locks: the run FOR NO KEY UPDATE, then its jobs NOWAIT (one held by
-- another statement refuses the call, CE409, rather than wait while holding
-- the run), then its loop FOR NO KEY UPDATE (lock order above).
-- Raises: CE404 unknown run; CE409 the run is not failed or cancelled, is an
-- iteration other than its loop's latest, or a job of it is held by another
-- statement right now; CE410 a node to run again names
-- an agent that is disabled or gone.
create or replace function retry_topology_run(p_run_id uuid, p_now timestamptz default now())
returns void
language plpgsql
as $$
declare
    v_run topology_runs;
    v_loop loops;
    v_latest integer;
    v_node record;
begin
    v_run := _topology_run_for('retry_topology_run', p_run_id);
    if v_run.status not in ('failed', 'cancelled') then
        raise exception 'retry_topology_run: run % is %; only a failed or cancelled run can be '
                        'retried', p_run_id, v_run.status
            using errcode = 'CE409',
                  hint = case when v_run.status = 'succeeded'
                              then 'A succeeded run is done: start a new run (or fire its loop).'
                              when v_run.status = 'skipped'
                              then 'A skipped run never started: fire its loop again.'
                              else 'It is still live: wait for it, or cancel_topology_run first.'
                         end;
    end if;
    -- Then every job of the run, without waiting: holding the run, this
    -- call must not wait for a job (a listener finishing one waits for the
    -- run), and it must hold them all, or a job ending meanwhile would be
    -- seen ended by neither its finisher (the run was still ended) nor this
    -- call, leaving its node following a job that no longer runs.
    begin
        perform from job j
        where j.topology_run_id = p_run_id
        order by j.id
        for update nowait;
    exception when lock_not_available then
        raise exception 'retry_topology_run: a job of run % is being changed by another '
                        'statement (a listener finishing or claiming it)', p_run_id
            using errcode = 'CE409', hint = 'Try again in a moment.';
    end;

    if v_run.loop_id is not null then
        select * into v_loop from loops where id = v_run.loop_id for no key update;
        -- topology_runs_loop_idx, newest first.
        select r.iteration into v_latest
        from topology_runs r
        where r.loop_id = v_run.loop_id and r.iteration is not null
        order by r.iteration desc
        limit 1;
        if v_run.iteration is distinct from v_latest then
            raise exception 'retry_topology_run: run % is iteration % of loop %, whose latest '
                            'iteration is %; only the latest iteration can be run again',
                            p_run_id, v_run.iteration, v_run.loop_id, v_latest
                using errcode = 'CE409',
                      hint = format('Fire the loop instead: select ceaseless.run_loop(%L);',
                                    v_run.loop_id);
        end if;
    end if;

    select n.node_id, n.agent into v_node
    from topology_nodes n
    left join agents a on a.name = n.agent
    where n.topology_run_id = p_run_id
      and n.state in ('failed', 'cancelled')
      and (a.name is null or not a.enabled)
    order by n.node_id
    limit 1;
    if v_node.node_id is not null then
        raise exception 'retry_topology_run: node % of run % runs on agent %, which is disabled '
                        'or not registered', v_node.node_id, p_run_id, v_node.agent
            using errcode = 'CE410',
                  hint = format('Enable it first: update ceaseless.agents set enabled = true '
                                'where name = %L;', v_node.agent);
    end if;

    -- Running again before its jobs move: their trigger then finds a live
    -- run, and an iteration takes its loop's live slot here (the unique
    -- index topology_runs_one_live_iteration_idx backs the check above).
    update topology_runs
    set status = 'running', error = null, finished_at = null, updated_at = p_now
    where id = p_run_id;

    -- Nodes with a job follow it: queued with it sent back to pending, or
    -- as it stands when it is still live.
    update topology_nodes n
    set state = case when j.state in ('claimed', 'running') then 'running' else 'queued' end,
        error = null, finished_at = null, output = null
    from job j
    where n.topology_run_id = p_run_id
      and n.state in ('failed', 'cancelled')
      and j.id = n.job_id;
    update job j
    set state = 'pending', claimed_by = null, claim_expires_at = null, claimed_at = null,
        finished_at = null, attempts = 0, run_after = p_now, updated_at = p_now
    from topology_nodes n
    where n.topology_run_id = p_run_id
      and n.state = 'queued'
      and n.job_id = j.id
      and j.state not in ('pending', 'claimed', 'running');

    -- Nodes without a job wait again, for the upstreams that have not
    -- succeeded.
    update topology_nodes n
    set state = 'waiting', error = null, finished_at = null, output = null,
        upstream_left = (select count(*)
                         from jsonb_array_elements(v_run.graph -> 'edges') e
                         join topology_nodes u
                           on u.topology_run_id = p_run_id and u.node_id = e.value ->> 'from'
                         where e.value ->> 'to' = n.node_id
                           and u.state not in ('succeeded', 'skipped'))
    where n.topology_run_id = p_run_id
      and n.state in ('failed', 'cancelled')
      and n.job_id is null;
    perform _start_topology_nodes(
        p_run_id,
        array(select n.node_id from topology_nodes n
              where n.topology_run_id = p_run_id and n.state = 'waiting'
                and n.upstream_left = 0),
        p_now);
    perform _settle_topology_run(p_run_id, p_now);

    -- The loop as it was before this iteration's end stopped it. Two steps:
    -- re-enabling a stopped loop restarts its policy count
    -- (_tg_loops_validate), which a retry of the same iteration must not do,
    -- and finds this iteration live, so fires nothing (_tg_loops_schedule).
    if v_loop.id is not null and v_loop.last_run_id = p_run_id
       and not v_loop.enabled and v_loop.stopped_reason is not null then
        update loops set stopped_reason = null, stopped_at = null where id = v_loop.id;
        update loops set enabled = true where id = v_loop.id;
    end if;
end;
$$;

comment on function retry_topology_run(uuid, timestamptz) is
    'Run a failed or cancelled topology run again: succeeded nodes kept, failed and cancelled '
    'nodes queued again (their jobs back to pending) or waiting for their upstreams; the run '
    'running; the latest iteration of a loop only, re-enabling the loop its end stopped. Raises '
    'CE404 (unknown), CE409 (not failed or cancelled, or not the latest iteration), CE410 (a '
    'node''s agent disabled).';
