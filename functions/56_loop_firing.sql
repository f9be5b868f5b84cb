-- Loops: the one firing path, where the trigger layer's fires of loops end;
-- chaining, and repeat policies.
--
-- Called by: the trigger layer (_fire_schedules, 32_schedules.sql) for cron
-- batches, webhooks and run_loop; the events trigger (43_routine_events.sql)
-- for event loops; the loops_schedule trigger
-- (55_loop_validation.sql, re-enabling an on_completion loop); the
-- agents_enabled trigger (below, re-enabling an agent); and PostgreSQL after
-- a loop iteration's status becomes terminal (the engine moves it there,
-- 51_topology_runs.sql, in the transaction that ends its last job or cancels
-- it).
-- Guarantees:
-- - every fire of every kind goes through _fire_loop: refused fires (loop
--   disabled, an agent of its graph disabled or gone, an iteration still
--   live) leave a `skipped` run with the reason and no iteration number;
--   the others a `pending` run with iteration = latest + 1, parent_run_id =
--   the latest iteration, the loop's graph, owner and workspace, and a task
--   of the template, the webhook body or event (if any) and the parent's final
--   message (bounded by loop_prior_context_chars, with a marker);
-- - a loop's iterations are fired at least min_interval_secs apart (0: any
--   pace), run_loop aside: a fire that would start one sooner waits in
--   held_fires (blocked_by min_interval) until the interval has passed, and
--   fire_held starts it then; it is never skipped for it;
-- - at most one live iteration per loop, and never two iterations N + 1:
--   the unique indexes topology_runs_one_live_iteration_idx and
--   topology_runs_loop_iteration_idx are the hard guarantee; the check under
--   the loop's lock makes a refused fire a skipped row instead of a wait or
--   an error;
-- - when an iteration ends, in the same transaction, the repeat policy is
--   applied (loop_outcome below) and the loop either stops (disabled,
--   next_fire_at NULL, stopped_reason, stopped_at, a `stopped` notification
--   to its owner) or, with triggers.on_completion, fires its next iteration;
-- - an enabled on_completion loop is never left with nothing to fire it: a
--   fire refused because an agent of its graph was disabled is fired again
--   when the last of its disabled agents is enabled (agents_enabled, below),
--   as re-enabling the loop would have;
-- - an iteration row is inserted only by _fire_loop (topology_runs_loop_lock
--   refuses others; a skipped record may be inserted directly), so every
--   insert of a live iteration holds its loop.
--
-- Lock order (no deadlock between fires, finishes, cancels, re-enables,
-- deletes and cron batches):
--   * a statement that ends a job holds its job row, then the engine updates
--     the run (its row), then loop_outcome locks the loop (FOR NO KEY UPDATE)
--     last, and may fire the next iteration under it;
--   * a fire (run_loop, webhook, event, cron batch, re-enable) locks the loop first
--     (cron: due_schedules, SKIP LOCKED, so a batch never waits for a loop,
--     and a loop batch takes no fire lock), re-enabling agents after their
--     rows (loops in id order),
--     and then waits for nothing another transaction holds while waiting for
--     that loop: it reads the runs without locking them, and it inserts a
--     live iteration only when it saw none, so the unique index entry it
--     writes cannot belong to an uncommitted insert of someone else (every
--     such insert holds the loop, which this fire holds). A finish that is
--     not yet committed still shows its run live: the fire records a skip
--     instead of waiting for the finish, which may itself be waiting for the
--     loop. The foreign keys of the new run take KEY SHARE on its parent run
--     and loop, which no status update blocks;
--   * deleting a loop (FOR UPDATE on it) refuses while an iteration is live
--     and so waits for no run.

-- The parent's final message as the next iteration reads it, cut to
-- p_cap characters with a marker saying how much was left out.
create or replace function _loop_prior_context(p_message text, p_status text, p_cap integer)
returns text
language plpgsql immutable
as $$
begin
    return case
        when p_message is null then format('(no final message: the iteration %s)', p_status)
        when char_length(p_message) <= p_cap then p_message
        else left(p_message, p_cap)
             || format(E'\n\n[… cut: %s of %s characters shown]', p_cap, char_length(p_message))
    end;
end;
$$;

comment on function _loop_prior_context(text, text, integer) is
    'The prior-iteration context of a loop''s next task: the parent''s final message, cut to '
    'p_cap characters with a marker (or a line saying it has none).';

