-- Retention: finished rows leave after the period their kind's setting names
-- (retention_*_secs, db/0080), in bounded batches, oldest first.
--
-- Called by: one listener at a time, its maintenance loop (prune, every
-- prune_interval_secs); operators and the schema's owner, through
-- `ceaseless prune` or psql. Never by a user role.
-- Guarantees:
-- - live rows, and the rows a live rule reads, are never removed: a job that
--   is pending, claimed, running or blocked (it waits for a person); a run
--   with such a job; a routine run still running; a topology run not finished;
--   each loop's latest finished iteration (the next iteration's prior context
--   and its number, _fire_loop); each routine's latest successful run (the
--   last-success gauge, metrics_snapshot) and its runs inside its
--   dedup_window_secs (the dedup check); a forge job that is its issue's
--   latest of its kind (_forge_decide reads it to say done or cooling down),
--   a parent of any job, or a plan whose child issues are not all on the
--   forge yet (record_child_issue enqueues from it);
-- - a run's jobs go with the run, in the same statement, and a job's agent
--   runs, a run's nodes and approvals by ON DELETE CASCADE: no finished row
--   is left naming a deleted one, and no UPDATE (no trigger, no NOTIFY) is
--   caused by a SET NULL;
-- - counters are not moved: routines.run_count and the metric totals count
--   what happened, not what is kept, and no delete trigger touches them
--   (routine_runs_deleted only takes running runs off the running count,
--   and running runs are never removed);
-- - each kind removes at most p_limit of its rows per call, plus the rows
--   that go with them; a call that removes anything writes one audit_log row
--   (entity retention) with the counts; a dry run removes and audits nothing;
-- - one prune at a time: a transaction-scoped advisory lock taken without
--   waiting; a call that finds it held returns no rows;
-- - a row that becomes live again between the batch's read and its delete
--   (retry_job, retry_topology_run) is kept: the delete repeats the state
--   test on the row it deletes, which READ COMMITTED re-reads.

-- The kinds prune knows, in the order it prunes them: runs before jobs, so
-- the jobs a run frees can go in the same call.
create or replace function _retention_kinds()
returns text[]
language sql immutable
as $$
    select array['routine_runs', 'topology_runs', 'jobs', 'events', 'notifications',
                 'late_results', 'webhook_deliveries', 'audit_log'];
$$;

comment on function _retention_kinds() is
    'The kinds of row prune removes, in its order: routine_runs, topology_runs, jobs, events, '
    'notifications, late_results, webhook_deliveries, audit_log.';

-- Rows of a kind older than this go; NULL keeps them forever (the setting is
-- 0). Webhook deliveries have no setting of their own: they are kept for two
-- replay windows, as _webhook_remember keeps them (35_webhook_schemes.sql).
create or replace function _retention_cutoff(p_kind text, p_now timestamptz)
returns timestamptz
language plpgsql stable
as $$
declare
    v_secs integer;
begin
    if p_kind = 'webhook_deliveries' then
        return p_now - 2 * make_interval(secs => _setting_int('webhook_window_secs'));
    end if;
    v_secs := _setting_int('retention_' || p_kind || '_secs');
    if v_secs = 0 then
        return null;
    end if;
    return p_now - make_interval(secs => v_secs);
end;
$$;

comment on function _retention_cutoff(text, timestamptz) is
    'The moment before which a kind''s finished rows are past retention (retention_<kind>_secs; '
    'two webhook_window_secs for webhook deliveries); NULL when the setting is 0 (kept forever).';

-- The finished routine runs past retention that nothing live reads, oldest
-- first (routine_runs_completed_idx).
create or replace function _prunable_routine_runs(
    p_cutoff timestamptz, p_now timestamptz, p_limit integer
)
returns setof uuid
language sql stable
as $$
    select rr.id
    from routine_runs rr
    where rr.completed_at < p_cutoff
      -- The routine's latest success: the last-success gauge reads it
      -- (routine_runs_last_ok_idx, one probe).
      and rr.id is distinct from (
          select ok.id from routine_runs ok
          where ok.routine_id = rr.routine_id and ok.status = 'ok'
          order by ok.completed_at desc
          limit 1)
      -- Inside its routine's dedup window, the dedup check reads its hash.
      and not exists (
          select from routines r
          where r.id = rr.routine_id and r.dedup_window_secs is not null
            and rr.content_hash is not null
            and rr.started_at > p_now - make_interval(secs => r.dedup_window_secs))
      -- A job of it waits for a person (blocked) or runs again (retry_job).
      and not exists (
          select from job j
          where j.routine_run_id = rr.id
            and j.state in ('pending', 'claimed', 'running', 'blocked'))
    order by rr.completed_at
    limit p_limit;
