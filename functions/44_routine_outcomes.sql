-- Routines: outcomes flowing back. A run's job ended: close the run, update
-- the routine's counters and state, queue notifications; keep the running
-- count; close the runs an agent's disabling strands.
--
-- Called by: PostgreSQL (triggers on job, routine_runs and agents), and the
-- queue functions that end jobs (finish_runs, expire_leases, release_jobs,
-- cancel_job), which call _lock_routines_of_jobs first.
-- Guarantees: a run closes exactly once, at its job's finished_at; the sum of
-- routine_run_shards equals the running runs; NOTIFY ceaseless_run once per
-- status a statement moved runs to (never for a statement that moved none).

set local search_path = ceaseless, pg_catalog, public;

-- Lock, in id order, the routines whose runs the jobs p_job_ids belong to,
-- before anything ends those jobs. Ending a routine's job updates the routine
-- (last_run_at, counters): without this, a batch would lock its routines in
-- the order its jobs happen to be updated, and two batches meeting two
-- routines in opposite orders would deadlock.
create or replace function _lock_routines_of_jobs(p_job_ids uuid[])
returns void
language plpgsql
set search_path = ceaseless, pg_catalog
as $$
begin
    perform
    from routines r
    where r.id in (select rr.routine_id
                   from job j
                   join routine_runs rr on rr.id = j.routine_run_id
                   where j.id = any (p_job_ids))
    order by r.id
    for no key update of r;
end;
$$;

comment on function _lock_routines_of_jobs(uuid[]) is
    'Lock (FOR NO KEY UPDATE, in id order) the routines of these jobs'' runs: the first step of '
    'every function that ends jobs, so two of them never deadlock on routines.';

-- A routine run's job ended: set the run's status from the job and its last
-- agent reply, update the routine's counters and state, and queue the
-- notifications its notify_on_* flags ask for.
--
-- lightweight: reply exactly ROUTINE_OK → ok; another non-empty reply →
-- attention, the reply as summary; anything else → failed. full_job:
-- delivered → ok; anything else → failed.
create or replace function _finish_routine_run(p_run_id uuid, p_now timestamptz)
returns void
language plpgsql
set search_path = ceaseless, pg_catalog
as $$
declare
    v_run routine_runs;
    v_routine routines;
    v_job job;
    v_reply text;
    v_tokens bigint;
    v_status text;
    v_summary text;
    v_notify text;
begin
    -- Already locked by whoever ends the job (_lock_routines_of_jobs); taken
    -- again for a job ended by a plain UPDATE.
    select r.* into v_routine
    from routines r join routine_runs rr on rr.routine_id = r.id
    where rr.id = p_run_id
    for no key update of r;
    select * into v_run from routine_runs where id = p_run_id for update;
    if not found or v_run.status <> 'running' then
        return;
    end if;
    select * into v_job from job where id = v_run.job_id;
    select r.final_message into v_reply
    from agent_run r where r.job_id = v_job.id order by r.started_at desc limit 1;
    select sum(coalesce(r.tokens_in, 0) + coalesce(r.tokens_out, 0)) into v_tokens
    from agent_run r where r.job_id = v_job.id;

    if v_job.state = 'delivered' then
        if v_job.payload ->> 'action' = 'lightweight' then
            -- Trimmed of any Unicode whitespace: "ROUTINE_OK\n" is ROUTINE_OK.
            v_reply := _trim_blank(coalesce(v_reply, ''));
            if v_reply = 'ROUTINE_OK' then
                v_status := 'ok';
            elsif not _is_blank(v_reply) then
                v_status := 'attention';
                v_summary := v_reply;
            else
                v_status := 'failed';
                v_summary := 'the agent''s reply was empty';
            end if;
        else
            v_status := 'ok';
            v_summary := v_reply;
        end if;
    else
        v_status := 'failed';
        v_summary := format('job %s: %s', v_job.state, coalesce(v_job.last_error, 'no detail'));
    end if;

    update routine_runs
    set status = v_status, completed_at = p_now, result_summary = left(v_summary, 4000),
        tokens_used = least(v_tokens, 2147483647)::integer
    where id = v_run.id;

    update routines
    set last_run_at = p_now,
        run_count = run_count + 1,
        consecutive_failures = case when v_status = 'failed' then consecutive_failures + 1 else 0 end,
        state = jsonb_build_object('last_status', v_status, 'last_summary', left(v_summary, 2000),
                                   'last_run_at', p_now)
    where id = v_routine.id;

    v_notify := case
        when v_status = 'ok' and v_routine.notify_on_success then 'success'
        when v_status = 'failed' and v_routine.notify_on_failure then 'failure'
        when v_status = 'attention' and v_routine.notify_on_attention then 'attention'
    end;
    if v_notify is not null then
        insert into notifications (source_table, source_id, kind, channel, recipient, subject, body)
        values ('routine_runs', v_run.id, v_notify, v_routine.notify_channel,
                v_routine.notify_user,
                format('routine %s: %s', v_routine.name, v_status),
                coalesce(v_summary, ''));
    end if;
