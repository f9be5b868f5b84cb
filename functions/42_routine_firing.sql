-- Routines: the one firing path, where the trigger layer's fires of routines
-- end, and what a routine run's job is asked.
--
-- Called by: the events trigger (43_routine_events.sql), retry_job
-- (10_jobs.sql), and the trigger layer (_fire_schedules, 32_schedules.sql) for
-- cron batches, webhooks and run_routine.
-- Guarantees:
-- - every fire of every kind goes through _fire_routines, one set-based
--   statement: the guardrails are written once, and judged in this order —
--   the routine disabled; its agent disabled; cooldown_secs since the last run
--   finished (not for manual runs and retries; 0 means no cooldown at all);
--   max_concurrent running runs; dedup_window_secs on the hash of what fired
--   it; the global cap (setting routine_max_running), filled in the order the
--   fires were asked for;
-- - every fire, and every refused fire, leaves a routine_runs row;
-- - the global cap, max_concurrent and dedup are exact, and fires never
--   deadlock with each other or with what ends jobs: every fire is admitted
--   first (_admit_fires), in the lock order 41_fire_admission.sql states;
-- - NOTIFY ceaseless_run when a run starts or is refused (routine_runs
--   triggers, 44_routine_outcomes.sql).

-- The instruction that ends every lightweight prompt: a reply of exactly
-- ROUTINE_OK is how a run says nothing needs attention (_close_routine_runs),
-- so no notification goes out for a quiet check.
create or replace function _routine_ok_instruction()
returns text
language sql immutable
as $$
    select 'If nothing needs attention, answer exactly ROUTINE_OK and nothing else. '
           'Otherwise, answer with what needs attention.';
$$;

comment on function _routine_ok_instruction() is
    'The closing instruction of every lightweight routine prompt.';

-- What the job of one routine run looks like, in the order its agent reads
-- it: the routine's prompt (and what fired it), then the context files —
-- which only the listener can read, so they are named in
-- payload.context_paths and inserted by the listener between `prompt` and
-- payload.prompt_tail — then the previous run's state, then the ROUTINE_OK
-- instruction. One definition for every kind of fire.
--
-- PL/pgSQL of assignments, no query: a SQL function with a SET clause
-- (every function here has one, for its search_path) is not inlined and is
-- planned afresh in every transaction, half a millisecond of each event's
-- insert (bin/bench event fan-in), and a query here would cost a plan's
-- executor start and a tuplestore per routine fired.
create or replace function _routine_job_spec(
    p_routine routines, p_context text,
    out prompt text, out payload jsonb, out expects_reply boolean, out max_attempts integer,
    out max_turns integer)
language plpgsql stable
as $$
declare
    v_fired constant text := case when p_context <> ''
                                  then E'\n\n## What fired this run\n\n' || p_context
                                  else '' end;
begin
    if p_routine.action_type = 'lightweight' then
        prompt := (p_routine.action_config ->> 'prompt') || v_fired;
        payload := jsonb_build_object(
            'routine_id', p_routine.id, 'action', 'lightweight',
            'context_paths', p_routine.action_config -> 'context_paths',
            'max_tokens', p_routine.action_config -> 'max_tokens',
            'prompt_tail',
            case when p_routine.state <> '{}'::jsonb
                 then E'\n\n## State from the previous run\n\n' || p_routine.state::text
                 else '' end
            || E'\n\n' || _routine_ok_instruction());
        -- A lightweight run's whole product is its reply: an empty one is a
        -- failure, retried at most twice (three attempts).
        expects_reply := true;
        max_attempts := 3;
    else
        prompt := (p_routine.action_config ->> 'title') || E'\n\n'
                  || (p_routine.action_config ->> 'description') || v_fired;
        payload := jsonb_build_object('routine_id', p_routine.id, 'action', 'full_job');
        expects_reply := false;
        max_turns := (p_routine.action_config ->> 'max_iterations')::integer;
    end if;
end;
$$;

comment on function _routine_job_spec(routines, text) is
    'The prompt, payload and limits of a routine run''s job: lightweight (prompt + context + '
    'state + ROUTINE_OK, replies required) or full_job (title + description, max_turns).';

