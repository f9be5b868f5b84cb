-- Routines: outcomes flowing back. A run's job ended: close the run, update
-- the routine's counters and state, queue notifications; keep the running
-- count, audit and announce every run's start and end.
--
-- Called by: PostgreSQL (triggers on job and routine_runs), whoever ends the
-- jobs: finish_runs, expire_leases, release_jobs, cancel_job, an agent's
-- disabling (agents_disabled), or a plain UPDATE.
-- Guarantees: a run closes exactly once, at its job's finished_at, in the
-- statement that ends its job; a blocked job (its agent asks for a person,
-- spent its ceiling, could not log in) does not end its run, which stays
-- running, holding its place under max_concurrent and the overlap policy,
-- until a reply, a raised ceiling or retry_job sends the job on in it, or
-- cancel_job ends it; the routines of a statement's runs are locked
-- together, in id order, after the statement locked its jobs (the lock order
-- of 41_fire_admission.sql), so two statements never wait for each other's
-- routines in opposite orders, and each routine is updated once per
-- statement; the sum of routine_run_shards equals the running runs; NOTIFY
-- ceaseless_run once per status a statement moved runs to (never for a
-- statement that moved none).

-- Routine runs whose jobs ended: set each run's status from its job and its
-- last agent reply, update each routine's counters and state once, and queue
-- the notifications their notify_on_* flags ask for. Set-based: a finish
-- batch of a thousand runs of six routines is three statements, and updates
-- each routine once, not a thousand times.
--
-- lightweight: reply exactly ROUTINE_OK → ok; another non-empty reply →
-- attention, the reply as summary; anything else → failed. full_job:
-- delivered → ok; anything else → failed. A run ends at its job's
-- finished_at; of several runs of one routine, the latest to end gives the
-- routine its state.
--
-- p_run_ids: runs whose jobs may have ended; a run not running, or whose
-- job has not finished or waits blocked for a person, is left alone, so a
-- run closes exactly once, when its job is done with.
create or replace function _close_routine_runs(p_run_ids uuid[])
returns void
language plpgsql
-- Every custom plan of the close looks cheaper than the generic one, so
-- PL/pgSQL, left to itself, planned it again at every finish: 0.5 ms of a
-- 0.8 ms close of one run (PG 15). Its shape does not depend on the ids
-- (tests/sql/test_batch_plans.py; docs/performance.md, "Planner settings
-- on functions").
set plan_cache_mode = force_generic_plan
-- A setting holds for the functions a function calls, and finish_runs, which
-- ends most routine jobs, turns sequential scans off for its own statement:
-- inherited here, it had the planner, on a young table's statistics, walk
-- the whole primary key of routine_runs to close one run (160-550 buffers
-- with 600 running, against 33). The close plans as the server would,
-- whoever calls it (test_closing_one_routine_run_reads_it_by_key_…).
set enable_seqscan = on
as $$
begin
    -- Every read here probes by key, the runs on the outer side (LATERAL
    -- with OFFSET 0, which the planner cannot turn around): the planner
    -- cannot size p_run_ids, and a plan cached for one run must stay linear
    -- for a thousand (tests/sql/test_batch_plans.py). Only the key inside the
    -- fence, the status outside: given the status too, the planner, misled
    -- by a young table's statistics, walked idx_routine_runs_running (every
    -- running run) for each run instead of probing the primary key: 20 ms to
    -- close one run of 600 running.
    --
    -- The routines first, all of them, in id order: the one place routines
    -- are locked for a run's end.
    perform
    from routines r
    where r.id in (select rr.routine_id
                   from unnest(p_run_ids) as u(id)
                   cross join lateral (
                       select rr.routine_id, rr.status from routine_runs rr
                       where rr.id = u.id
                       offset 0
                   ) rr
                   where rr.status = 'running')
    order by r.id
    for no key update of r;

    with ended as (
        select rr.id as run_id, rr.routine_id, rr.started_at, rr.status as status_read,
               j.state, j.last_error, j.payload ->> 'action' as action, j.finished_at,
               reply.final_message, spent.tokens
        from unnest(p_run_ids) as u(id)
        -- The key inside the fence, the status outside, as above.
        cross join lateral (
            select rr.id, rr.routine_id, rr.started_at, rr.job_id, rr.status
            from routine_runs rr
            where rr.id = u.id
            offset 0
        ) rr
        cross join lateral (
            select j.id, j.state, j.last_error, j.payload, j.finished_at
            from job j
            where j.id = rr.job_id and j.finished_at is not null and j.state <> 'blocked'
            offset 0
        ) j
        left join lateral (
            select r.final_message from agent_run r
            where r.job_id = j.id order by r.started_at desc limit 1
        ) reply on true
        left join lateral (
            select sum(coalesce(r.tokens_in, 0) + coalesce(r.tokens_out, 0)) as tokens
            from agent_run r where r.job_id = j.id
        ) spent on true
        where rr.status = 'running'
    ),
    judged as (
        select e.*,
               case
                   when e.state <> 'delivered' then 'failed'
                   when e.action <> 'lightweight' then 'ok'
                   when t.reply = 'ROUTINE_OK' then 'ok'
                   when t.reply <> '' then 'attention'
                   else 'failed'
               end as status,
               case
                   when e.state <> 'delivered'
                       then format('job %s: %s', e.state, coalesce(e.last_error, 'no detail'))
                   when e.action <> 'lightweight' then e.final_message
                   when t.reply = 'ROUTINE_OK' then null
                   when t.reply <> '' then t.reply
                   else 'the agent''s reply was empty'
               end as summary
        from ended e
        -- Trimmed of any Unicode whitespace once: "ROUTINE_OK\n" is
        -- ROUTINE_OK, and a reply that trims to nothing was blank (_is_blank
        -- counts the same characters). OFFSET 0 keeps the subquery whole:
        -- pulled up into the query, its call would be repeated at every
        -- mention of the reply, eight calls a run.
        cross join lateral (
            select _trim_blank(coalesce(e.final_message, '')) as reply offset 0
        ) t
    ),
    closed as (
        update routine_runs rr
        set status = j.status, completed_at = j.finished_at, result_summary = left(j.summary, 4000),
            tokens_used = least(j.tokens, 2147483647)::integer
        from judged j
        where rr.id = j.run_id
          -- Rechecked on the row as updated: closed once, whoever came first.
          -- Against the status the probe read (running) and not with `=`: the
          -- literal, or an equality the planner chains to it, lets it walk
          -- every running run for the batch, as above.
          and rr.status is not distinct from j.status_read
        returning rr.id, rr.routine_id, rr.started_at, rr.status, j.summary, j.finished_at
    ),
    -- Each routine's runs, latest to end first: the first gives the state,
    -- and the failures before the first run that did not fail extend the
    -- routine's streak (or restart it).
    ranked as (
        select c.*, row_number() over (partition by c.routine_id
                                       order by c.finished_at desc, c.started_at desc, c.id desc)
                    as from_last
        from closed c
    ),
    per_routine as (
        select k.routine_id, count(*) as runs,
               min(k.from_last) filter (where k.status <> 'failed') as last_not_failed,
               (array_agg(k.status order by k.from_last))[1] as status,
               (array_agg(k.summary order by k.from_last))[1] as summary,
               max(k.finished_at) as finished_at
        from ranked k
        group by k.routine_id
    ),
    counted as (
        update routines r
        set last_run_at = p.finished_at,
            run_count = r.run_count + p.runs,
            consecutive_failures = case when p.last_not_failed is null
                                        then r.consecutive_failures + p.runs
                                        else p.last_not_failed - 1 end,
            state = jsonb_build_object('last_status', p.status,
                                       'last_summary', left(p.summary, 2000),
                                       'last_run_at', p.finished_at)
        from per_routine p
        where r.id = p.routine_id
    )
    insert into notifications (source_table, source_id, kind, channel, recipient, subject, body,
                               user_id)
    select 'routine_runs', c.id, n.kind, r.notify_channel, r.notify_user,
           format('routine %s: %s', r.name, c.status), coalesce(c.summary, ''), r.user_id
    from closed c
    join routines r on r.id = c.routine_id
    cross join lateral (
        select case
                   when c.status = 'ok' and r.notify_on_success then 'success'
                   when c.status = 'failed' and r.notify_on_failure then 'failure'
                   when c.status = 'attention' and r.notify_on_attention then 'attention'
               end as kind
    ) n
    where n.kind is not null;
