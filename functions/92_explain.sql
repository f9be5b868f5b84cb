-- "Why is this not running?": every reason that holds a job, a routine, a
-- topology run or a loop, one row each, with the time it clears when one is
-- known.
--
-- Called by: operators and users (psql, `ceaseless job why`, `ceaseless
-- routine why`, `ceaseless loop why`, the dashboard).
-- Guarantees:
-- - read only: no row is locked or written, so asking never delays a claim or
--   a fire, and the answer is what held the row when the statement started
--   (another listener may claim the job a moment later);
-- - the rules are those claim_jobs admits by for jobs (the same functions:
--   _lane_capacity and _owners_over_budget, 12_lanes.sql), of _fire_routines
--   (42_routine_firing.sql) for routines and of _fire_loop
--   (56_loop_firing.sql) for loops, and a schedule's as the schedules view
--   reads it, judged against p_now; a row names each rule that holds, not
--   only the first, and a job, routine, run or loop nothing holds gets one
--   row, 'ready';
-- - a user explains only its own rows (_acts_for); someone else's is as
--   unknown as one that does not exist (CE404). Security definer
--   (99_access.sql), because a lane's counts include every owner's jobs.

-- What holds a lane's next claim: each reason _lane_capacity (12_lanes.sql,
-- the rule claim_jobs admits by) names, in its order, with the counts behind
-- it and when it clears. Also returns the free slots, which the callers need
-- to say whether older due work comes first.
--
-- clears_at: the pause's end; for a window budget, when enough of the
-- window's runs (or of their cost, or tokens) have aged out of it for the
-- lane to admit one more, assuming nothing else starts (NULL when the claimed
-- jobs alone fill the run budget); NULL for a full lane, which clears when
-- one of its runs ends.
create or replace function _explain_lane(p_agent text, p_now timestamptz)
returns table (reason text, detail text, clears_at timestamptz, free bigint)
language plpgsql stable
as $$
#variable_conflict use_column
declare
    v_agent agents;
    v_lane record;
    v_since timestamptz;
    v_reason text;
begin
    select a.* into v_agent from agents a where a.name = p_agent;
    select l.* into v_lane from _lane_capacity(p_now, array[p_agent], true) l;
    v_since := p_now - make_interval(secs => v_agent.window_secs);

    if cardinality(v_lane.held_by) = 0 then
        return query select null::text, null::text, null::timestamptz, v_lane.free;
        return;
    end if;
    foreach v_reason in array v_lane.held_by loop
        return query
        select v_reason,
               case v_reason
                   when 'agent_disabled' then
                       format('agent %s is disabled: its lane claims nothing until '
                              'update ceaseless.agents set enabled = true where name = %L',
                              p_agent, p_agent)
                   when 'lane_paused' then
                       format('lane %s is paused until %s (%s); delete its row of '
                              'ceaseless.lane_pauses to lift the pause', p_agent,
                              v_lane.paused_until, v_lane.pause_reason)
                   when 'lane_full' then
                       format('lane %s has %s live jobs (%s claimed, %s running) of '
                              'max_concurrent %s; a slot frees when one of them ends', p_agent,
                              v_lane.live, v_lane.claimed, v_lane.live - v_lane.claimed,
                              v_agent.max_concurrent)
                   when 'window_budget' then
                       format('lane %s started %s runs in the last %s s and holds %s claimed '
                              'jobs, against window_budget %s', p_agent,
                              v_lane.started_in_window, v_agent.window_secs, v_lane.claimed,
                              v_agent.window_budget)
                   when 'cost_budget' then
                       format('lane %s''s runs started in the last %s s reported %s USD, against '
                              'window_cost_usd %s', p_agent, v_agent.window_secs,
                              v_lane.cost_in_window, v_agent.window_cost_usd)
                   when 'token_budget' then
                       format('lane %s''s runs started in the last %s s reported %s tokens, '
                              'against window_tokens %s', p_agent, v_agent.window_secs,
                              v_lane.tokens_in_window, v_agent.window_tokens)
               end,
               case v_reason
                   when 'lane_paused' then v_lane.paused_until
                   -- One slot needs this many of the window's runs to age out
                   -- of it; none may, when the claimed jobs alone fill it.
                   when 'window_budget' then
                       (select o.started_at + make_interval(secs => v_agent.window_secs)
                        from (select r.started_at
                              from agent_run r
                              where r.agent = p_agent and r.started_at > v_since
                              order by r.started_at
                              offset v_lane.claimed + v_lane.started_in_window
                                     - v_agent.window_budget
                              limit 1) o)
                   -- The spend budgets clear when the oldest runs whose spend,
                   -- aged out, brings the window's total under the budget
                   -- have left the window.
                   when 'cost_budget' then
                       _spend_clears(array[p_agent], null, v_since, v_agent.window_secs, false,
                                     v_lane.cost_in_window - v_agent.window_cost_usd)
                   when 'token_budget' then
                       _spend_clears(array[p_agent], null, v_since, v_agent.window_secs, true,
                                     v_lane.tokens_in_window - v_agent.window_tokens)
               end,
               v_lane.free;
    end loop;