-- Fire routines: the one path every fire takes. One entry per routine, in the
-- order the global cap fills them; p_details[i] is what fired routine i (the
-- schedule, the event preview, the webhook path), p_contexts[i] the whole text
-- the agent reacts to (also the dedup key), p_missed[i] the cron slots
-- collapsed into this fire, p_job_ids[i] an existing job the run adopts
-- instead of a new one (retry_job), p_slots[i] the cron slot the fire stands
-- for (cron and backfill fires; the run's slot_at). p_manual skips the
-- cooldown. Array
-- arguments may be NULL or shorter than p_routine_ids: a missing entry is
-- NULL (0 for p_missed). A routine id that names no routine returns no row.
--
-- Returns one row per routine fired: its run, its job (NULL when skipped),
-- and the status (running or skipped) with the skip reason. Writes one
-- routine_runs row per routine, plus one skipped row (reason missed_slots,
-- carrying the count) for a cron fire that stands for missed slots, and one
-- job per running run.
--
-- Locks: fire admission (_admit_fires); the head of 41_fire_admission.sql
-- gives the order every operation follows.
create or replace function _fire_routines(
    p_routine_ids uuid[],
    p_trigger text,
    p_now timestamptz,
    p_details text[] default null,
    p_contexts text[] default null,
    p_missed integer[] default null,
    p_manual boolean default false,
    p_job_ids uuid[] default null,
    p_slots timestamptz[] default null
)
returns table (ord bigint, routine_id uuid, run_id uuid, job_id uuid, status text,
               skip_reason text)
language plpgsql
-- The guard compares max_concurrent with the running count (v_running), so
-- PL/pgSQL judges every custom plan of the big statement cheaper than the
-- generic one and, left to itself, plans it on every fire: 1.5 ms of a
-- 2.8 ms event insert (bin/bench event fan-in: 338 inserts/s instead of 899,
-- PG 18). Its shape does not depend on the values, so the one generic plan
-- is the right one (docs/performance.md, "Planner settings on functions").
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
declare
    v_running bigint;
    v_free bigint;
    -- The held fire fire_held is releasing (33_held_fires.sql): not debounced
    -- again, and held again as itself when refused.
    v_releasing constant boolean := (_transaction_state()).held_fire is not null;
    v_debounce constant boolean := not v_releasing and p_trigger in ('event', 'webhook');
    -- Routines whose runs this fire cancelled (cancel_other): that end
    -- starts no cooldown against it.
    v_cancelled uuid[];
begin
    if coalesce(cardinality(p_routine_ids), 0) = 0 then
        return;
    end if;
    -- Before admission: cancelling ends jobs, which takes what a finishing
    -- statement takes (41_fire_admission.sql, head).
    v_cancelled := _cancel_overlapping_runs(p_routine_ids, p_now);
    select a.o_running, a.o_free into v_running, v_free from _admit_fires(p_routine_ids) a;

    return query
    with input as (
        select i.id, i.ord, p_details[i.ord] as detail, p_contexts[i.ord] as context,
               greatest(coalesce(p_missed[i.ord], 0), 0) as missed, p_job_ids[i.ord] as job_id,
               p_slots[i.ord] as slot_at
        from unnest(p_routine_ids) with ordinality as i(id, ord)
    ),
    -- Materialized: `capped` reads each reason three times, and inlined,
    -- every read would count the routine's running runs again.
    judged as materialized (
        select found.r as routine, i.ord, i.detail, i.context, i.missed, i.job_id, i.slot_at,
               h.hash,
               -- The job's spend ceilings: the routine's, else its agent's.
               coalesce(r.max_cost_usd, a.max_cost_usd) as max_cost_usd,
               coalesce(r.max_tokens, a.max_tokens) as max_tokens,
               case
                   when not r.enabled then 'disabled'
                   when not a.enabled then 'agent_disabled'
                   -- Collapsed into the routine's debounce window
                   -- (_debounce_fire), before any other guardrail judges it.
                   when v_debounce and r.debounce_secs is not null then 'debounced'
                   -- Zero is no cooldown at all: compared to the finishing
                   -- transaction's clock, an event inserted a moment before
                   -- the finish committed would look "too soon".
                   when not p_manual and r.cooldown_secs > 0 and r.last_run_at is not null
                        and not r.id = any (v_cancelled)
                        and p_now < r.last_run_at + make_interval(secs => r.cooldown_secs)
                       then 'cooldown'
                   -- Counting stops at max_concurrent: a routine allowed one
                   -- run at a time reads one index entry, not all of them.
                   -- And no count when fewer runs than that are running in
                   -- all (v_running: every run committed and every fire in
                   -- flight, _admit_fires): a routine allowed thousands
                   -- would otherwise count its whole backlog at every fire.
                   when r.overlap_policy <> 'allow_all' and r.max_concurrent <= v_running
                        and (select count(*)
                         from (select from routine_runs rr
                               where rr.routine_id = r.id and rr.status = 'running'
                               limit r.max_concurrent) running)
                        >= r.max_concurrent
                       then 'concurrency'
                   when h.hash is not null and exists (
                           select 1 from routine_runs rr
                           where rr.routine_id = r.id and rr.content_hash = h.hash
                             and rr.status <> 'skipped'
                             and rr.started_at > p_now - make_interval(secs => r.dedup_window_secs))
                       then 'dedup'
               end as reason
        from input i
        -- Each routine probed by key, the fires on the outer side (OFFSET 0
        -- fences it): the generic plan cannot size the fires, and joined, it
        -- hashed them against a read of every routine (1.1 ms a fire at a
        -- thousand routines).
        cross join lateral (
            select r from routines r where r.id = i.id offset 0
        ) found
        cross join lateral (select (found.r).*) r
        join agents a on a.name = r.agent
        cross join lateral (
            select case when i.context is not null and r.dedup_window_secs is not null
                        then encode(sha256(convert_to(i.context, 'UTF8')), 'hex') end as hash
        ) h
    ),
    -- The global cap admits the first v_free fires that passed the rest.
    capped as (
        select j.routine, j.ord, j.detail, j.context, j.missed, j.slot_at, j.hash,
               j.max_cost_usd, j.max_tokens,
               case when j.reason is null
                         and count(*) filter (where j.reason is null) over (order by j.ord) > v_free
                    then 'global_cap' else j.reason end as reason,
               gen_random_uuid() as run_id,
               coalesce(j.job_id, gen_random_uuid()) as job_id,
               j.job_id is null as new_job
        from judged j
    ),
    -- Fires that wait instead of being skipped (33_held_fires.sql): those in
    -- a debounce window, and those an overlap rule refused under a buffer
    -- policy (NULL held_id: buffer_all is full, and the fire is skipped).
    -- Materialized: each is held once, whoever reads it.
    held as materialized (
        select c.ord,
               case when c.reason = 'debounced'
                    then _debounce_fire('routine', (c.routine).id, (c.routine).user_id,
                                        (c.routine).overlap_policy, (c.routine).debounce_secs,
                                        (c.routine).debounce_max_secs, p_trigger, c.detail,
                                        c.context, p_now)
                    else _hold_fire('routine', (c.routine).id, (c.routine).user_id,
                                    (c.routine).overlap_policy, c.reason, p_trigger, c.detail,
                                    c.context,
                                    case when c.reason = 'cooldown'
                                         then (c.routine).last_run_at
                                              + make_interval(secs => (c.routine).cooldown_secs)
                                    end,
                                    p_now, c.slot_at)
               end as held_id
        from capped c
        where c.reason = 'debounced'
           or (c.reason in ('cooldown', 'concurrency')
               and (c.routine).overlap_policy in ('buffer_one', 'buffer_all'))
    ),
    -- Runs and jobs point at each other; both are written by this one
    -- statement, whose foreign keys are checked when it ends.
    runs as (
        insert into routine_runs (id, routine_id, trigger_type, trigger_detail, started_at,
                                  status, skip_reason, completed_at, missed_slots, content_hash,
                                  context, created_at, job_id, slot_at)
        select c.run_id, (c.routine).id, p_trigger, left(c.detail, 200), p_now,
               case when c.reason is null then 'running' else 'skipped' end, c.reason,
               case when c.reason is null then null else p_now end, c.missed, c.hash,
               c.context, p_now, case when c.reason is null then c.job_id end, c.slot_at
        from capped c
        where not exists (select from held h where h.ord = c.ord and h.held_id is not null)
        union all
        -- The slots that passed unfired: refused fires too, so they leave
        -- their own row, with the count.
        select gen_random_uuid(), (c.routine).id, p_trigger, left(c.detail, 200), p_now,
               'skipped', 'missed_slots', p_now, c.missed, null, null, p_now, null, null
        from capped c
        where c.missed > 0
        returning routine_runs.id
    ),
    jobs as (
        -- The job is the routine owner's, whoever fired it (a listener's
        -- cron, an operator's run_routine).
        -- Its spend ceilings as judged above, resolved here rather than by
        -- job_spend_ceiling (11_job_input.sql), which skips routine jobs:
        -- the agent is read here anyway, and the trigger's call and read
        -- cost 8 µs a job. Its priority and fairness key are the routine's
        -- (NULL key: the owner's own turn).
        insert into job (id, kind, agent, prompt, payload, routine_run_id, expects_reply,
                         max_attempts, max_turns, run_after, created_at, user_id,
                         max_cost_usd, max_tokens, priority, fairness_key)
        select c.job_id, 'routine', (c.routine).agent, s.prompt, s.payload, c.run_id,
               s.expects_reply, s.max_attempts, s.max_turns, p_now, p_now, (c.routine).user_id,
               c.max_cost_usd, c.max_tokens, (c.routine).job_priority,
               coalesce((c.routine).job_fairness_key, (c.routine).user_id)
        from capped c
        cross join lateral _routine_job_spec(c.routine, c.context) s
        where c.reason is null and c.new_job
        returning job.id
    )
    select c.ord, (c.routine).id, coalesce(h.held_id, c.run_id),
           case when c.reason is null then c.job_id end,
           case when c.reason is null then 'running'
                when h.held_id is null then 'skipped'
                when c.reason = 'debounced' then 'debounced'
                else 'buffered' end,
           case when c.reason <> 'debounced' then c.reason end
    from capped c
    left join held h on h.ord = c.ord
    order by c.ord;
end;
$$;

comment on function _fire_routines(uuid[], text, timestamptz, text[], text[], integer[], boolean,
                                   uuid[], timestamptz[]) is
    'The one firing path: judge each routine against its guardrails (disabled, agent disabled, '
    'cooldown, max_concurrent, dedup, global cap), write a running or skipped routine_runs row '
    'per routine and a job per running run.';