-- The nodes of a graph whose agent is disabled, or not registered at all: a
-- fire of a loop with such a graph is refused (agent_disabled), and
-- explain_loop names each of them.
create or replace function _graph_agents_disabled(p_graph jsonb)
returns table (node_id text, agent text, registered boolean)
language plpgsql stable
as $$
begin
    return query
    select n ->> 'id', n ->> 'agent', a.name is not null
    from jsonb_array_elements(p_graph -> 'nodes') n
    left join agents a on a.name = n ->> 'agent'
    where a.name is null or not a.enabled;
end;
$$;

comment on function _graph_agents_disabled(jsonb) is
    'The nodes of a topology graph whose agent is disabled or not registered (node, agent, '
    'registered): what refuses a loop''s fire as agent_disabled.';


-- Until when a loop's min_interval_secs defers its fires: the latest
-- iteration's fire (created_at) plus the interval, when that is after p_now;
-- NULL when a fire may start now (unpaced, no iteration yet, or the interval
-- has passed). What _fire_loop defers by, and what loop_status and
-- explain_loop show (90_views.sql, 92_explain.sql).
create or replace function _loop_paced_until(
    p_loop_id uuid, p_min_interval_secs integer, p_now timestamptz
)
returns timestamptz
language sql stable
as $$
    -- topology_runs_loop_idx (loop_id, iteration desc): one entry.
    select l.created_at + make_interval(secs => p_min_interval_secs)
    from (select r.created_at from topology_runs r
          where r.loop_id = p_loop_id and r.iteration is not null
          order by r.iteration desc
          limit 1) l
    where p_min_interval_secs > 0
      and l.created_at + make_interval(secs => p_min_interval_secs) > p_now;
$$;

comment on function _loop_paced_until(uuid, integer, timestamptz) is
    'When a loop''s next fire may start under its min_interval_secs (its latest iteration''s '
    'created_at + the interval), or NULL when a fire at p_now may start at once.';