end;
$$;

comment on function _close_routine_runs(uuid[]) is
    'Close the running routine runs among these whose jobs have finished (ok / attention / '
    'failed), update each routine''s counters and state once, and queue notifications.';

-- Statement-level, so a finish batch closes its runs together. New rows
-- alone tell which runs to close: a run still running whose job has
-- finished is one whose job this statement ended (a run closes in the
-- statement that ends its job), so there is no join of old rows to new; the
-- transition tables are the ones job_update already keeps, so plain jobs pay
-- one scan of the new rows.
create or replace function _tg_job_routine_outcome()
returns trigger
language plpgsql
as $$
declare
    v_runs uuid[];
begin
    select array_agg(n.routine_run_id order by n.routine_run_id) into v_runs
    from new_rows n
    where n.routine_run_id is not null and n.finished_at is not null and n.state <> 'blocked';
    if v_runs is not null then
        perform _close_routine_runs(v_runs);
    end if;
    return null;
end;
$$;

comment on function _tg_job_routine_outcome() is
    'After UPDATE on job: close the routine runs whose jobs the statement ended.';

select _statement_trigger('job_routine_outcome', 'update', 'job');

-- Keep the running count, audit and announce routine run starts and ends.
-- Statement-level, like the job triggers: a cron batch writes hundreds of
-- runs in one statement, and the count then moves once, not once per row.
create or replace function _tg_routine_runs_insert()
returns trigger
language plpgsql
as $$
begin
    perform _count_running((select count(*) from new_rows where status = 'running')::integer);

    insert into audit_log (entity, entity_id, action, new_state, detail)
    select 'routine_run', n.id, 'insert', n.status,
           jsonb_build_object('routine_id', n.routine_id, 'skip_reason', n.skip_reason)
    from new_rows n;

    perform _notify_group('ceaseless_run', array_agg(n.id),
                          jsonb_build_object('table', 'routine_runs', 'status', n.status))
    from new_rows n
    group by n.status;
    return null;
