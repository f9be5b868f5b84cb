-- Label mirroring: each forge job's state as one label on its issue, written
-- by a separate forge identity, so people on the forge see the job's state.
--
-- Called by: the listener's label loop (listener/forge/labels.py):
-- labels_due → (label token) remove the label written before, add the new
-- one → labels_synced, or labels_sync_failed.
-- Guarantees:
-- - labels are written, never read: what the mirror removes is what it wrote
--   (job.labels_synced_label), so nothing on the issue can steer it;
-- - a sync never changes a job's state; a failed one is retried;
-- - a job whose state moves while its labels are written stays due (the
--   label written is compared with the state, not a timestamp);
-- - each job is handed to one caller at a time (SKIP LOCKED, and the same
--   statement moves labels_retry_at on).

-- The label that mirrors a state. Claimed is running (the agent is about to
-- start); the three ways to end without delivering read as failed. The
-- partial index job_labels_due_idx (db/0020) repeats this expression.
-- PL/pgSQL: a SQL function with a SET clause is never inlined and is planned
-- again on every call, and the forge intake and poller call this per row.
create or replace function _forge_state_label(p_state text)
returns text
language plpgsql immutable
as $$
begin
    return (select case p_state
               when 'pending' then 'ceaseless:pending'
               when 'claimed' then 'ceaseless:running'
               when 'running' then 'ceaseless:running'
               when 'delivered' then 'ceaseless:delivered'
               when 'blocked' then 'ceaseless:blocked'
               else 'ceaseless:failed'
           end);
end;
$$;

comment on function _forge_state_label(text) is
    'The label mirroring a job state: ceaseless:pending | running (claimed, running) | '
    'delivered | blocked | failed (failed, abandoned, cancelled).';

-- Up to p_limit forge jobs whose mirrored label differs from their state,
-- each handed to this caller only for 60 seconds, with the forge to write to
-- and the labels to add and remove.
create or replace function labels_due(
    p_limit integer default 20,
    p_now timestamptz default now()
)
returns table (job_id uuid, forge text, api_url text, owner text, repo text, number bigint,
               add_label text, remove_label text, job_updated_at timestamptz,
               tokens_allowed boolean)
language sql
as $$
    -- due: job_labels_due_idx, whose predicate this WHERE repeats word for
    -- word (so the planner can use it), in retry order, stopping at p_limit.
    with due as (
        select j.id
        from job j
        where j.forge is not null
          and j.labels_synced_label is distinct from
              (case j.state
                   when 'pending' then 'ceaseless:pending'
                   when 'claimed' then 'ceaseless:running'
                   when 'running' then 'ceaseless:running'
                   when 'delivered' then 'ceaseless:delivered'
                   when 'blocked' then 'ceaseless:blocked'
                   else 'ceaseless:failed'
               end)
          and (j.labels_retry_at is null or j.labels_retry_at <= p_now)
        order by j.labels_retry_at nulls first
        limit p_limit
        for no key update skip locked
    ),
    handed as (
        update job j
           set labels_retry_at = p_now + interval '60 seconds'
         where j.id = any (array(select id from due))
        returning j.id, j.forge, j.owner, j.repo, j.number, j.state, j.labels_synced_label,
                  j.updated_at, j.user_id
    )
    select h.id, h.forge, r.api_url, h.owner, h.repo, h.number,
           _forge_state_label(h.state),
           nullif(h.labels_synced_label, _forge_state_label(h.state)),
           h.updated_at, r.tokens_allowed
    from handed h
    -- The job's own owner's repo: the one its intake came from.
    join tracked_repo r on r.forge = h.forge and r.owner = h.owner and r.repo = h.repo
                       and r.user_id = h.user_id;
$$;

comment on function labels_due(integer, timestamptz) is
    'Hand out up to p_limit forge jobs whose state label is out of date (add_label, and '
    'remove_label: the one written before), each to one caller for 60 s, with whether the '
    'repo may use the listener''s tokens.';

-- The labels were written: p_label now mirrors the job (as it was when
-- handed out; if it moved since, it is due again at once).
create or replace function labels_synced(
    p_job_id uuid,
    p_label text,
    p_job_updated_at timestamptz default null,
    p_now timestamptz default now()
)
returns void
language plpgsql
as $$
begin
    update job j
       set labels_synced_label = p_label,
           labels_synced_at = p_now,
           labels_error = null,
           -- Moved since it was handed out: due again now, not in 60 s.
           labels_retry_at = case when p_label is distinct from _forge_state_label(j.state)
                                  then p_now end
     where j.id = p_job_id and j.forge is not null;
    if not found then
        raise exception 'no forge job with id %', p_job_id using errcode = 'CE404';
    end if;
end;
$$;

comment on function labels_synced(uuid, text, timestamptz, timestamptz) is
    'Record that p_label was written on the job''s issue (labels_synced_at); the job''s state '
    'is not touched.';

-- Writing the labels failed: keep why, try again in a minute. The job's
-- state is not touched: a label is a mirror, never a step of the work.
create or replace function labels_sync_failed(
    p_job_id uuid,
    p_error text,
    p_now timestamptz default now()
)
returns timestamptz
language plpgsql
as $$
declare
    v_next timestamptz;
begin
    update job j
       set labels_error = left(coalesce(p_error, 'unknown error'), 1000),
           labels_retry_at = p_now + interval '60 seconds'
     where j.id = p_job_id and j.forge is not null
    returning j.labels_retry_at into v_next;
    if not found then
        raise exception 'no forge job with id %', p_job_id using errcode = 'CE404';
    end if;
    return v_next;
end;
$$;

comment on function labels_sync_failed(uuid, text, timestamptz) is
    'Record a failed label sync (labels_error) and retry it in 60 s; the job''s state is not '
    'touched.';