-- Fire a loop: the one path of every trigger. p_trigger is cron,
-- on_completion, webhook, event or manual; p_detail what fired it (the
-- schedule, the iteration that finished, the event's start), at most 200
-- characters kept; p_body a webhook's body or an event's content, which
-- reaches the iteration's task; p_slot the cron slot the fire stands for
-- (cron and backfill fires; the run's slot_at). Returns the topology_runs id: a
-- pending iteration, or a skipped run when the fire was refused; the
-- held_fires id when the fire waits (debounce, a buffer overlap policy, or
-- the loop's min_interval_secs: 33_held_fires.sql); NULL when no loop has
-- that id.
--
-- A fire that would start an iteration sooner than min_interval_secs after
-- the latest one was fired waits for the interval's end instead: held with
-- that fire_at (blocked_by min_interval), under buffer_one's rule (the
-- newest fire waits, counting those it replaced) or buffer_all's (every one,
-- in order). Deferred, never skipped: an on_completion chain of instant
-- iterations goes on at one iteration per interval. run_loop is not paced
-- (a person asked for this iteration, as run_routine ignores a cooldown).
--
-- Locks: the loop, FOR NO KEY UPDATE, until the caller's transaction ends
-- (see the header for the order).
create or replace function _fire_loop(
    p_loop_id uuid, p_trigger text, p_detail text, p_body text, p_now timestamptz,
    p_slot timestamptz default null
)
returns uuid
language plpgsql
as $$
declare
    v_loop loops;
    v_reason text;
    v_run_id uuid := gen_random_uuid();
    v_parent_id uuid;
    v_parent_iteration integer;
    v_parent_status text;
    v_parent_message text;
    v_held uuid;
    v_paced_until timestamptz;
begin
    select * into v_loop from loops where id = p_loop_id for no key update;
    if not found then
        return null;
    end if;
    v_reason := case
        when not v_loop.enabled then 'disabled'
        -- A node whose agent is disabled would queue a job nobody claims,
        -- and hold the loop's one live iteration until someone cancels it.
        when exists (select from _graph_agents_disabled(v_loop.graph)) then 'agent_disabled'
        when exists (select from topology_runs r
                     where r.loop_id = v_loop.id
                       and r.status in ('pending', 'running', 'awaiting_approval'))
            then 'live_iteration'
    end;
    -- The overlap policy and debounce (33_held_fires.sql): a fire that waits
    -- returns its held_fires id instead of a run's, and marks nothing.
    if v_reason is null or v_reason = 'live_iteration' then
        if (_transaction_state()).held_fire is null and p_trigger in ('event', 'webhook')
           and v_loop.debounce_secs is not null then
            return _debounce_fire('loop', v_loop.id, v_loop.user_id, v_loop.overlap_policy,
                                  v_loop.debounce_secs, v_loop.debounce_max_secs, p_trigger,
                                  p_detail, p_body, p_now);
        end if;
        if v_reason = 'live_iteration' and v_loop.overlap_policy in ('buffer_one', 'buffer_all')
        then
            v_held := _hold_fire('loop', v_loop.id, v_loop.user_id, v_loop.overlap_policy,
                                 v_reason, p_trigger, p_detail, p_body, null, p_now, p_slot);
            if v_held is not null then
                return v_held;
            end if;
        end if;
    end if;
    -- Pacing judges a fire that would start an iteration now: with nothing
    -- live, or with one a cancel_other fire would cancel. A fire refused for
    -- a live iteration under the other policies is paced when its hold is
    -- released (fire_held calls this again), and one skipped never starts.
    if p_trigger <> 'manual' and v_loop.min_interval_secs > 0
       and (v_reason is null
            or (v_reason = 'live_iteration' and v_loop.overlap_policy = 'cancel_other')) then
        v_paced_until := _loop_paced_until(v_loop.id, v_loop.min_interval_secs, p_now);
        if v_paced_until is not null then
            v_held := _hold_fire('loop', v_loop.id, v_loop.user_id,
                                 case when v_loop.overlap_policy = 'buffer_all' then 'buffer_all'
                                      else 'buffer_one' end,
                                 'min_interval', p_trigger, p_detail, p_body, v_paced_until,
                                 p_now, p_slot);
            if v_held is not null then
                return v_held;
            end if;
            -- buffer_all holds overlap_buffer_max fires already: this one
            -- folds into the newest rather than being lost or starting early.
            v_held := _fold_into_newest(v_loop.id, p_trigger, p_detail, p_body);
            if v_held is not null then
                return v_held;
            end if;
            -- The newest is being released right now: what follows records
            -- the fire, as past overlap_buffer_max under buffer_all.
            v_reason := coalesce(v_reason, 'live_iteration');
        end if;
    end if;
    -- The mark lets topology_runs_loop_lock tell this insert from any other,
    -- and the loop's outcome trigger the iteration this fire supersedes
    -- (cancel_other: its run is marked and not yet inserted).
    perform _remember_fire(null, null, v_run_id);
    if v_reason = 'live_iteration' and v_loop.overlap_policy = 'cancel_other'
       and _supersede_iteration(v_loop.id, p_now) then
        v_reason := null;
    end if;
    if v_reason is not null then
        insert into topology_runs (id, workspace_id, graph, task, status, skip_reason, loop_id,
                                   user_id, trigger_type, trigger_detail, finished_at,
                                   created_at, updated_at, slot_at)
        values (v_run_id, v_loop.workspace_id, v_loop.graph, v_loop.task_template, 'skipped',
                v_reason, v_loop.id, v_loop.user_id, p_trigger, left(p_detail, 200), p_now,
                p_now, p_now, p_slot);
        return v_run_id;
    end if;

    select r.id, r.iteration, r.status, r.final_message
    into v_parent_id, v_parent_iteration, v_parent_status, v_parent_message
    from topology_runs r
    where r.loop_id = v_loop.id and r.iteration is not null
    order by r.iteration desc
    limit 1;

    insert into topology_runs (id, workspace_id, graph, task, status, loop_id, iteration,
                               parent_run_id, user_id, trigger_type, trigger_detail, created_at,
                               updated_at, slot_at)
    values (v_run_id, v_loop.workspace_id, v_loop.graph,
            v_loop.task_template
            || case when p_body is not null
                    then format(E'\n\n## %s\n\n',
                                case p_trigger when 'event' then 'Event' else 'Webhook body' end)
                         || p_body
                    else '' end
            || case when v_parent_id is not null
                    then format(E'\n\n## Prior iteration (%s)\n\n', v_parent_iteration)
                         || _loop_prior_context(v_parent_message, v_parent_status,
                                                _setting_int('loop_prior_context_chars'))
                    else '' end,
            'pending', v_loop.id, coalesce(v_parent_iteration, 0) + 1, v_parent_id,
            v_loop.user_id, p_trigger, left(p_detail, 200), p_now, p_now, p_slot);
    update loops set last_run_id = v_run_id where id = v_loop.id;
    return v_run_id;
end;
$$;

comment on function _fire_loop(uuid, text, text, text, timestamptz, timestamptz) is
    'The one firing path of loops: lock the loop, hold the fire (debounce, buffer policies, '
    'min_interval_secs; returns the held_fires id), cancel a live iteration (cancel_other), '
    'record a skipped run '
    '(disabled, agent_disabled, live_iteration) or insert the next pending iteration chained to '
    'the last, with the webhook body and the prior iteration''s final message in its task; '
    'returns the run id.';

-- An iteration is inserted by _fire_loop and by nothing else: a number
-- chosen by hand could skip or take N + 1, and an insert that did not hold
-- the loop would break the lock order above (a fire could wait on its
-- uncommitted index entry while it waits for the loop). The lock is taken
-- again here, a no-op for _fire_loop, so the order holds whoever inserts.
-- _fire_loop marks the run it inserts in transaction_state, which only the
-- engine writes; a mark any session could SET would let a run pass for an
-- iteration of someone else's loop. (A user role cannot name loop_id at all,
-- 99_access.sql; this holds for every other role.)
-- A skipped run takes no iteration number and no live index entry, so a
-- record of a refused fire may be inserted directly.
create or replace function _tg_topology_runs_loop_lock()
returns trigger
language plpgsql
as $$
begin
    if (_transaction_state()).loop_fire is distinct from new.id then
        raise exception 'topology_runs.loop_id: a loop''s runs are started by its triggers or '
                        'run_loop, not inserted; got loop %', new.loop_id
            using errcode = 'CE422', table = 'topology_runs', column = 'loop_id',
                  hint = format('select ceaseless.run_loop(%L);', new.loop_id);
    end if;
    perform from loops where id = new.loop_id for no key update;
    return new;
