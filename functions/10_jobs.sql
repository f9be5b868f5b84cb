-- The job queue: claim, lease, expire, end, release, cancel, retry, reply,
-- raise a ceiling, and which jobs will never run again.
--
-- Called by: listeners (claim_jobs, extend_leases, expire_leases,
-- release_jobs, ended_jobs), operators and owners (cancel_job, retry_job,
-- reply_job, raise_job_budget),
-- and PostgreSQL after an agent is disabled (agents_disabled).
-- Guarantees: each function is one transaction's worth of work; a job moves
-- through pending → claimed → running → terminal only here and in
-- 20_agent_runs.sql (finish_runs), and from blocked back to pending only by
-- a person: a reply or raised ceiling (reply_job, raise_job_budget), which
-- audit who sent it, or a fresh start (retry_job); ended_jobs reads only, and names only jobs
-- of this database that can never run again (a workspace root may be shared
-- with another database's listeners, whose jobs are theirs to judge); a
-- round_robin lane's turn (lane_turns, owner_turns) is read and written only
-- by claim_jobs, under the lane's row lock, so two claimers never serve one
-- turn twice.
--
-- Every write to job fires these triggers, in this order (PostgreSQL fires a
-- table's triggers of one kind in name order; docs/sql-reference.md lists
-- them from the catalog):
--   before each row
--     job_bounded_json      payload nested too deep (02_bounded_json.sql)
--     job_default_agent     agent left out: the default (13_default_agent.sql)
--     job_input             prompt and payload bounds (11_job_input.sql)
--     job_spend_ceiling     ceilings left out: the loop node's, routine's or
--                           agent's (same file)
--     job_user_due          a user's job due no earlier than now (same file)
--     job_validate          a resumable session id (same file)
--   after each statement
--     job_ended             a job's notification when it ends for good
--                           (60_notifications.sql)
--     job_insert            audit and NOTIFY ceaseless_job (25_notify_audit.sql)
--     job_plan_children     a delivered plan's child issues (73_forge_children.sql)
--     job_routine_outcome   close the routine runs of ended jobs
--                           (44_routine_outcomes.sql)
--     job_topology_outcome  move the topology nodes of loop_node jobs
--                           (51_topology_runs.sql)
--     job_update            audit and NOTIFY ceaseless_job (25_notify_audit.sql)
-- so a statement's routine runs close, and its nodes move, before its own
-- audit rows are written.

-- Planner settings (here and in 20_agent_runs.sql): none by default. A
-- function keeps one only while a plan test shows the plan it prevents, or
-- bin/bench on PostgreSQL 15 and 18 shows it pays; the comment beside each
-- names that evidence (docs/performance.md, "Planner settings on functions").
-- The shape these prevent: PL/pgSQL plans a statement once per session and
-- keeps the plan; planned while the table was small, or for a batch of one,
-- a statement may read the whole job table and test every row against the
-- batch's ids, quadratic for a batch of a thousand.

-- The arguments of a claim, the job queue's or the outbox's: a claim that
-- names no listener could never be fenced (its lease would belong to
-- nobody), and one of fewer than one row is a caller's mistake.
--
-- Raises: CE422 naming the function and the argument.
create or replace function _check_claim(p_function text, p_worker text, p_limit integer)
returns void
language plpgsql
as $$
begin
    if p_worker is null or p_worker = '' then
        raise exception '%: p_worker must name the claiming listener', p_function
            using errcode = 'CE422';
    end if;
    if p_limit is null or p_limit < 1 then
        raise exception '%: p_limit must be at least 1, got %', p_function, p_limit
            using errcode = 'CE422';
    end if;
end;
$$;

comment on function _check_claim(text, text, integer) is
    'Raise CE422 (naming p_function) unless a claim names its listener and asks for at least one '
    'row.';

-- A round_robin lane's next p_free due jobs, in turn: one job per owner with
-- due work, in owner order starting after the owner the lane served last
-- (lane_turns), and within each owner one job per fairness key, starting
-- after the key that owner was served last (owner_turns); each key's job is
-- its highest priority, then the one due first. When every owner had a turn
-- and slots remain, the next round begins. Owners come first so a fairness
-- key can only share out its own owner's turns: a user naming another
-- user's key, or a thousand keys of its own, gains no turn of anyone else's.
-- Owners in p_owners_over (over their spend budget) pass their turn.
--
-- O(due work): each owner's turn is one probe of job_fair_claim_idx that
-- finds the next owner and lands on its first key's best job, one of
-- owner_turns for its key turn and one for its next key's best job when the
-- turn stands at or past its first key (always, for an owner with one key,
-- once its turn is recorded): two or three index descents a slot, whatever
-- the backlog and however many owners or keys wait, and one probe a claim
-- for where the ring ends; one statement when one round fills the slots (as
-- many owners with due work as free slots), then one per further round.
-- Owners and keys are compared bytewise (COLLATE "C", as the index orders
-- them, db/0097): a linguistic comparison of two names is a strcoll() call.
--
-- The due test is written `(run_after <= p_now) is true` so that it is made
-- on the entries a probe takes, not as an index condition: a B-tree scan
-- tests its index conditions on every entry it could return from the leaf
-- page it lands on before it returns the first, and each probe here takes
-- one entry of a page of a hundred or more. PostgreSQL 18 skips that work for
-- the leading columns, not for run_after (after two text columns, the
-- dearest to read): there the first round of a claim of ten costs 15 % less
-- this way (docs/performance.md, "Fairness and priority"); 15 tests every
-- condition on every entry anyway and gains nothing. The price falls on
-- delayed work: jobs delayed into the future sit in the same index, and an
-- owner or key whose pending jobs are all delayed costs a read of each of
-- their rows to pass over, where the index condition passed them within the
-- page.
--
-- Called by claim_jobs only, which holds the lane's row lock, so the turn it
-- reads and writes here is the lane's alone. The turn moves past every job
-- picked: when claim_jobs' p_limit cuts a claim spread over several lanes,
-- the owners cut lose that turn (each lane is asked for at most p_limit, so
-- one lane alone is never cut). Locks: the picked jobs, FOR UPDATE SKIP
-- LOCKED, as the fifo claim does, and the job each owner's probe landed on
-- when a later key's job is picked instead (unclaimed, until the claim
-- commits).
create or replace function _round_robin_pick(
    p_agent text,
    p_free integer,
    p_now timestamptz,
    p_kinds text[],
    p_owners_over text[]
)
returns table (id uuid, turn integer, priority integer, run_after timestamptz,
               created_at timestamptz)
language plpgsql
-- Planned once, generically: claim_jobs' plan_cache_mode holds here too.
as $$
#variable_conflict use_column
declare
    v_owners text[];
    v_keys text[];
    v_ids uuid[];
    v_priorities integer[];
    v_due timestamptz[];
    v_created timestamptz[];
    v_done boolean[];
    v_taken integer;
    v_round integer := 1;
    v_before integer;
    v_last_owner text;
    v_pick record;