$$;

comment on function _prunable_routine_runs(timestamptz, timestamptz, integer) is
    'Up to p_limit finished routine runs completed before p_cutoff, oldest first, but not a '
    'routine''s latest success, a run inside its routine''s dedup window, or a run with a live job.';

-- The finished topology runs past retention that nothing live reads, oldest
-- first (topology_runs_finished_idx).
create or replace function _prunable_topology_runs(p_cutoff timestamptz, p_limit integer)
returns setof uuid
language sql stable
as $$
    select r.id
    from topology_runs r
    where r.finished_at < p_cutoff
      -- The loop's latest finished iteration: the next one's prior context
      -- and number come from it (topology_runs_loop_idx, at most the live
      -- iteration read before it).
      and (r.iteration is null
           or r.iteration <> (
               select i.iteration from topology_runs i
               where i.loop_id = r.loop_id and i.iteration is not null
                 and i.finished_at is not null
               order by i.iteration desc
               limit 1))
      -- The loop's last run, which loops.last_run_id shows.
      and not exists (select from loops l where l.last_run_id = r.id)
      -- A job of it still live: cancel_orphaned_topology_jobs ends it first.
      and not exists (
          select from job j
          where j.topology_run_id = r.id
            and j.state in ('pending', 'claimed', 'running', 'blocked'))
    order by r.finished_at
    limit p_limit;
$$;

comment on function _prunable_topology_runs(timestamptz, integer) is
    'Up to p_limit finished topology runs finished before p_cutoff, oldest first, but not a '
    'loop''s latest finished iteration or last run, nor a run with a live job.';

-- The finished jobs past retention that belong to no run and that nothing
-- live reads, oldest first. Read by job_created_idx: a job finished before
-- the cutoff was created before it, and the hottest table gets no index of
-- retention's own to keep up on every finish. A run's jobs go with the run.
create or replace function _prunable_jobs(p_cutoff timestamptz, p_limit integer)
returns setof uuid
language sql stable
as $$
    select j.id
    from job j
    where j.created_at < p_cutoff
      and j.state in ('delivered', 'failed', 'abandoned', 'cancelled')
      and j.finished_at < p_cutoff
      -- A run's record shows its jobs: they stay as long as it does.
      and j.routine_run_id is null
      and j.topology_run_id is null
      and not exists (select from routine_runs rr where rr.job_id = j.id)
      -- A parent waits for its children (parent_job_id has no cascade).
      and not exists (select from job c where c.parent_job_id = j.id)
      -- A plan whose children are not all on the forge yet.
      and not exists (
          select from forge_child_issue c where c.plan_job_id = j.id and c.number is null)
      -- A forge job that is its issue's latest of its kind
      -- (job_issue_history_idx): without it the issue would look new.
      and (j.forge is null
           or exists (
               select from job n
               where n.forge = j.forge and n.owner = j.owner and n.repo = j.repo
                 and n.number = j.number and n.kind = j.kind
                 and (n.created_at, n.id) > (j.created_at, j.id)))
    order by j.created_at
    limit p_limit;
$$;

comment on function _prunable_jobs(timestamptz, integer) is
    'Up to p_limit finished jobs finished before p_cutoff, oldest first, of no run, parent of '
    'no job, no plan with children still to create, nor the latest forge job of its issue and kind.';

-- Remove (or, dry, count) one kind's batch: how many rows of the kind, and
-- how many jobs went with a run.
create or replace function _prune_kind(
    p_kind text, p_now timestamptz, p_limit integer, p_dry_run boolean,
    out removed bigint, out jobs bigint
)
language plpgsql
as $$
declare
    v_cutoff timestamptz;