end;
$$;

comment on function _tg_topology_runs_loop_lock() is
    'Before a run of a loop (not a skipped one) is inserted: refuse it unless _fire_loop inserts it '
    '(CE422), and hold its loop, so every insert of an iteration follows the loops'' lock order.';

create or replace trigger topology_runs_loop_lock
    before insert on topology_runs
    for each row when (new.loop_id is not null and new.status <> 'skipped')
    execute function _tg_topology_runs_loop_lock();

-- Why an iteration's end stops its loop, or NULL when it goes on:
-- failed → failed (completed when the policy waits for a failure);
-- cancelled → cancelled; succeeded → the policy, counting the iterations
-- since policy_from_iteration: iters {n} completes at n; until {event}
-- completes on its event; until {match} completes when the final message
-- matches; an until policy that reached within_iters without it is
-- exhausted. infinite never stops on success.
create or replace function _loop_stop_reason(
    p_policy jsonb, p_count integer, p_status text, p_final_message text
)
returns text
language plpgsql immutable
as $$
begin
    return case
        when p_status = 'failed'
            then case when p_policy ->> 'kind' = 'until' and p_policy #>> '{spec,event}' = 'failed'
                      then 'completed' else 'failed' end
        when p_status = 'cancelled' then 'cancelled'
        when p_status <> 'succeeded' then null
        when p_policy ->> 'kind' = 'iters'
            then case when p_count >= (p_policy #>> '{spec,n}')::integer then 'completed' end
        when p_policy ->> 'kind' = 'until' then
            case when p_policy #>> '{spec,event}' = 'succeeded' then 'completed'
                 when p_policy #> '{spec}' ? 'match'
                      and coalesce(p_final_message, '') ~ (p_policy #>> '{spec,match}')
                     then 'completed'
                 when p_count >= (p_policy #>> '{spec,within_iters}')::integer then 'exhausted'
            end
    end;
end;
$$;

comment on function _loop_stop_reason(jsonb, integer, text, text) is
    'The repeat policy''s verdict on an iteration that ended: completed, exhausted, failed, '
    'cancelled, or NULL to go on.';

-- The end of an iteration, in the transaction that ended it: apply the
-- repeat policy, then stop the loop or chain its next iteration.
--
-- Locks: the loop, FOR NO KEY UPDATE, after the run (see the header).
create or replace function _tg_topology_runs_loop_outcome()
returns trigger
language plpgsql
as $$
declare
    v_loop loops;
    v_now constant timestamptz := coalesce(new.finished_at, now());
    v_stop text;
begin
    select * into v_loop from loops where id = new.loop_id for no key update;
    if not found then
        return null;
    end if;
    -- Cancelled by a cancel_other fire of its own loop, which is inserting
    -- the next iteration (_fire_loop marked a run it has not inserted yet):
    -- a superseded iteration neither stops the loop nor chains.
    if new.status = 'cancelled' and v_loop.overlap_policy = 'cancel_other'
       and (_transaction_state()).loop_fire is not null
       and not exists (select from topology_runs r where r.id = (_transaction_state()).loop_fire)
    then
        return null;
    end if;
    v_stop := _loop_stop_reason(v_loop.repeat_policy, new.iteration - v_loop.policy_from_iteration,
                                new.status, new.final_message);
    if v_stop is not null then
        update loops
        set enabled = false, next_fire_at = null, stopped_reason = v_stop, stopped_at = v_now
        where id = v_loop.id;
        insert into notifications (source_table, source_id, kind, subject, body, user_id)
        values ('loops', v_loop.id, 'stopped',
                format('loop %s stopped: %s', left(v_loop.title, 200), v_stop),
                format(E'Iteration %s (run %s) ended %s.\n\n%s', new.iteration, new.id,
                       new.status,
                       case v_stop
                           when 'completed' then 'Its repeat policy is met.'
                           when 'exhausted' then 'Its repeat policy gave up: within_iters passed '
                                                 'without the condition.'
                           when 'failed' then 'Error: ' || left(coalesce(new.error, 'none given'), 500)
                           else 'It was cancelled.'
                       end
                       || E'\n\nRe-enable it to continue the chain: '
                       || format('update ceaseless.loops set enabled = true where id = %L;',
                                 v_loop.id)),
                v_loop.user_id);
    elsif v_loop.enabled and coalesce((v_loop.triggers ->> 'on_completion')::boolean, false) then
        perform _fire_loop(v_loop.id, 'on_completion',
                           format('iteration %s %s', new.iteration, new.status), null, v_now);
    end if;
    return null;
end;
$$;

comment on function _tg_topology_runs_loop_outcome() is
    'After a loop iteration''s status becomes succeeded, failed or cancelled: apply the repeat '
    'policy and stop the loop (notified) or, with on_completion, fire the next iteration, in the '
    'same transaction.';

create or replace trigger topology_runs_loop_outcome
    after update of status on topology_runs
    for each row
    when (new.loop_id is not null and new.iteration is not null
          and old.status in ('pending', 'running', 'awaiting_approval')
          and new.status in ('succeeded', 'failed', 'cancelled'))
    execute function _tg_topology_runs_loop_outcome();

-- After agents are enabled, fire again the on_completion loops their
-- disabling left with nothing to fire them: enabled, nothing live, naming one
-- of these agents, and no iteration since their latest fire, which was
-- refused for a disabled agent. On_completion is the only trigger that needs
-- this: cron fires at its next slot, webhooks and people fire from outside,
-- but a chain whose next link was refused waits for an iteration's end that
-- will never come. A loop whose graph still names a disabled agent is left
-- alone (its fire would be refused again): the last of its agents to be
-- enabled resumes it. Statement-level, so agents enabled together resume a
-- loop that needs them all once.
--
-- Locks: after the agents' rows, each loop in id order (_fire_loop).
create or replace function _tg_agents_enabled()
returns trigger
language plpgsql
as $$
declare
    v_agents text[];
    v_loop uuid;
begin
    select array_agg(n.name order by n.name) into v_agents
    from new_rows n
    join old_rows o on o.name = n.name
    where n.enabled and not o.enabled;
    if v_agents is null then
        return null;
    end if;
    for v_loop in
        select l.id
        from loops l
        where l.enabled and coalesce((l.triggers ->> 'on_completion')::boolean, false)
          and exists (select from jsonb_array_elements(l.graph -> 'nodes') n
                      where n ->> 'agent' = any (v_agents))
          and not exists (select from _graph_agents_disabled(l.graph))
          and not exists (select from topology_runs r
                          where r.loop_id = l.id
                            and r.status in ('pending', 'running', 'awaiting_approval'))
          -- topology_runs_loop_skipped_idx, newest first.
          and (select r.skip_reason from topology_runs r
               where r.loop_id = l.id and r.status = 'skipped'
               order by r.created_at desc limit 1) = 'agent_disabled'
          and not exists (select from topology_runs i
                          where i.loop_id = l.id and i.iteration is not null
                            and i.created_at > (select max(r.created_at) from topology_runs r
                                                where r.loop_id = l.id
                                                  and r.status = 'skipped'))
        order by l.id
    loop
        perform _fire_loop(v_loop, 'on_completion',
                           'agent ' || array_to_string(v_agents, ', ') || ' enabled', null, now());
    end loop;
    return null;
end;
$$;

comment on function _tg_agents_enabled() is
    'After agents are enabled: fire again the on_completion loops a fire refused for a disabled '
    'agent left idle, once all of their agents are enabled.';

select _statement_trigger('agents_enabled', 'update', 'agents');