begin
    -- The first round in one statement: the owners with due work in ring
    -- order, one job of each, and the turns moved past them.
    with recursive
    -- Where the ring starts: after the owner served last ('' before every
    -- owner: role names are never empty), and where it ends: the lane's last
    -- owner with a pending job (one probe, backwards).
    start as (
        select coalesce((select t.user_id from lane_turns t where t.agent = p_agent), '')
                   as after,
               (select j.user_id from job j
                where j.agent = p_agent and j.state = 'pending'
                order by j.user_id collate "C" desc
                limit 1) as last
    ),
    -- A skip scan of job_fair_claim_idx: each step one probe for the next
    -- owner with a due job (of the kinds asked for) up to the step's upper
    -- bound, landing on that owner's first key's best job and locking it
    -- (FOR UPDATE SKIP LOCKED). From after the turn to the last owner; then a
    -- step that finds nothing (id null) wraps the ring round to run from the
    -- first owner to the turn's own, served last, so last again; a second
    -- step that finds nothing ends it. The seed row (n = 0) is the turn.
    ring (user_id, upper, fairness_key, id, priority, run_after, created_at, n, wrapped,
          ended) as (
        select start.after, start.last, null::text, null::uuid, null::integer,
               null::timestamptz, null::timestamptz, 0, false, start.last is null
        from start
        union all
        select coalesce(l.user_id, ''), case when l.id is null then start.after else r.upper end,
               l.fairness_key, l.id, l.priority, l.run_after, l.created_at,
               r.n + (l.id is not null)::integer, r.wrapped or l.id is null,
               l.id is null and r.wrapped
        from ring r
        cross join start
        left join lateral (
            select j.user_id, j.fairness_key, j.id, j.priority, j.run_after, j.created_at
            from job j
            where j.agent = p_agent and j.state = 'pending'
              and j.user_id collate "C" > r.user_id
              and j.user_id collate "C" <= r.upper
              and (j.run_after <= p_now) is true
              and (p_kinds is null or j.kind = any (p_kinds))
            order by j.user_id collate "C", j.fairness_key collate "C", j.priority desc,
                     j.run_after
            limit 1
            for update skip locked
        ) l on true
        where not r.ended and r.n < p_free + cardinality(p_owners_over)
    ),
    -- At most one owner per free slot (more could not be served this
    -- claim); owners over their spend budget pass their turn.
    served as (
        select r.user_id, r.fairness_key, r.id, r.priority, r.run_after, r.created_at, r.n
        from ring r
        where r.id is not null and r.user_id <> all (p_owners_over)
        order by r.n
        limit p_free
    ),
    -- Each owner's job: the best of its next key after the key it was
    -- served last (owner_turns; '' before every key: keys are never empty),
    -- rounding to its first key. The ring landed on its first key's best
    -- job, so that is the pick unless the turn stands at or past the first
    -- key and a later key has due work: one probe of owner_turns_pkey (a
    -- probe per owner served, not a join, which the planner ran as a read of
    -- every owner's turn in the lane; materialized, so each is probed once)
    -- and, only when the turn stands there, one of job_fair_claim_idx for the
    -- later key, which finds nothing for an owner with one key. A landing
    -- job passed over for a later key stays locked, unclaimed, until the
    -- claim commits.
    turns as materialized (
        select s.*,
               coalesce((select o.fairness_key from owner_turns o
                         where o.agent = p_agent and o.user_id = s.user_id), '') as key_before
        from served s
    ),
    picks as (
        select t.user_id, t.n, t.key_before, c.*
        from turns t
        cross join lateral (
            select m.* from (
                select j.id, j.fairness_key, j.priority, j.run_after, j.created_at
                from job j
                where t.fairness_key collate "C" <= t.key_before
                  and j.agent = p_agent and j.state = 'pending'
                  and j.user_id collate "C" = t.user_id
                  and j.fairness_key collate "C" > t.key_before
                  and (j.run_after <= p_now) is true
                  and (p_kinds is null or j.kind = any (p_kinds))
                order by j.fairness_key collate "C", j.priority desc, j.run_after
                limit 1
                for update skip locked
            ) m
            union all
            select t.id, t.fairness_key, t.priority, t.run_after, t.created_at
            limit 1
        ) c
    ),
    -- The lane's turn moves to the last owner served ...
    lane_moved as (
        insert into lane_turns as l (agent, user_id)
        select p_agent, p.user_id from picks p order by p.n desc limit 1
        on conflict (agent) do update set user_id = excluded.user_id
    ),
    -- ... and each owner's to its key served, written only where it moved,
    -- so an owner with one key (the default) costs no write after its first
    -- turn.
    keys_moved as (
        insert into owner_turns as o (agent, user_id, fairness_key)
        select p_agent, p.user_id, p.fairness_key
        from picks p
        where p.fairness_key <> p.key_before
        on conflict (agent, user_id) do update set fairness_key = excluded.fairness_key
    )
    -- One sort for the six arrays (an ordered aggregate sorts on its own).
    select array_agg(p.user_id), array_agg(p.fairness_key), array_agg(p.id),
           array_agg(p.priority), array_agg(p.run_after), array_agg(p.created_at)
    into v_owners, v_keys, v_ids, v_priorities, v_due, v_created
    from (select * from picks order by n) p;

    v_taken := coalesce(cardinality(v_ids), 0);
    for i in 1 .. v_taken loop
        id := v_ids[i];
        turn := 1;
        priority := v_priorities[i];
        run_after := v_due[i];
        created_at := v_created[i];
        return next;
    end loop;
    if v_taken = 0 or v_taken >= p_free then
        return;
    end if;

    -- Slots remain: fewer owners with due work than slots. The next rounds
    -- go to the owners served in the first, one job each per round, a
    -- statement a round, until the slots are filled or nothing due is left.
    v_done := array_fill(false, array[v_taken]);
    loop
        v_round := v_round + 1;
        v_before := cardinality(v_ids);
        for v_pick in
            select o.ord, c.id, c.fairness_key, c.priority, c.run_after, c.created_at
            from unnest(v_owners, v_keys, v_done) with ordinality as o(user_id, key, done, ord)
            left join lateral (
                select a.* from (
                    select j.id, j.fairness_key, j.priority, j.run_after, j.created_at
                    from job j
                    where j.agent = p_agent and j.state = 'pending'
                      and j.user_id collate "C" = o.user_id
                      and j.fairness_key collate "C" > o.key
                      and (j.run_after <= p_now) is true
                      and (p_kinds is null or j.kind = any (p_kinds))
                      and j.id <> all (v_ids)
                    order by j.fairness_key collate "C", j.priority desc, j.run_after
                    limit 1
                    for update skip locked
                ) a
                union all
                select b.* from (
                    select j.id, j.fairness_key, j.priority, j.run_after, j.created_at
                    from job j
                    where j.agent = p_agent and j.state = 'pending'
                      and j.user_id collate "C" = o.user_id
                      and j.fairness_key collate "C" <= o.key
                      and (j.run_after <= p_now) is true
                      and (p_kinds is null or j.kind = any (p_kinds))
                      and j.id <> all (v_ids)
                    order by j.fairness_key collate "C", j.priority desc, j.run_after
                    limit 1
                    for update skip locked
                ) b
                limit 1
            ) c on true
            where not o.done
            order by o.ord
            limit p_free - cardinality(v_ids)
        loop
            if v_pick.id is null then
                -- Nothing due left for this owner: it sits out the rounds
                -- to come.
                v_done[v_pick.ord] := true;
                continue;
            end if;
            v_keys[v_pick.ord] := v_pick.fairness_key;
            v_ids := v_ids || v_pick.id;
            v_last_owner := v_owners[v_pick.ord];
            id := v_pick.id;
            turn := v_round;
            priority := v_pick.priority;
            run_after := v_pick.run_after;
            created_at := v_pick.created_at;
            return next;
        end loop;
        exit when cardinality(v_ids) >= p_free or cardinality(v_ids) = v_before;
    end loop;

    if v_last_owner is null then
        return;
    end if;
    -- The later rounds moved the turns again: to the owner served last, and
    -- each owner's to the key it was served last.
    with turned as (
        insert into lane_turns as t (agent, user_id)
        values (p_agent, v_last_owner)
        on conflict (agent) do update set user_id = excluded.user_id
    )
    insert into owner_turns as t (agent, user_id, fairness_key)
    select p_agent, o.user_id, o.key
    from unnest(v_owners, v_keys) as o(user_id, key)
    on conflict (agent, user_id) do update set fairness_key = excluded.fairness_key
    where t.fairness_key is distinct from excluded.fairness_key;
end;
$$;

comment on function _round_robin_pick(text, integer, timestamptz, text[], text[]) is
    'A round_robin lane''s next p_free due jobs, one per owner in turn (after the owner served '
    'last), and within an owner one per fairness key in turn, each key''s by priority then due '
    'time; moves the lane''s turn. Called by claim_jobs under the lane lock.';

-- Claim up to p_limit due jobs for p_worker, in each lane's order (its
-- fairness: fifo by priority then due time, or round_robin across owners and
-- their fairness keys), admitting each through its lane's governor (_lane_capacity: concurrency, and the rolling window's
-- budgets of runs, cost and tokens) and its owner's spend budget, in the same
-- transaction.
--
-- With p_start, the claimed jobs go straight to running and their agent_run
-- rows are opened in the same statement (run_id is returned): the listener
-- spawns at once, where a separate start step would update every claimed
-- row a second time. Without it, jobs are only claimed (state `claimed`, no
-- run opened): what admission tests and operators probing the governor use;
-- such a claim ends when its lease does.
--
-- A lane is skipped while it is disabled or paused (a row of lane_pauses
-- whose time has not come, read against p_now): _lane_capacity gives it no
-- free slots, and it is not locked.
--
-- Locks: the rows of the enabled, unpaused lanes (FOR NO KEY UPDATE, in name
-- order, so two claimers never deadlock) and then the claimed jobs (FOR UPDATE
-- SKIP LOCKED). The lane lock is what makes admission exact: without it, two
-- listeners counting a lane at once would each see the same free slots and
-- together admit twice the budget. It is taken in its own statement because a
-- READ COMMITTED statement's snapshot predates any lock it waits for; the
-- counting statement that follows sees the other claimer's commit.
-- lane_pauses is only read (a rate limit pausing a lane takes no lane lock):
-- the counting statement sees a pause committed before it starts, and one
-- committed later holds from the next claim on.
create or replace function claim_jobs(
    p_worker text,
    p_limit integer,
    p_kinds text[] default null,
    p_agents text[] default null,
    p_now timestamptz default now(),
    p_lease_secs integer default null,
    p_start boolean default false
)
returns table (
    id uuid, kind text, agent text, prompt text, payload jsonb,
    max_turns integer, resume_session_id text, attempts integer,
    claim_expires_at timestamptz, run_id uuid,
    reply text, budget_usd numeric, budget_tokens bigint
)
language plpgsql
-- On PostgreSQL 15, a claim of 1,000 after one-job claims on a young table
-- scans job against the claimed ids (18 probes the key on its own):
-- tests/sql/test_batch_plans.py, test_without_enable_seqscan_a_claim_….
set enable_seqscan = off
-- The claim's cost estimate grows with the backlog and passes jit_above_cost
-- (136,000 at 300,000 pending jobs): on PostgreSQL 15 compiling took 135-220
-- ms of each claim, which takes 8-30 ms without (test_claim_plan.py).
set jit = off
-- The generic plans look dearer than custom ones (the limit and the lanes'
-- free slots unknown to them; in _round_robin_pick, the due test made on the
-- rows taken rather than in the index), so PL/pgSQL, left to itself, planned
-- both statements again on every claim: the main one 0.33 ms of a 1.0 ms
-- claim of one job (PostgreSQL 18), the round-robin pick 0.7-0.9 ms instead
-- of 0.07-0.09 (15 and 18). Their shapes do not depend on the values (the
-- plan tests hold them), so one generic plan each is the right one
-- (docs/performance.md, "Planner settings on functions"). A SET clause holds
-- for the functions a function calls, so _round_robin_pick needs none.
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
declare
    v_lease interval;
    v_owners_over text[] := '{}';