begin
    removed := 0;
    jobs := 0;
    v_cutoff := _retention_cutoff(p_kind, p_now);
    if v_cutoff is null then
        return;
    end if;
    if p_kind = 'audit_log' then
        -- Never inside the floor, read against the server's clock as
        -- _delete_audit_rows reads it, whatever p_now says. (After the NULL
        -- test: least() would skip a NULL, "forever", and take the floor.)
        v_cutoff := least(v_cutoff, now() - make_interval(
                                        secs => _setting_int('audit_log_min_retention_secs')));
    end if;
    -- A dry run removes the batch and takes it back, so it counts exactly what
    -- a pass would remove, by the same statements.
    begin
        case p_kind
        when 'routine_runs' then
            -- One statement: routine_runs.job_id and job.routine_run_id refer
            -- to each other, and the foreign keys are checked at its end, when
            -- both rows are gone.
            with batch as (
                select b.id from _prunable_routine_runs(v_cutoff, p_now, p_limit) b(id)
            ),
            gone_jobs as (
                delete from job j
                where j.state in ('delivered', 'failed', 'abandoned', 'cancelled')
                  and j.id in (select j2.id from job j2
                               where j2.routine_run_id in (select id from batch)
                               union
                               select rr.job_id from routine_runs rr
                               where rr.id in (select id from batch))
                returning j.id
            ),
            gone as (
                delete from routine_runs rr
                where rr.id in (select id from batch) and rr.status <> 'running'
                returning rr.id
            )
            select (select count(*) from gone), (select count(*) from gone_jobs) into removed, jobs;
        when 'topology_runs' then
            -- Nodes and approvals go by cascade; the jobs here, so that no
            -- node is updated by a SET NULL on its way out.
            with batch as (
                select b.id from _prunable_topology_runs(v_cutoff, p_limit) b(id)
            ),
            gone_jobs as (
                delete from job j
                where j.state in ('delivered', 'failed', 'abandoned', 'cancelled')
                  and j.topology_run_id in (select id from batch)
                returning j.id
            ),
            gone as (
                delete from topology_runs r
                where r.id in (select id from batch) and r.finished_at is not null
                returning r.id
            )
            select (select count(*) from gone), (select count(*) from gone_jobs) into removed, jobs;
        when 'jobs' then
            delete from job j
            where j.id in (select b.id from _prunable_jobs(v_cutoff, p_limit) b(id))
              and j.state in ('delivered', 'failed', 'abandoned', 'cancelled');
            get diagnostics removed = row_count;
        when 'events', 'late_results', 'webhook_deliveries' then
            -- Finished when written (an event, a late result, a delivery's
            -- replay key), so their age is their only rule: one statement for
            -- the three, each table named after its kind, read oldest first
            -- through the index on its time column.
            execute format('delete from %1$I t where t.id in (select x.id from %1$I x '
                           'where x.%2$I < $1 order by x.%2$I limit $2)',
                           p_kind, case p_kind when 'events' then 'created_at'
                                               else 'received_at' end)
                using v_cutoff, p_limit;
            get diagnostics removed = row_count;
        when 'notifications' then
            delete from notifications n
            where n.id in (select x.id from notifications x
                           where x.status = 'delivered' and x.delivered_at < v_cutoff
                           order by x.delivered_at limit p_limit)
              and n.status = 'delivered';
            get diagnostics removed = row_count;
        when 'audit_log' then
            removed := _delete_audit_rows(v_cutoff, p_limit);
        end case;
        if p_dry_run then
            raise exception using errcode = 'CE000', message = 'prune: a dry run, taken back';
        end if;
    exception when sqlstate 'CE000' then
        -- The counts stay: a caught error undoes the block's writes, not its variables.
        null;
    end;
end;
$$;

comment on function _prune_kind(text, timestamptz, integer, boolean) is
    'Remove (or with p_dry_run count) up to p_limit rows of one kind past retention; returns '
    'how many, and how many jobs went with the runs removed.';