end;
$$;

comment on function _finish_routine_run(uuid, timestamptz) is
    'Close a routine run from its job''s end state and reply (ok / attention / failed), update '
    'the routine''s counters and state, and queue notifications.';

-- Row-level with a WHEN clause, not statement-level: the clause is checked
-- in C before any trigger is queued, so the finish of a batch of plain jobs
-- pays nothing here. A statement trigger with transition tables made every
-- job update copy its old and new rows aside and join them, for routine
-- jobs that are a small share of the work.
create or replace function _tg_job_routine_outcome()
returns trigger
language plpgsql
set search_path = ceaseless, pg_catalog
as $$
begin
    -- The job's finished_at, not now(): finish_runs and the others are given
    -- their time (p_now), and the run must end when its job did.
    perform _finish_routine_run(new.routine_run_id, new.finished_at);
    return null;
end;
$$;

comment on function _tg_job_routine_outcome() is
    'After a routine''s job ends: close its routine run.';

create or replace trigger job_routine_outcome
    after update of finished_at on job
    for each row
    when (new.routine_run_id is not null
          and new.finished_at is not null and old.finished_at is null)
    execute function _tg_job_routine_outcome();

-- Keep the running count, audit and announce routine run starts and ends.
-- Statement-level, like the job triggers: a cron batch writes hundreds of
-- runs in one statement, and the count then moves once, not once per row.
create or replace function _tg_routine_runs_insert()
returns trigger
language plpgsql
set search_path = ceaseless, pg_catalog
as $$
begin
    perform _count_running((select count(*) from new_rows where status = 'running')::integer);

    insert into audit_log (actor, entity, entity_id, action, new_state, detail)
    select _actor(), 'routine_run', n.id, 'insert', n.status,
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

-- No enable_nestloop, unlike _tg_job_update (30_notify_audit.sql): every
-- update of routine_runs here is of one run (_finish_routine_run), so the
-- join of old to new rows never meets a batch it was not planned for, and
-- bin/bench showed no difference without it.
create or replace function _tg_routine_runs_update()
returns trigger
language plpgsql
set search_path = ceaseless, pg_catalog
as $$
begin
    perform _count_running(
        (select sum(case when n.status = 'running' then 1 else 0 end
                    - case when o.status = 'running' then 1 else 0 end)
         from new_rows n join old_rows o on o.id = n.id)::integer);

    insert into audit_log (actor, entity, entity_id, action, old_state, new_state, detail)
    select _actor(), 'routine_run', n.id, 'update', o.status, n.status,
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

-- The name these triggers replaced: a database migrated before the rename
-- would otherwise run both, auditing and counting every run twice.
drop trigger if exists routine_runs_changed on routine_runs;
drop function if exists _tg_routine_runs_changed();

create or replace trigger routine_runs_insert
    after insert on routine_runs
    referencing new table as new_rows
    for each statement execute function _tg_routine_runs_insert();

create or replace trigger routine_runs_update
    after update on routine_runs
    referencing old table as old_rows new table as new_rows
    for each statement execute function _tg_routine_runs_update();

-- A running run deleted with its routine still leaves the running count.
create or replace function _tg_routine_runs_deleted()
returns trigger
language plpgsql
set search_path = ceaseless, pg_catalog
as $$
begin
    perform _count_running(-(select count(*) from old_rows where status = 'running')::integer);
    return null;
end;
$$;

comment on function _tg_routine_runs_deleted() is
    'After routine_runs rows are deleted: take their running ones off the running count.';

create or replace trigger routine_runs_deleted
    after delete on routine_runs
    referencing old table as old_rows
    for each statement execute function _tg_routine_runs_deleted();
-- A routine's job waits for its agent's lane; when the agent is disabled the
-- job would wait forever, and its run would hold its max_concurrent slot and
-- a global-cap slot with it. Disabling an agent ends its pending routine jobs
-- as cancelled, which closes their runs as failed and frees the slots (a
-- claimed or running job finishes as usual). Deleting an agent that routines
-- or jobs name is refused by their foreign keys, so disabling is the one way
-- to strand a run.
create or replace function _tg_agents_disabled()
returns trigger
language plpgsql
set search_path = ceaseless, pg_catalog
as $$
declare
    v_jobs uuid[];
begin
    select array_agg(j.id order by j.id) into v_jobs
    from job j
    where j.agent = new.name and j.state = 'pending' and j.routine_run_id is not null;
    if v_jobs is null then
        return null;
    end if;
    perform _lock_routines_of_jobs(v_jobs);
    update job
    set state = 'cancelled', finished_at = now(), updated_at = now(),
        last_error = format('agent %s was disabled', new.name)
    where id = any (v_jobs) and state = 'pending';
    return null;
end;
$$;

comment on function _tg_agents_disabled() is
    'After an agent is disabled: cancel its pending routine jobs, closing their runs as failed.';

create or replace trigger agents_disabled
    after update of enabled on agents
    for each row
    when (old.enabled and not new.enabled)
    execute function _tg_agents_disabled();