begin
    perform _check_claim('claim_jobs', p_worker, p_limit);
    v_lease := make_interval(secs => coalesce(p_lease_secs, _setting_int('lease_secs')));
    perform set_config('ceaseless.actor', p_worker, true);

    perform 1
    from agents a
    where a.enabled
      and (p_agents is null or a.name = any (p_agents))
      and not exists (select from lane_pauses p
                      where p.agent = a.name and p.paused_until > p_now)
    order by a.name
    for no key update;

    -- Owners over their spend budget (owner_budgets, 12_lanes.sql):
    -- their jobs wait, in every lane. Summed only when some owner has a
    -- budget, so a database without one reads nothing more than before.
    if exists (select from owner_budgets) then
        v_owners_over := _owners_over_budget(p_now);
    end if;

    return query
    -- The lanes with free slots (_lane_capacity, 12_lanes.sql: the one rule
    -- for what a lane may start, which governor_usage and explain_job read
    -- too), and what opening their runs needs.
    with lane as (
        select l.agent as name, l.free, a.adapter, a.model, a.fairness
        from _lane_capacity(p_now, p_agents) l
        join agents a on a.name = l.agent
        where l.free > 0
    ),
    -- Each lane walks its own slice of the pending jobs and stops after its
    -- free slots, so a full lane with a deep backlog costs nothing and never
    -- hides another lane's work. A fifo lane walks job_claimable_idx, highest
    -- priority first, then the job due first; a round_robin lane takes turns
    -- across owners and their fairness keys (_round_robin_pick), each turn
    -- one job. `turn` is the round a job was picked in (1 in a fifo lane).
    picked as (
        select c.id
        from lane
        cross join lateral (
            select f.id, 1 as turn, f.priority, f.run_after, f.created_at
            from (
                select j.id, j.priority, j.run_after, j.created_at
                from job j
                where lane.fairness = 'fifo'
                  and j.agent = lane.name
                  and j.state = 'pending'
                  and j.run_after <= p_now
                  and (p_kinds is null or j.kind = any (p_kinds))
                  and (cardinality(v_owners_over) = 0 or j.user_id <> all (v_owners_over))
                order by j.priority desc, j.run_after
                limit least(lane.free, p_limit)
                for update skip locked
            ) f
            union all
            select r.id, r.turn, r.priority, r.run_after, r.created_at
            from _round_robin_pick(lane.name, least(lane.free, p_limit)::integer, p_now, p_kinds,
                                   v_owners_over) r
            where lane.fairness = 'round_robin'
        ) c
        -- Across lanes, every lane's first round before any lane's second;
        -- then higher priority, then oldest due work first, up to the
        -- caller's capacity.
        order by c.turn, c.priority desc, c.run_after, c.created_at
        limit p_limit
    ),
    claimed as (
        update job j
        set state = case when p_start then 'running' else 'claimed' end,
            claimed_by = p_worker,
            claim_expires_at = p_now + v_lease,
            -- stuck_jobs measures "claimed but never started" from here;
            -- claim_expires_at cannot tell, heartbeats move it.
            claimed_at = p_now,
            attempts = j.attempts + 1,
            updated_at = p_now
        -- An array, not a join: the planner cannot know `picked` is tiny, and
        -- with a join it may hash it against a scan of the whole table.
        where j.id = any (array(select picked.id from picked))
        returning j.id, j.kind, j.agent, j.prompt, j.payload, j.max_turns,
                  j.resume_session_id, j.attempts, j.claim_expires_at,
                  j.reply, j.replied_by, j.max_cost_usd, j.max_tokens
    ),
    -- Each run records the reply it carries (reply_job); the job keeps it
    -- until a run ends with a verdict (finish_runs), so a run cut short
    -- carries it again.
    opened as (
        insert into agent_run (job_id, agent, adapter, model, worker, attempt, started_at,
                               reply, replied_by)
        select c.id, c.agent, lane.adapter, lane.model, p_worker, c.attempts, p_now,
               c.reply, c.replied_by
        from claimed c
        join lane on lane.name = c.agent
        where p_start
        returning agent_run.job_id, agent_run.id
    )
    -- A reply is the whole prompt of a run that resumes the agent's session
    -- (the session holds the task); with no session to resume, the run starts
    -- over with the job's prompt and the reply after it. What is left of the
    -- job's spend ceilings (_job_budget_left) is read only for a job that has
    -- one: the listener passes it to the agent (--max-budget-usd) or stops the
    -- agent when its streamed usage passes it.
    select c.id, c.kind, c.agent,
           case when c.reply is null or c.resume_session_id is not null then c.prompt
                else format(E'%s\n\n## Reply from %s\n\n%s', c.prompt, c.replied_by, c.reply)
           end,
           c.payload, c.max_turns, c.resume_session_id,
           c.attempts, c.claim_expires_at, o.id,
           case when c.resume_session_id is not null then c.reply end,
           b.usd, b.tokens
    from claimed c
    left join opened o on o.job_id = c.id
    -- Only a job that has a ceiling calls _job_budget_left (a call for every
    -- claimed job, even one that returns at once, cost 5 % of a fifo claim).
    -- Kept whole (OFFSET 0), the WHERE names the claimed row alone and gates
    -- the call; pulled up into the join, it would filter after the call.
    -- Here rather than in a CTE of its own, whose third scan of `claimed`
    -- and hash join cost 2 % of a fifo claim of ten.
    left join lateral (
        select l.usd, l.tokens
        from _job_budget_left(c.id, c.max_cost_usd, c.max_tokens) l
        where c.max_cost_usd is not null or c.max_tokens is not null
        offset 0
    ) b on true;