-- Remove what is past retention: each kind (or p_only) up to p_limit rows,
-- oldest first, and say how many went of each, jobs counting those that went
-- with their runs. Call again while a kind removes p_limit.
--
-- Audit rows are pruned only for the roles that may call prune_audit_log
-- (the schema's owner and listeners): an operator's pass leaves the kind out,
-- as the log keeps what operators did too (99_access.sql).
-- Locks: an advisory lock for the transaction, taken without waiting; held
-- elsewhere, the call returns no rows and removes nothing.
-- Raises: 42501 for a user role, or an operator naming audit_log; CE422 a
-- p_limit below 1, an unknown p_only, a NULL p_now.
create or replace function prune(
    p_now timestamptz default now(),
    p_limit integer default 10000,
    p_only text default null,
    p_dry_run boolean default false
)
returns table (kind text, removed bigint)
language plpgsql
as $$
declare
    v_audit constant boolean :=
        pg_has_role(session_user, 'ceaseless_listener', 'usage')
        or pg_has_role(session_user, (select n.nspowner from pg_namespace n
                                      where n.nspname = 'ceaseless'), 'usage');
    v_kind text;
    v_counts jsonb := '{}';
    v_total bigint := 0;
    v_jobs bigint := 0;
    v_removed bigint;
    v_with bigint;
begin
    if not _acts_for_everyone() then
        raise exception 'prune: only operators, listeners and the schema''s owner may prune; % '
                        'is none of them', session_user
            using errcode = '42501';
    end if;
    if p_now is null then
        raise exception 'prune.p_now: must be a time; got NULL' using errcode = 'CE422';
    end if;
    if p_limit is null or p_limit < 1 then
        raise exception 'prune.p_limit: must be at least 1; got %', coalesce(p_limit::text, 'NULL')
            using errcode = 'CE422';
    end if;
    if p_only is not null and not p_only = any (_retention_kinds()) then
        raise exception 'prune.p_only: must be one of %; got %',
            array_to_string(_retention_kinds(), ', '), left(p_only, 100)
            using errcode = 'CE422';
    end if;
    if p_only = 'audit_log' and not v_audit then
        raise exception 'prune: audit rows are pruned only by the schema''s owner and listeners '
                        '(the log keeps what operators did); % may not'
                        , session_user
            using errcode = '42501';
    end if;
    if not p_dry_run
       and not pg_try_advisory_xact_lock(hashtext('ceaseless'), hashtext('prune')) then
        return;
    end if;
    foreach v_kind in array _retention_kinds() loop
        continue when p_only is not null and v_kind <> p_only;
        continue when v_kind = 'audit_log' and not v_audit;
        select k.removed, k.jobs into v_removed, v_with
        from _prune_kind(v_kind, p_now, p_limit, p_dry_run) k;
        if v_kind = 'jobs' then
            v_removed := v_removed + v_jobs;
        end if;
        v_jobs := v_jobs + v_with;
        v_counts := v_counts || jsonb_build_object(v_kind, v_removed);
        v_total := v_total + v_removed;
    end loop;
    -- Jobs that went with runs when jobs itself was not pruned (p_only).
    if v_jobs > 0 and not v_counts ? 'jobs' then
        v_counts := v_counts || jsonb_build_object('jobs', v_jobs);
        v_total := v_total + v_jobs;
    end if;
    if not p_dry_run and v_total > 0 then
        insert into audit_log (entity, entity_key, action, detail)
        values ('retention', 'prune', 'prune',
                jsonb_build_object('removed', v_counts, 'now', p_now, 'limit', p_limit,
                                   'only', p_only));
    end if;
    return query
    select c.key, c.value::bigint
    from jsonb_each_text(v_counts) c
    order by array_position(_retention_kinds(), c.key);
end;
$$;

comment on function prune(timestamptz, integer, text, boolean) is
    'Remove what is past retention (settings retention_*_secs): up to p_limit rows of each kind '
    '(or p_only), oldest first, never a live row or one a live rule reads; one audit row per '
    'pass. Returns (kind, removed); no rows when another prune holds the lock. Operators, '
    'listeners and the owner; audit rows only for listeners and the owner.';

-- Retention as an operator checks it: what each kind keeps (kept_for, NULL
-- for ever; the cutoff _retention_cutoff gives prune), and what the latest
-- pass removed. A pass writes its audit row only when it removed something,
-- so last_pass_at is the latest pass that did; a listener whose maintenance
-- prunes shows there every prune_interval_secs while a dry run finds rows to
-- remove. One probe of audit_log_entity_key_idx, newest first: the view
-- never reads the history it is about.
create or replace view retention_status with (security_invoker = true) as
select k.kind,
       c.now - r.cutoff as kept_for,
       r.cutoff,
       last.at as last_pass_at,
       coalesce((last.detail -> 'removed' ->> k.kind)::bigint, 0) as removed_by_last_pass
from (values (now())) c (now)
cross join unnest(_retention_kinds()) with ordinality k (kind, position)
-- OFFSET 0 keeps the planner from pulling the cutoff up into both columns,
-- which would read the settings twice per kind (34 buffers, not 18).
cross join lateral (select _retention_cutoff(k.kind, c.now) as cutoff offset 0) r
left join lateral (
    select a.at, a.detail
    from audit_log a
    where a.entity = 'retention' and a.entity_key = 'prune'
    order by a.id desc
    limit 1) last on true
order by k.position;

comment on view retention_status is
    'One row per kind prune removes, in its order: how long its finished rows are kept '
    '(kept_for, NULL for ever), the cutoff before which they go, and the latest pass that removed '
    'anything (last_pass_at) with this kind''s count in it. Operators and listeners.';