end;
$$;

comment on function _explain_lane(text, timestamptz) is
    'What holds the next claim of a lane, each reason _lane_capacity names (agent_disabled, '
    'lane_paused, lane_full, window_budget, cost_budget, token_budget) with its counts and when '
    'it clears; one row with a NULL reason and the free slots when nothing does.';

-- What holds a scheduled routine's or loop's next fire on the clock: no slot
-- computed yet (not_scheduled), or a slot still to come (not_due, clearing
-- at it). Nothing for a row that is disabled or has no schedule, or whose
-- slot has come. Read from the schedules view, the trigger layer's one
-- reading of a row's schedule.
create or replace function _explain_schedule(p_kind text, p_id uuid, p_now timestamptz)
returns table (reason text, detail text, clears_at timestamptz)
language sql stable
as $$
    select case when s.next_fire_at is null then 'not_scheduled' else 'not_due' end,
           case when s.next_fire_at is null
                then format('no next fire computed yet: a running listener computes it when the '
                            '%s is created, changed or enabled', s.kind)
                else format('next slot of %s (%s)', s.schedule, s.timezone)
           end,
           s.next_fire_at
    from schedules s
    where s.kind = p_kind and s.id = p_id and s.enabled and s.schedule is not null
      and (s.next_fire_at is null or s.next_fire_at > p_now);
$$;

comment on function _explain_schedule(text, uuid, timestamptz) is
    'What holds the next cron fire of a routine or loop (p_kind): not_scheduled (no slot '
    'computed yet) or not_due (clears at the slot); nothing when its slot has come or it has no '
    'schedule.';