end;
$$;

comment on function claim_jobs(text, integer, text[], text[], timestamptz, integer, boolean) is
    'Claim up to p_limit due pending jobs for listener p_worker in each lane''s order (fifo: '
    'highest priority, then due first; round_robin: owners and their fairness keys in turn), '
    'admitting each '
    'through its lane''s governor (max_concurrent, window_budget, window_cost_usd, '
    'window_tokens, lane_pauses) and its owner''s spend budget (owner_budgets) atomically; '
    'with p_start, open their agent runs too and return run_id.';

-- Extend the leases p_worker holds on p_job_ids. One row per id: held (still
-- p_worker's), and renewed (its lease now ends p_lease_secs after p_now).
-- The listener stops the agent of a job no longer held at once, and fences
-- the others locally: it counts each lease from just before the call that
-- last renewed it, so it knows a lower bound of when the lease ends without
-- trusting its clock against the server's, and stops an agent whose lease it
-- could not renew before that moment (listener/daemon/producer/leases.py).
--
-- Only leases past half their life are pushed. A listener draining thousands
-- of short jobs holds thousands of fresh leases at every heartbeat; rewriting
-- them all (claim_expires_at is indexed, so never a HOT update) cost more
-- than the jobs themselves, and a lease with more than half its life left
-- cannot expire before the next heartbeat anyway.
create or replace function extend_leases(
    p_worker text,
    p_job_ids uuid[],
    p_now timestamptz default now(),
    p_lease_secs integer default null
)
returns table (job_id uuid, held boolean, renewed boolean)
language plpgsql
as $$
declare
    v_lease interval := make_interval(secs => coalesce(p_lease_secs, _setting_int('lease_secs')));
begin
    return query
    with asked as (
        select distinct x.id from unnest(p_job_ids) as x(id)
    ),
    held as (
        select j.id, j.claim_expires_at
        -- Each id probed by key, fenced (offset 0). Neither a join nor
        -- `j.id = any (p_job_ids)`: on a young table, or on the plan kept
        -- from one-lease heartbeats, the planner sizes the worker's leases
        -- at one row, and joined it loops over the ids for each of them, or
        -- scans job against the whole array; quadratic in the heartbeat.
        from asked x
        cross join lateral (
            select j.id, j.claim_expires_at
            from job j
            where j.id = x.id
              and j.claimed_by = p_worker
              and j.state in ('claimed', 'running')
            offset 0
        ) j
    ),
    -- The leases past half their life, locked by key and rechecked on the
    -- locked row: a job cancelled or expired since `held` was read is not
    -- extended. Locked here rather than rechecked by the update: the
    -- recheck would offer the planner the worker's leases, sized at one row,
    -- to loop over.
    due as (
        select j.id
        from held h
        cross join lateral (
            select j.id
            from job j
            where j.id = h.id
              and j.claimed_by = p_worker
              and j.state in ('claimed', 'running')
            offset 0
            for no key update
        ) j
        where h.claim_expires_at < p_now + v_lease / 2
    ),
    extended as (
        update job j
        set claim_expires_at = p_now + v_lease
        from due d
        where j.id = d.id
        returning j.id
    )
    -- Set operations, not joins of the CTEs to one another: the planner
    -- cannot size them, and a join planned for one row loops, which is
    -- quadratic in the batch (see finish_runs).
    select h.id, true, false
    from held h
    where h.claim_expires_at >= p_now + v_lease / 2
    union all
    select e.id, true, true
    from extended e
    union all
    select lost.id, false, false
    from (select x.id from asked x
          except
          (select h.id from held h where h.claim_expires_at >= p_now + v_lease / 2
           union all
           select e.id from extended e)) lost;
end;
$$;

comment on function extend_leases(text, uuid[], timestamptz, integer) is
    'Heartbeat: push the lease of every job p_worker still holds; one row per id says whether '
    'it is still held and whether its lease was renewed now.';

-- Return every job whose lease has passed to the pool (or abandon it when its
-- attempts are used up), finishing its open agent_run as lease_expired.
--
-- Locks: the expired jobs, FOR UPDATE SKIP LOCKED, so concurrent sweeps by
-- several listeners split the work instead of queueing on it, and the open
-- run of each job it locked (FOR NO KEY UPDATE); then, as every
-- path that ends jobs, their routines in id order (44_routine_outcomes.sql).
create or replace function expire_leases(p_now timestamptz default now())
returns integer
language plpgsql
as $$
declare
    v_count integer;
    v_candidates uuid[];
begin
    select array_agg(j.id) into v_candidates
    from job j
    where j.state in ('claimed', 'running') and j.claim_expires_at < p_now;
    if v_candidates is null then
        return 0;
    end if;
    with expired as (
        -- Each candidate probed by key, fenced (offset 0), and its open run
        -- locked with it (agent_run_one_open_idx): on a young table the
        -- planner sizes the expired jobs and the open runs at a row or two,
        -- and joined them in a loop over every open run for each job,
        -- quadratic in the sweep. Driven from the candidates' ids, and with
        -- both rows locked here, the updates below join by key alone and
        -- need no recheck that offers the planner another way in.
        -- The job goes where a run ending lease_expired sends it
        -- (_job_state_after): pending while attempts are left, else abandoned.
        select j.id, j.claimed_by, r.id as run_id, r.session_id,
               _job_state_after('lease_expired', j.attempts,
                                coalesce(j.max_attempts,
                                         (select a.max_attempts from agents a
                                          where a.name = j.agent))) as state
        from unnest(v_candidates) as c (id)
        cross join lateral (
            select j.id, j.claimed_by, j.attempts, j.max_attempts, j.agent
            from job j
            where j.id = c.id
              and j.state in ('claimed', 'running')
              and j.claim_expires_at < p_now
            offset 0
            for update of j skip locked
        ) j
        left join lateral (
            select r.id, r.session_id
            from agent_run r
            where r.job_id = j.id and r.finished_at is null
            offset 0
            for no key update
        ) r on true
    ),
    -- The run of a vanished listener must still end with an outcome
    -- (finished_has_outcome), or the governor counts it forever.
    runs as (
        update agent_run r
        set outcome = 'lease_expired',
            finished_at = p_now,
            ended_by = 'lease_expiry',
            error = format('lease expired: listener %s stopped extending it', e.claimed_by)
        from expired e
        where r.id = e.run_id
        returning r.id
    ),
    moved as (
        update job j
        set state = e.state,
            claimed_by = case when e.state = 'pending' then null else j.claimed_by end,
            claim_expires_at = case when e.state = 'pending' then null else j.claim_expires_at end,
            claimed_at = case when e.state = 'pending' then null else j.claimed_at end,
            finished_at = case when e.state = 'pending' then null else p_now end,
            run_after = p_now,
            -- The vanished listener's agent may have got far: the next
            -- attempt resumes its session (noted at its start) rather than
            -- starting over.
            resume_session_id = coalesce(_resumable(e.session_id), j.resume_session_id),
            last_error = format('lease expired (held by %s, attempt %s)', e.claimed_by, j.attempts),
            updated_at = p_now
        from expired e
        where j.id = e.id
        returning j.id
    )
    select count(*) into v_count from moved;
    return v_count;
end;
$$;

comment on function expire_leases(timestamptz) is
    'Return jobs with passed leases to pending (or abandoned after max attempts) and finish '
    'their open runs as lease_expired. Safe to call from every listener at once.';

-- End the current attempt of live jobs that no agent gave a verdict on, with
-- a reason: the one way a job stops without finish_runs or lease expiry.
-- Who ends it says what becomes of the job:
--
-- | p_ended_by | the job                                                      |
-- |------------|--------------------------------------------------------------|
-- | cancel     | cancelled, finished now (a blocked job too: it waits for a   |
-- |            | person, who may say no)                                      |
-- | release    | pending again, unclaimed, due now, its attempt refunded (the |
-- |            | job did not fail, its listener left), the interrupted        |
-- |            | session kept for the next attempt                            |
--
-- Either way its open agent run is finished as cancelled, with p_ended_by
-- and the reason, and the listener running the agent stops it when the
-- job's NOTIFY (or its next heartbeat) says the job is no longer held. Other
-- jobs (finished, or blocked when releasing) are left as they are. Returns
-- how many jobs it ended.
--
-- Locks: the jobs, FOR UPDATE, waiting for them. A caller that
-- must not wait (topology cancellation, which holds a run while another
-- statement may hold the run's jobs) locks them first with SKIP LOCKED and
-- passes only those.
create or replace function _end_jobs(p_job_ids uuid[], p_ended_by text, p_reason text,
                                     p_now timestamptz)
returns integer
language plpgsql
as $$
declare
    v_release constant boolean := p_ended_by = 'release';
    v_count integer;
begin
    if p_ended_by not in ('cancel', 'release') then
        raise exception '_end_jobs: ended_by must be cancel or release; got %', p_ended_by;
    end if;
    with live as (
        select j.id,
               (select r.session_id from agent_run r
                where r.job_id = j.id and r.finished_at is null) as session_id
        from unnest(p_job_ids) as u (id)
        -- Each id probed by key, fenced (offset 0): planned on a young
        -- table, a join or `id = any (…)` reads the whole job table.
        cross join lateral (
            select j.id from job j
            where j.id = u.id
              and (j.state in ('pending', 'claimed', 'running')
                   or (j.state = 'blocked' and not v_release))
            offset 0
            for update
        ) j
    ),
    runs as (
        update agent_run r
        set outcome = 'cancelled', finished_at = p_now, ended_by = p_ended_by, error = p_reason
        from live l
        where r.job_id = l.id and r.finished_at is null
        returning r.id
    ),
    moved as (
        update job j
        set state = case when v_release then 'pending' else 'cancelled' end,
            finished_at = case when v_release then j.finished_at else p_now end,
            claimed_by = case when v_release then null else j.claimed_by end,
            claim_expires_at = case when v_release then null else j.claim_expires_at end,
            claimed_at = case when v_release then null else j.claimed_at end,
            attempts = case when v_release then greatest(j.attempts - 1, 0) else j.attempts end,
            run_after = case when v_release then p_now else j.run_after end,
            resume_session_id = case when v_release
                                     then coalesce(_resumable(l.session_id), j.resume_session_id)
                                     else j.resume_session_id end,
            updated_at = p_now,
            last_error = p_reason
        from live l
        where j.id = l.id
        returning j.id
    )
    select count(*) into v_count from moved;
    return v_count;
end;
$$;

comment on function _end_jobs(uuid[], text, text, timestamptz) is
    'End the current attempt of these live jobs with a reason, their open runs finished as '
    'cancelled: ended_by cancel cancels the job, release returns it to pending with its attempt '
    'refunded. Returns how many it ended.';

-- Give back jobs p_worker holds without a verdict on them: a listener shutting
-- down releases what it could not finish (_end_jobs, release).
create or replace function release_jobs(
    p_worker text,
    p_job_ids uuid[],
    p_now timestamptz default now()
)
returns integer
language plpgsql
as $$
begin
    perform set_config('ceaseless.actor', p_worker, true);
    -- Locked here, so a job another listener took over after its lease
    -- expired is re-checked and left alone.
    return _end_jobs(array(select j.id from job j
                           where j.id = any (p_job_ids)
                             and j.claimed_by = p_worker
                             and j.state in ('claimed', 'running')
                           for update),
                     'release',
                     format('released: listener %s shut down before the agent finished', p_worker),
                     p_now);
end;
$$;

comment on function release_jobs(text, uuid[], timestamptz) is
    'Shutdown: return jobs held by p_worker to pending, attempt refunded, open runs finished as cancelled.';

-- The job p_job_id, locked, when the caller may act on it and on everything
-- it points at: the routine of its run, its topology run, its parent job.
-- cancel_job and retry_job end or revive a job, and through it close its
-- routine run (notifying the routine's owner, counting its failures) or fire
-- its routine again: the job being the caller's is not enough. The engine
-- writes these references only to rows of the job's own owner; a job that
-- names another owner's row is as unknown as one that does not exist.
--
-- Locks: the job, FOR UPDATE. Raises: CE404 naming p_verb.
create or replace function _job_for(p_verb text, p_job_id uuid)
returns job
language plpgsql
as $$
declare
    v_job job;
begin
    select * into v_job from job j where j.id = p_job_id and _acts_for(j.user_id) for update;
    if not found
       or (v_job.routine_run_id is not null
           and not exists (select from routine_runs rr
                           join routines r on r.id = rr.routine_id
                           where rr.id = v_job.routine_run_id and _acts_for(r.user_id)))
       or (v_job.topology_run_id is not null
           and not exists (select from topology_runs t
                           where t.id = v_job.topology_run_id and _acts_for(t.user_id)))
       or (v_job.parent_job_id is not null
           and not exists (select from job p
                           where p.id = v_job.parent_job_id and _acts_for(p.user_id))) then
        raise exception '%: no job with id %', p_verb, p_job_id using errcode = 'CE404';
    end if;
    return v_job;
end;
$$;

comment on function _job_for(text, uuid) is
    'The job p_job_id locked FOR UPDATE, when the caller acts for its owner and for the owners of '
    'the routine run, topology run and parent job it names (_acts_for); else CE404 naming p_verb.';

-- Cancel a job. A pending job ends at once; a claimed or running one ends
-- now in the database, its open run finished as cancelled, and the listener
-- running it stops the process when the NOTIFY (or its next heartbeat)
-- tells it the job is no longer held. A blocked job (waiting for a person)
-- can be cancelled too: it is how a person says no to a question, and it
-- closes the routine run or fails the topology node that waits for it.
--
-- Raises: CE404 unknown job (or another owner's, or one naming another
-- owner's run or parent); CE409 the job already ended.
create or replace function cancel_job(p_job_id uuid, p_now timestamptz default now())
returns void
language plpgsql
as $$
declare
    -- Security definer (99_access.sql), so the owner check is here: a user
    -- role may cancel its own jobs, and someone else's is as unknown as one
    -- that does not exist; so is the routine run or topology run its end
    -- would close.
    v_job constant job := _job_for('cancel_job', p_job_id);
begin
    if v_job.state not in ('pending', 'claimed', 'running', 'blocked') then
        raise exception 'cancel_job: job % is already %; only pending, claimed, running or '
                        'blocked jobs can be cancelled', p_job_id, v_job.state
            using errcode = 'CE409', hint = 'Use retry_job to run a finished job again.';
    end if;

    perform _end_jobs(array[p_job_id], 'cancel', 'cancelled by ' || _actor(), p_now);
end;
$$;

comment on function cancel_job(uuid, timestamptz) is
    'Cancel a pending, claimed, running or blocked job; a running agent is stopped by its '
    'listener. Raises CE404 (unknown) or CE409 (already finished).';

-- What disabling an agent does to its pending jobs, of every kind: a job that
-- holds a run ends, and one that holds nothing waits.
--
-- | pending job                               | when its agent is disabled  |
-- |-------------------------------------------|-----------------------------|
-- | a routine's (routine_run_id)              | cancelled: its run closes   |
-- |                                           | as failed, naming the agent |
-- | a topology node's (topology_run_id)       | cancelled: its node and run |
-- |                                           | fail, naming the agent      |
-- | a plain or forge job                      | waits for the agent to be   |
-- |                                           | enabled again               |
--
-- A routine's or node's job would otherwise wait for a lane nobody claims
-- from while its run held its routine's max_concurrent and a global-cap slot,
-- or its loop's one live iteration, forever. A plain or forge job holds
-- nothing but its own place (a forge job, its issue's one live job), so it
-- keeps it, and runs once the agent is back. Claimed and running jobs finish
-- as usual; a node that becomes ready later fails when it would be enqueued
-- (_enqueue_topology_node). Deleting an agent that jobs name is refused by
-- their foreign keys, so disabling is the one way to strand a job.
create or replace function _tg_agents_disabled()
returns trigger
language plpgsql
as $$
begin
    perform _end_jobs(array(select j.id from job j
                            where j.agent = new.name and j.state = 'pending'
                              and (j.routine_run_id is not null
                                   or j.topology_run_id is not null)
                            order by j.id
                            for update),
                      'cancel', format('agent %s was disabled', new.name), now());
    return null;
end;
$$;

comment on function _tg_agents_disabled() is
    'After an agent is disabled: cancel its pending routine and topology node jobs (their runs '
    'fail, naming the agent); its plain and forge jobs wait for it.';

create or replace trigger agents_disabled
    after update of enabled on agents
    for each row
    when (old.enabled and not new.enabled)
    execute function _tg_agents_disabled();

-- Run a finished job again from scratch: back to pending with a full attempt
-- budget. The live-job unique indexes still apply, so retrying a job whose
-- issue or dedup key already has a live job fails with that index's name.
--
-- A routine's job is retried as a fire of its routine, through the one
-- firing path (42_routine_firing.sql) like a manual run: a new routine run
-- adopts the job, so its result reaches routine_runs, the routine and its
-- notifications, and the routine's max_concurrent and the global cap hold;
-- the cooldown does not apply, as for any manual run. A refused retry
-- changes nothing and raises why.
--
-- Locks: the job row, then fire admission (routine jobs only; _admit_fires).
-- Raises: CE404 unknown job (or another owner's, or one naming another
-- owner's run or parent); CE409 the job is still live; for a routine's
-- job, CE410 its routine or agent is disabled, CE412 the routine's
-- max_concurrent or CE415 the global cap is reached.
create or replace function retry_job(p_job_id uuid, p_now timestamptz default now())
returns void
language plpgsql
as $$
declare
    -- The owner checks, as in cancel_job: the job, and the routine it would
    -- fire again.
    v_job constant job := _job_for('retry_job', p_job_id);
    v_routine_id uuid;
    v_run_id uuid;
    v_skip_reason text;
begin
    if v_job.state in ('pending', 'claimed', 'running') then
        raise exception 'retry_job: job % is still %; only finished jobs can be retried', p_job_id, v_job.state
            using errcode = 'CE409', hint = 'Use cancel_job first to stop it.';
    end if;

    -- A routine's ended job fires its routine again, a new run; a blocked
    -- one's run is still open, waiting for it (44_routine_outcomes.sql), so
    -- the job goes on in that run.
    select rr.routine_id into v_routine_id
    from routine_runs rr
    where rr.id = v_job.routine_run_id and rr.status <> 'running';
    if v_routine_id is not null then
        select f.run_id, f.skip_reason into v_run_id, v_skip_reason
        from _fire_routines(array[v_routine_id], 'manual', p_now,
                            array[format('retry of job %s', p_job_id)], null, null, true,
                            array[p_job_id]) f;
        case v_skip_reason
            when 'disabled', 'agent_disabled' then
                raise exception 'retry_job: the routine of job % cannot run: %', p_job_id,
                    replace(v_skip_reason, '_', ' ') using errcode = 'CE410';
            when 'concurrency' then
                raise exception 'retry_job: the routine of job % is at its max_concurrent runs',
                    p_job_id using errcode = 'CE412';
            when 'global_cap' then
                raise exception 'retry_job: the global cap of running routine runs '
                                '(routine_max_running) is reached' using errcode = 'CE415';
            else
                null;
        end case;
    end if;

    update job
    set state = 'pending', claimed_by = null, claim_expires_at = null, claimed_at = null,
        finished_at = null,
        attempts = 0, run_after = p_now, updated_at = p_now,
        routine_run_id = coalesce(v_run_id, routine_run_id)
    where id = p_job_id;
end;
$$;

comment on function retry_job(uuid, timestamptz) is
    'Return a finished job to pending with its attempts reset; a routine''s job through its '
    'routine''s guardrails, as a new routine run (a blocked one goes on in its open run). Raises CE404 (unknown), CE409 (still live), '
    'CE410/CE412/CE415 (the routine may not run now).';

-- Who is sending a reply or raising a ceiling: the login role, and for a
-- listener's session the name its transaction set (the dashboard's
-- `<worker id> dashboard:<user>`), the same rule audit_log.worker follows; a
-- user role cannot name anyone but itself.
create or replace function _replier()
returns text
language sql stable
as $$
    select concat_ws(' ', _actor(),
                     case when pg_has_role(session_user, 'ceaseless_listener', 'usage')
                          then nullif(current_setting('ceaseless.actor', true), '') end);
$$;

comment on function _replier() is
    'Who sends a reply: session_user, and for a listener''s session its ceaseless.actor '
    '(e.g. `w1 dashboard:alice`).';

-- Send a blocked job back to pending with p_reply waiting for its next run,
-- which resumes the agent's session: the session the job already holds, else
-- the one its last run reported (a run blocked on needs_human, a spend
-- ceiling or a login keeps its session on the run). The attempt budget is
-- whole again: the reply starts a new turn of the conversation. Audited as
-- `reply` with who sent it; the job's own UPDATE audits blocked → pending.
--
-- The caller holds the job (_job_for) and has checked its state.
create or replace function _resume_blocked_job(p_job job, p_reply text, p_action text,
                                               p_now timestamptz)
returns void
language plpgsql
as $$
declare
    v_who constant text := _replier();
    v_session text;
begin
    select _resumable(r.session_id) into v_session
    from agent_run r
    where r.job_id = p_job.id
    order by r.started_at desc
    limit 1;
    update job
    set state = 'pending', claimed_by = null, claim_expires_at = null, claimed_at = null,
        finished_at = null, attempts = 0, run_after = p_now, updated_at = p_now,
        resume_session_id = coalesce(v_session, resume_session_id),
        reply = p_reply, replied_by = v_who, replied_at = p_now
    where id = p_job.id;
    insert into audit_log (entity, entity_id, action, old_state, new_state, detail)
    values ('job', p_job.id, p_action, p_job.state, 'pending',
            jsonb_build_object('replied_by', v_who,
                               'resumes_session', coalesce(v_session, p_job.resume_session_id),
                               'reply', left(p_reply, 2000)));
end;
$$;

comment on function _resume_blocked_job(job, text, text, timestamptz) is
    'Return a blocked job to pending, its attempts whole, with p_reply waiting for the run that '
    'resumes its session (the job''s, else its last run''s); audited as p_action with who sent it.';

-- Why a blocked job cannot go on, or NULL when it can: a job whose spend has
-- reached its ceiling would stop again at once. A node's job is no
-- exception: its node waits, blocked, and its run with it, until the job
-- goes on or ends (51_topology_runs.sql).
create or replace function _blocked_job_problem(p_verb text, p_job job)
returns text
language plpgsql stable
as $$
declare
    v_left record;
begin
    if p_job.state <> 'blocked' then
        return format('%s: job %s is %s; only a blocked job (waiting for a person) can be '
                      'resumed', p_verb, p_job.id, p_job.state);
    end if;
    select * into v_left from _job_budget_left(p_job.id, p_job.max_cost_usd, p_job.max_tokens);
    if v_left.usd <= 0 then
        return format('%s: job %s has spent its whole max_cost_usd (%s USD): raise it first, '
                      'e.g. select ceaseless.raise_job_budget(%L, %s);', p_verb, p_job.id,
                      p_job.max_cost_usd, p_job.id, p_job.max_cost_usd * 2);
    end if;
    if v_left.tokens <= 0 then
        return format('%s: job %s has spent its whole max_tokens (%s): raise it first, e.g. '
                      'select ceaseless.raise_job_budget(%L, null, %s);', p_verb, p_job.id,
                      p_job.max_tokens, p_job.id, p_job.max_tokens * 2);
    end if;
    return null;
end;
$$;

comment on function _blocked_job_problem(text, job) is
    'Why a job cannot be resumed by a reply or a raised ceiling (not blocked, its ceiling '
    'spent), or NULL.';

-- Reply to a blocked job (its agent asked for a human, spent its ceiling, or
-- could not log in): the job goes back to pending and its next run resumes
-- the agent's session with p_text as the whole prompt. A job with no session
-- to resume (its agent never reported one, as a CLI that could not log in)
-- starts over with its prompt and the reply after it, rather than being
-- refused: the reply is the person's answer either way, and refusing would
-- leave them nothing to do but copy it into a new job.
--
-- Locks: the job (_job_for). Raises: CE404 unknown job (or another owner's);
-- CE409 not blocked (naming its state) or its ceiling spent; CE422 a blank
-- or over-long reply.
create or replace function reply_job(p_job_id uuid, p_text text, p_now timestamptz default now())
returns void
language plpgsql
as $$
declare
    -- Security definer (99_access.sql): the owner check of cancel_job.
    v_job constant job := _job_for('reply_job', p_job_id);
    v_problem text;
begin
    if _is_blank(p_text) then
        perform _invalid_value('reply_job.text', 'a reply needs text that is not blank',
                               to_jsonb(p_text));
    end if;
    if char_length(p_text) > 16000 then
        perform _invalid_value('reply_job.text',
            format('must be at most 16000 characters, this one has %s', char_length(p_text)),
            to_jsonb(left(p_text, 40) || '…'));
    end if;
    v_problem := _blocked_job_problem('reply_job', v_job);
    if v_problem is not null then
        raise exception '%', v_problem using errcode = 'CE409';
    end if;
    perform _resume_blocked_job(v_job, p_text, 'reply', p_now);
end;
$$;

comment on function reply_job(uuid, text, timestamptz) is
    'Reply to a blocked job: back to pending, its next run resumes the agent''s session with the '
    'reply as the prompt (with no session, it starts over with the reply after its prompt). '
    'Raises CE404 (unknown), CE409 (not blocked, ceiling spent), CE422 (blank or over 16000 '
    'characters).';

-- Raise a job's spend ceilings (p_usd: max_cost_usd; p_tokens: max_tokens;
-- NULL leaves one as it is). A job blocked on its spend then goes back to
-- pending and resumes its session, with the reply waiting, or else a prompt
-- to continue. A ceiling at or below what the job has already spent is
-- refused: it would block the job again at once.
--
-- Locks: the job (_job_for). Raises: CE404 unknown job (or another owner's);
-- CE409 a job that will not run again (delivered, failed, …); CE422 no
-- ceiling given, or one not above what was spent.
create or replace function raise_job_budget(
    p_job_id uuid,
    p_usd numeric,
    p_tokens bigint default null,
    p_now timestamptz default now()
)
returns void
language plpgsql
as $$
declare
    v_job job := _job_for('raise_job_budget', p_job_id);
    v_spent record;
    v_outcome text;
begin
    if p_usd is null and p_tokens is null then
        perform _invalid_value('raise_job_budget.usd',
                               'give a new max_cost_usd (or p_tokens, a new max_tokens)', null);
    end if;
    if v_job.state not in ('pending', 'claimed', 'running', 'blocked') then
        raise exception 'raise_job_budget: job % is %; a ceiling only holds a job that will run '
                        'again', p_job_id, v_job.state
            using errcode = 'CE409', hint = 'Use retry_job to run a finished job again.';
    end if;
    select coalesce(sum(r.cost_usd), 0) as usd,
           coalesce(sum(coalesce(r.tokens_in, 0) + coalesce(r.tokens_out, 0)), 0) as tokens
    into v_spent
    from agent_run r where r.job_id = p_job_id;
    -- NaN compares above every number: it would pass both checks below and
    -- the column's, and leave the job with no ceiling at all.
    if p_usd is not null and (p_usd <= v_spent.usd or p_usd = 'NaN') then
        perform _invalid_value('raise_job_budget.usd',
            format('must be above what job %s has spent (%s USD)', p_job_id, v_spent.usd),
            to_jsonb(p_usd));
    end if;
    if p_tokens is not null and p_tokens <= v_spent.tokens then
        perform _invalid_value('raise_job_budget.tokens',
            format('must be above what job %s has spent (%s tokens)', p_job_id, v_spent.tokens),
            to_jsonb(p_tokens));
    end if;
    update job
    set max_cost_usd = coalesce(p_usd, max_cost_usd),
        max_tokens = coalesce(p_tokens, max_tokens),
        updated_at = p_now
    where id = p_job_id
    returning * into v_job;
    insert into audit_log (entity, entity_id, action, old_state, new_state, detail)
    values ('job', p_job_id, 'raise_budget', v_job.state, v_job.state,
            jsonb_strip_nulls(jsonb_build_object('by', _replier(), 'max_cost_usd', p_usd,
                                                 'max_tokens', p_tokens)));

    select r.outcome into v_outcome
    from agent_run r where r.job_id = p_job_id
    order by r.started_at desc limit 1;
    if v_job.state = 'blocked' and v_outcome = 'budget_exhausted'
       and _blocked_job_problem('raise_job_budget', v_job) is null then
        perform _resume_blocked_job(
            v_job,
            coalesce(v_job.reply,
                     format('Your spend ceiling was raised (%s). Continue the task where you '
                            'left off.',
                            concat_ws(', ', p_usd || ' USD', p_tokens || ' tokens'))),
            'reply', p_now);
    end if;
end;
$$;

comment on function raise_job_budget(uuid, numeric, bigint, timestamptz) is
    'Raise a job''s max_cost_usd (and/or max_tokens); a job blocked on its spend resumes its '
    'session. Raises CE404 (unknown), CE409 (the job will not run again), CE422 (no ceiling, or '
    'one not above what was spent).';

-- Of p_ids, the jobs that will not run again: delivered, failed, abandoned or
-- cancelled. A listener gives each job a working directory of its own and
-- keeps it across the job's attempts (listener/daemon/producer/workdirs.py), so a
-- retry or a resumed session finds what the previous attempt left; it asks
-- here, for the directories it finds on disk and for the jobs whose results it
-- has just recorded, which may go. A failed job that retry_job brings back
-- later starts in a fresh directory.
create or replace function ended_jobs(p_ids uuid[])
returns setof uuid
language sql
stable
as $$
    -- A probe by key per asked id (the batch is the outer side).
    select j.id
    from unnest(p_ids) as asked (id)
    join job j on j.id = asked.id
    where j.state in ('delivered', 'failed', 'abandoned', 'cancelled');
$$;

comment on function ended_jobs(uuid[]) is
    'Of p_ids, the jobs of this database that will not run again (delivered, failed, '
    'abandoned, cancelled): listeners remove their working directories.';