end;
$$;

comment on function _tg_routine_runs_insert() is
    'After INSERT on routine_runs: move the running count, audit each run, NOTIFY ceaseless_run '
    'once per status.';

-- enable_nestloop: as _tg_job_update (25_notify_audit.sql). A finish batch
-- closes its runs in one update, so after one-run statements the join of old
-- to new rows would meet a thousand rows with a nested loop planned for one:
-- tests/sql/test_batch_plans.py, test_without_enable_nestloop_….
create or replace function _tg_routine_runs_update()
returns trigger
language plpgsql
set enable_nestloop = off
as $$
begin
    perform _count_running(
        (select sum(case when n.status = 'running' then 1 else 0 end
                    - case when o.status = 'running' then 1 else 0 end)
         from new_rows n join old_rows o on o.id = n.id)::integer);

    insert into audit_log (entity, entity_id, action, old_state, new_state, detail)
    select 'routine_run', n.id, 'update', o.status, n.status,
           jsonb_build_object('routine_id', n.routine_id, 'skip_reason', n.skip_reason)
    from new_rows n
    join old_rows o on o.id = n.id
    where n.status is distinct from o.status;

    perform _notify_group('ceaseless_run', array_agg(n.id),
                          jsonb_build_object('table', 'routine_runs', 'status', n.status))
    from new_rows n
    join old_rows o on o.id = n.id
    where n.status is distinct from o.status
    group by n.status;
    return null;
end;
$$;

comment on function _tg_routine_runs_update() is
    'After UPDATE on routine_runs: move the running count, audit status changes, NOTIFY '
    'ceaseless_run once per new status.';

select _statement_trigger('routine_runs_insert', 'insert', 'routine_runs');
select _statement_trigger('routine_runs_update', 'update', 'routine_runs');

-- A running run deleted with its routine still leaves the running count.
create or replace function _tg_routine_runs_deleted()
returns trigger
language plpgsql
as $$
begin
    perform _count_running(-(select count(*) from old_rows where status = 'running')::integer);
    return null;
end;
$$;

comment on function _tg_routine_runs_deleted() is
    'After routine_runs rows are deleted: take their running ones off the running count.';

select _statement_trigger('routine_runs_deleted', 'delete', 'routine_runs');