-- Every reason that holds a job. A job not pending says what it is instead
-- (claimed, running, or finished in its state); a pending one lists each of:
-- not_due (run_after, e.g. a retry's backoff), the lane's reasons
-- (_explain_lane: agent_disabled, lane_paused, lane_full, window_budget,
-- cost_budget, token_budget), and, when the lane has room, behind_older_jobs
-- (a fifo lane, which takes the highest priority first, then the job due
-- first, would take at least that many others first) or behind_other_turns
-- (a round_robin lane could serve that many turns of other owners, of its
-- owner's other fairness keys, and of its key's earlier jobs first, as
-- _round_robin_pick takes them). Nothing: one row, 'ready'.
--
-- Raises: CE404 when no job has the id, or it is someone else's.
create or replace function explain_job(p_job_id uuid, p_now timestamptz default now())
returns table (reason text, detail text, clears_at timestamptz)
language plpgsql stable
as $$
#variable_conflict use_column
declare
    v_job job;
    v_free bigint;
    v_ahead bigint;
    v_held boolean;
    v_lane record;
    v_fairness text;
    v_others bigint;
    v_keys bigint;
    v_most bigint;
begin
    select j.* into v_job from job j where j.id = p_job_id and _acts_for(j.user_id);
    if v_job.id is null then
        raise exception 'explain_job: no job with id %', p_job_id using errcode = 'CE404';
    end if;

    if v_job.state in ('claimed', 'running') then
        return query select v_job.state,
            format('%s by listener %s since %s (attempt %s); its lease ends at %s unless renewed',
                   v_job.state, v_job.claimed_by, v_job.claimed_at, v_job.attempts,
                   v_job.claim_expires_at),
            null::timestamptz;
        return;
    elsif v_job.state <> 'pending' then
        return query select 'finished'::text,
            format('the job is %s%s; it runs again only by %s', v_job.state,
                   case when v_job.last_error is not null
                        then format(' (last error: %s)', left(v_job.last_error, 200)) else '' end,
                   -- A blocked job waits for a person, who resumes its
                   -- session (10_jobs.sql), its routine run or topology
                   -- node waiting with it.
                   case when v_job.state = 'blocked'
                        then format('a reply, reply_job(%L, ''…''), or a raised ceiling, '
                                    'raise_job_budget(%L, <usd>), which resume its session; '
                                    'or retry_job', v_job.id, v_job.id)
                        -- An ended node's job runs again only with its run
                        -- (51_topology_runs.sql).
                        when v_job.topology_run_id is not null
                        then format('retry_topology_run(%L), with its topology run',
                                    v_job.topology_run_id)
                        else 'retry_job' end),
            null::timestamptz;
        return;
    end if;

    return query
    select 'not_due'::text,
           format('run_after is %s%s', v_job.run_after,
                  case when v_job.last_error is not null
                       then format(' (retry after attempt %s: %s)', v_job.attempts,
                                   left(v_job.last_error, 200))
                       else '' end),
           v_job.run_after
    where v_job.run_after > p_now;
    v_held := found;

    -- The owner's spend budget (owner_budgets): every lane waits for it,
    -- when the claim's own rule (_owners_over_budget) says so.
    return query
    select 'owner_budget'::text,
           format('owner %s''s runs started in the last %s s reported %s USD and %s tokens, '
                  'against its budget of %s USD and %s tokens', b.user_id, b.window_secs,
                  s.cost, s.tokens, coalesce(b.window_cost_usd::text, 'no'),
                  coalesce(b.window_tokens::text, 'no')),
           _owner_budget_clears(b, p_now)
    from owner_budgets b
    cross join lateral _owner_spend(b, p_now) s
    where b.user_id = v_job.user_id and v_job.user_id = any (_owners_over_budget(p_now));
    v_held := v_held or found;

    for v_lane in select l.* from _explain_lane(v_job.agent, p_now) l loop
        v_free := v_lane.free;
        if v_lane.reason is not null then
            v_held := true;
            return query select v_lane.reason, v_lane.detail, v_lane.clears_at;
        end if;
    end loop;

    select a.fairness into v_fairness from agents a where a.name = v_job.agent;
    if not v_held and v_fairness = 'round_robin' then
        -- Each count stops at the lane's free slots: a deep backlog costs no
        -- more than a short one. The turn can stand anywhere, so this is the
        -- most that could go first: every other owner before each of its
        -- owner's turns, every other key before each of its key's turns.
        -- Owners and keys compared bytewise, as job_fair_claim_idx orders
        -- them (db/0097).
        select count(*) into v_others
        from (select distinct j.user_id collate "C" from job j
              where j.agent = v_job.agent and j.state = 'pending' and j.run_after <= p_now
                and j.user_id <> v_job.user_id
              limit v_free) o;
        select count(*) into v_keys
        from (select distinct j.fairness_key collate "C" from job j
              where j.agent = v_job.agent and j.state = 'pending' and j.run_after <= p_now
                and j.user_id collate "C" = v_job.user_id and j.fairness_key <> v_job.fairness_key
              limit v_free) k;
        select count(*) into v_ahead
        from (select from job j
              where j.agent = v_job.agent and j.state = 'pending' and j.run_after <= p_now
                and j.user_id collate "C" = v_job.user_id
                and j.fairness_key collate "C" = v_job.fairness_key
                and (j.priority > v_job.priority
                     or (j.priority = v_job.priority
                         and (j.run_after, j.created_at) < (v_job.run_after, v_job.created_at)))
              limit v_free) ahead;
        v_most := (v_ahead + 1) * (v_keys + 1) * (v_others + 1) - 1;
        if v_most >= v_free then
            v_held := true;
            return query select 'behind_other_turns'::text,
                format('lane %s takes turns (round_robin): %s%s other owners and %s%s other '
                       'fairness keys of owner %s have due work, and %s%s jobs of key %s come '
                       'before it; up to %s%s jobs may be claimed first, with %s free slots',
                       v_job.agent, case when v_others >= v_free then 'at least ' else '' end,
                       v_others, case when v_keys >= v_free then 'at least ' else '' end, v_keys,
                       v_job.user_id, case when v_ahead >= v_free then 'at least ' else '' end,
                       v_ahead, v_job.fairness_key,
                       case when greatest(v_others, v_keys, v_ahead) >= v_free
                            then 'at least ' else '' end, v_most, v_free),
                null::timestamptz;
        end if;
    elsif not v_held then
        -- Counting stops at the lane's free slots: a deep backlog costs no
        -- more than a short one.
        select count(*) into v_ahead
        from (select from job j
              where j.agent = v_job.agent and j.state = 'pending' and j.run_after <= p_now
                and (j.priority > v_job.priority
                     or (j.priority = v_job.priority
                         and (j.run_after, j.created_at) < (v_job.run_after, v_job.created_at)))
              limit v_free) older;
        if v_ahead >= v_free then
            v_held := true;
            return query select 'behind_older_jobs'::text,
                format('lane %s has %s free slots and at least as many due jobs of higher '
                       'priority, or of its priority and older, which are claimed first',
                       v_job.agent, v_free),
                null::timestamptz;
        end if;
    end if;
    -- One ready row for either fairness; a round_robin lane also serves the
    -- job's turn within its free slots.
    if not v_held then
        return query select 'ready'::text,
            format('due, and lane %s admits it (%s free slots)%s: a listener serving the lane '
                   'claims it next', v_job.agent, v_free,
                   case when v_fairness = 'round_robin'
                        then ' and serves its turn within them' else '' end),
            null::timestamptz;
    end if;
end;
$$;

comment on function explain_job(uuid, timestamptz) is
    'Every reason that holds a job (not_due, owner_budget, agent_disabled, lane_paused, '
    'lane_full, window_budget, cost_budget, token_budget, behind_older_jobs, behind_other_turns; '
    'or claimed, running, '
    'finished), one row each with the '
    'time it clears when known; ''ready'' when nothing does. CE404 for an unknown job.';

-- The held fires of a routine or loop (33_held_fires.sql), as explain_routine
-- and explain_loop list them: one row for its buffered fires (how many, the
-- policy, what blocks the first and when it is tried; NULL clears_at: when a
-- run ends) and one for its debounce window (the fires it collapses, and
-- when it starts).
create or replace function _explain_held(p_target uuid, p_policy text)
returns table (reason text, detail text, clears_at timestamptz)
language sql stable
as $$
    select h.reason,
           case h.reason
               when 'buffered'
                   then format('%s fires wait (overlap_policy %s), the first held by %s; it '
                               'starts %s', count(*), p_policy,
                               (array_agg(h.blocked_by order by h.seq))[1],
                               coalesce('at ' || (array_agg(h.fire_at order by h.seq))[1]::text,
                                        'when a run of it ends'))
               else format('%s fires collapse into one (debounce), the last at %s; it starts '
                           'at %s', sum(h.collapsed), max(h.last_at), min(h.fire_at))
           end,
           case h.reason when 'buffered' then (array_agg(h.fire_at order by h.seq))[1]
                else min(h.fire_at) end
    from held_fires h
    where h.routine_id = p_target or h.loop_id = p_target
    group by h.reason
    order by h.reason;
$$;

comment on function _explain_held(uuid, text) is
    'A routine''s or loop''s held fires for explain: buffered (count, policy, blocker, when tried) '
    'and debounced (fires collapsed, when it starts), one row each.';

-- Every reason that holds a routine's next fire, in the order _fire_routines
-- judges them: disabled, agent_disabled, cooldown (clears at the cooldown's
-- end; a manual run ignores it), concurrency (max_concurrent running runs),
-- global_cap (setting routine_max_running); under concurrency, what holds
-- the job of each running run (its explain_job reasons: a retry's backoff
-- and its error, a lane that keeps it waiting, a job that is running); for
-- a cron routine, not_due until next_fire_at (or not_scheduled while no
-- listener has computed it).
-- Then what would hold the jobs of its runs in their lane: lane_paused,
-- lane_full, window_budget, cost_budget, token_budget. Nothing: one row,
-- 'ready', naming what fires it.
-- Dedup is left out: it refuses a given content, not the routine.
--
-- Raises: CE404 when no routine has the id, or it is someone else's.
create or replace function explain_routine(p_routine_id uuid, p_now timestamptz default now())
returns table (reason text, detail text, clears_at timestamptz)
language plpgsql stable
as $$
#variable_conflict use_column
declare
    v_routine routines;
    v_running bigint;
    v_all_running bigint;
    v_cap integer := _setting_int('routine_max_running');
    v_cooldown_ends timestamptz;
begin
    select r.* into v_routine from routines r where r.id = p_routine_id and _acts_for(r.user_id);
    if v_routine.id is null then
        raise exception 'explain_routine: no routine with id %', p_routine_id
            using errcode = 'CE404';
    end if;
    select count(*) into v_running
    from routine_runs rr
    where rr.routine_id = v_routine.id and rr.status = 'running';
    -- The count the firing path judges by: one row per shard, no scan.
    select coalesce(sum(s.running), 0) into v_all_running from routine_run_shards s;
    -- NULL, and no reason, when there is no cooldown or no run has finished.
    v_cooldown_ends := case when v_routine.cooldown_secs > 0
                            then v_routine.last_run_at
                                 + make_interval(secs => v_routine.cooldown_secs) end;

    -- The guardrails in the order _fire_routines judges them, each running
    -- run's job under the concurrency it holds (a job in retry backoff with
    -- its error, a lane that keeps it waiting: the reason behind the
    -- reason), then the schedule's, then what would hold its runs' jobs in
    -- their lane (whose agent_disabled is the guardrail's, given once).
    return query
    select h.reason, h.detail, h.clears_at
    from (
        -- Fires already waiting come first: they start before any new one.
        select 0 as ord, 0::bigint as sub, x.reason, x.detail, x.clears_at
        from _explain_held(v_routine.id, v_routine.overlap_policy) x
        union all
        select g.ord, 0::bigint as sub, g.reason, g.detail, g.clears_at
        from (values
            (1, not v_routine.enabled, 'disabled',
             format('routine %s is disabled%s', v_routine.name,
                    case when v_routine.last_error is not null
                         then format(' (last error: %s)', left(v_routine.last_error, 200))
                         else '' end),
             null::timestamptz),
            (2, exists (select from agents a where a.name = v_routine.agent and not a.enabled),
             'agent_disabled',
             format('agent %s is disabled: fires are skipped (agent_disabled)', v_routine.agent),
             null),
            (3, p_now < v_cooldown_ends, 'cooldown',
             format('the last run finished at %s and cooldown_secs is %s (run_routine ignores it)',
                    v_routine.last_run_at, v_routine.cooldown_secs),
             v_cooldown_ends),
            (4, v_running >= v_routine.max_concurrent and v_routine.overlap_policy <> 'allow_all',
             'concurrency',
             format('%s runs are running of max_concurrent %s; one ends when its job does',
                    v_running, v_routine.max_concurrent),
             null),
            (5, v_all_running >= v_cap, 'global_cap',
             format('%s routine runs are running across all users, the setting '
                    'routine_max_running is %s', v_all_running, v_cap),
             null)
        ) g (ord, holds, reason, detail, clears_at)
        where g.holds
        union all
        -- job_routine_run_idx: the jobs of this routine's running runs only.
        select 4, row_number() over (order by rr.started_at, j.id, e.n), e.reason,
               format('run %s, job %s: %s', rr.id, j.id, e.detail), e.clears_at
        from routine_runs rr
        join job j on j.routine_run_id = rr.id
                  and j.state in ('pending', 'claimed', 'running', 'blocked')
        cross join lateral explain_job(j.id, p_now) with ordinality as e (reason, detail,
                                                                         clears_at, n)
        where rr.routine_id = v_routine.id and rr.status = 'running' and e.reason <> 'ready'
        union all
        select 6, 0, e.reason, e.detail, e.clears_at
        from _explain_schedule('routine', v_routine.id, p_now) e
        union all
        select 6 + l.n, 0, l.reason, 'its jobs wait: ' || l.detail, l.clears_at
        from _explain_lane(v_routine.agent, p_now) with ordinality as l (reason, detail, clears_at,
                                                                         free, n)
        where l.reason is not null and l.reason <> 'agent_disabled'
    ) h
    order by h.ord, h.sub;

    if not found then
        return query select 'ready'::text,
            case v_routine.trigger_type
                when 'cron' then format('due: slot %s fires at the next cron tick',
                                        v_routine.next_fire_at)
                when 'event' then format('fires on an event of user %s matching %s',
                                         v_routine.user_id,
                                         to_jsonb(v_routine.trigger_config ->> 'pattern'))
                when 'webhook' then format('fires on a signed POST to /hooks/%s',
                                           v_routine.trigger_config ->> 'path')
                else 'fires on run_routine (ceaseless routine run)'
            end,
            null::timestamptz;
    end if;
end;
$$;

comment on function explain_routine(uuid, timestamptz) is
    'Every reason that holds a routine''s next fire (its held fires: buffered, debounced; '
    'disabled, agent_disabled, cooldown, '
    'concurrency and the explain_job reasons of each running run''s job, global_cap, not_due, '
    'not_scheduled) or its jobs in their lane (lane_paused, '
    'lane_full, window_budget, cost_budget, token_budget), one row each with the time it '
    'clears when known; ''ready'' when nothing does. CE404 for an unknown routine.';

-- Every reason that holds a topology run: a node awaiting approval (clears
-- when decided, or fails the run at its expiry), and for each node whose job
-- is pending, that job's reasons (explain_job) under the node's name. A run
-- that has ended says so; one nothing holds (its jobs running): 'ready'.
--
-- Raises: CE404 when no run has the id, or it is someone else's.
create or replace function explain_topology_run(
    p_run_id uuid, p_now timestamptz default now()
)
returns table (reason text, detail text, clears_at timestamptz)
language plpgsql stable
as $$
#variable_conflict use_column
declare
    v_run topology_runs;
    v_held boolean;
begin
    select r.* into v_run from topology_runs r where r.id = p_run_id and _acts_for(r.user_id);
    if v_run.id is null then
        raise exception 'explain_topology_run: no topology run with id %', p_run_id
            using errcode = 'CE404';
    end if;
    if v_run.status not in ('pending', 'running', 'awaiting_approval') then
        return query select 'finished'::text, format('the run is %s', v_run.status),
                            null::timestamptz;
        return;
    end if;

    return query
    select 'awaiting_approval'::text,
           format('node %s awaits approval %s: select ceaseless.decide_approval(%L, true, null, '
                  'null)%s', n.node_id, a.id, a.id,
                  _approval_expiry_text(n.on_expiry, a.expires_at)),
           a.expires_at
    from topology_nodes n
    join approvals a on a.topology_run_id = n.topology_run_id and a.node_id = n.node_id
    where n.topology_run_id = p_run_id and n.state = 'awaiting_approval' and a.decision is null
    order by n.node_id;
    v_held := found;

    return query
    select e.reason, format('node %s: %s', n.node_id, e.detail), e.clears_at
    from topology_nodes n
    join job j on j.id = n.job_id and j.state = 'pending'
    cross join lateral explain_job(j.id, p_now) with ordinality as e (reason, detail, clears_at, n)
    where n.topology_run_id = p_run_id and n.state = 'queued' and e.reason <> 'ready'
    order by n.node_id, e.n;
    v_held := v_held or found;

    if not v_held then
        return query select 'ready'::text,
            'no approval awaited and no node''s job held: its nodes run as their upstreams '
            'finish'::text,
            null::timestamptz;
    end if;
end;
$$;

comment on function explain_topology_run(uuid, timestamptz) is
    'Every reason that holds a topology run: nodes awaiting approval (clears_at: the '
    'approval''s expiry) and the reasons of its nodes'' pending jobs (explain_job), one row '
    'each; ''ready'' when nothing does. CE404 for an unknown run.';

-- Every reason that holds a loop's next iteration, in the order _fire_loop
-- (56_loop_firing.sql) judges a fire: stopped (its repeat policy or an
-- iteration's end disabled it: why and when) or disabled (by hand, or by the
-- engine, with its last_error), both until it is re-enabled; agent_disabled,
-- one row per node whose agent is disabled or not registered; live_iteration
-- (a loop runs one iteration at a time: a fire now is skipped), followed by
-- what holds that iteration (explain_topology_run: awaiting_approval, whose
-- clears_at is when an undecided approval fails it, and the reasons of its
-- nodes' pending jobs), each prefixed with the iteration; min_interval
-- while a fire that would start an iteration now (none live, or under
-- cancel_other) would wait for the loop's min_interval_secs (clears_at its
-- end); and for a cron loop, not_scheduled while no listener has computed its slot, or not_due
-- until next_fire_at. Nothing: one row, 'ready', naming what fires it.
--
-- Raises: CE404 when no loop has the id, or it is someone else's.
create or replace function explain_loop(p_loop_id uuid, p_now timestamptz default now())
returns table (reason text, detail text, clears_at timestamptz)
language plpgsql stable
as $$
#variable_conflict use_column
declare
    v_loop loops;
    v_live topology_runs;
    v_on_completion boolean;
    v_held boolean;
begin
    select l.* into v_loop from loops l where l.id = p_loop_id and _acts_for(l.user_id);
    if v_loop.id is null then
        raise exception 'explain_loop: no loop with id %', p_loop_id using errcode = 'CE404';
    end if;
    v_on_completion := coalesce((v_loop.triggers ->> 'on_completion')::boolean, false);
    -- Fires already waiting come first: they start before any new one.
    return query select * from _explain_held(v_loop.id, v_loop.overlap_policy);
    v_held := found;
    -- topology_runs_one_live_iteration_idx: at most one.
    select r.* into v_live
    from topology_runs r
    where r.loop_id = v_loop.id and r.status in ('pending', 'running', 'awaiting_approval');

    return query
    select case when v_loop.stopped_reason is not null then 'stopped' else 'disabled' end,
           case when v_loop.stopped_reason is not null
                then format('loop %s stopped at %s: %s; re-enabling it continues the chain and '
                            'counts its policy again: update ceaseless.loops set enabled = true '
                            'where id = %L;',
                            left(v_loop.title, 200), v_loop.stopped_at,
                            case v_loop.stopped_reason
                                when 'completed' then 'its repeat policy is met'
                                when 'exhausted' then 'its repeat policy gave up (within_iters '
                                                      'passed without the condition)'
                                when 'failed' then 'an iteration failed'
                                when 'cancelled' then 'an iteration was cancelled'
                                else v_loop.stopped_reason
                            end,
                            v_loop.id)
                else format('loop %s is disabled%s: fires are skipped (disabled) until it is '
                            're-enabled', left(v_loop.title, 200),
                            case when v_loop.last_error is not null
                                 then format(' (last error: %s)', left(v_loop.last_error, 200))
                                 else '' end)
           end,
           null::timestamptz
    where not v_loop.enabled;
    v_held := v_held or found;

    return query
    select 'agent_disabled'::text,
           format('node %s runs on agent %s, which is %s: fires are skipped (agent_disabled)%s',
                  d.node_id, d.agent,
                  case when d.registered then 'disabled' else 'not registered' end,
                  case when v_on_completion and v_loop.enabled
                       then '; enabling it starts the next iteration' else '' end),
           null::timestamptz
    from _graph_agents_disabled(v_loop.graph) d
    order by d.node_id;
    v_held := v_held or found;

    -- The live iteration, then what holds it, each prefixed with it.
    if v_live.id is not null then
        v_held := true;
        return query
        select 'live_iteration'::text,
               format('iteration %s (run %s) is %s since %s: a loop runs one iteration at a '
                      'time, so a fire now is %s%s', v_live.iteration,
                      v_live.id, v_live.status, coalesce(v_live.started_at, v_live.created_at),
                      case v_loop.overlap_policy
                          when 'buffer_one' then 'held, the newest replacing any other '
                                                 '(buffer_one)'
                          when 'buffer_all' then 'held in order (buffer_all)'
                          when 'cancel_other' then 'started after this one is cancelled '
                                                   '(cancel_other)'
                          else 'skipped (live_iteration)' end,
                      case when v_on_completion and v_loop.enabled
                           then '; its end starts the next (on_completion)' else '' end),
               null::timestamptz;
        return query
        select e.reason, format('iteration %s: %s', v_live.iteration, e.detail), e.clears_at
        from explain_topology_run(v_live.id, p_now) with ordinality as e (reason, detail,
                                                                          clears_at, n)
        where e.reason <> 'ready'
        order by e.n;
    end if;

    -- The pace, judged as _fire_loop judges it: for a fire that would start
    -- an iteration now (none live, or cancel_other's), which would wait for
    -- the interval's end (every trigger but run_loop).
    return query
    select 'min_interval'::text,
           format('iteration %s was fired at %s and min_interval_secs is %s: a fire before %s '
                  'waits until then (held, not skipped; run_loop is not paced)',
                  r.iteration, r.created_at, v_loop.min_interval_secs, p.ends_at),
           p.ends_at
    from _loop_paced_until(v_loop.id, v_loop.min_interval_secs, p_now) p(ends_at)
    cross join lateral (select r.iteration, r.created_at from topology_runs r
                        where r.loop_id = v_loop.id and r.iteration is not null
                        order by r.iteration desc limit 1) r
    where p.ends_at is not null and v_loop.enabled
      and (v_live.id is null or v_loop.overlap_policy = 'cancel_other');
    v_held := v_held or found;

    return query select * from _explain_schedule('loop', v_loop.id, p_now);
    v_held := v_held or found;

    if not v_held then
        return query select 'ready'::text,
            'fires on ' || concat_ws(', ',
                case when v_loop.triggers ? 'cron'
                     then format('its cron slot %s, at the next cron tick', v_loop.next_fire_at) end,
                case when v_loop.webhook_token is not null
                     then 'a signed POST to its webhook' end,
                case when v_loop.triggers ? 'event'
                     then format('an event of user %s matching %s', v_loop.user_id,
                                 v_loop.triggers -> 'event' -> 'pattern') end,
                'run_loop (ceaseless loop run)')
            || case when v_on_completion then '; then each iteration''s end fires the next'
                    else '' end,
            null::timestamptz;
    end if;
end;
$$;

comment on function explain_loop(uuid, timestamptz) is
    'Every reason that holds a loop''s next iteration (its held fires: buffered, debounced; '
    'stopped, disabled, agent_disabled, min_interval, '
    'live_iteration and what holds it: awaiting_approval, its nodes'' jobs; not_scheduled, '
    'not_due), one row each with the time it clears when known; ''ready'' when nothing does. '
    'CE404 for an unknown loop.';
