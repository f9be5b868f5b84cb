-- Plan → child issues → implement jobs, queued in the database so that a
-- retried or re-planned plan creates no child twice.
--
-- Called by: PostgreSQL (a plan job delivered queues its children), the
-- listener's child-issue loop (listener/forge/children.py:
-- child_issues_due → create on the forge → record_child_issue, or
-- child_issue_failed).
-- Guarantees:
-- - a child is queued once per (repo, plan issue, key): a plan retried or
--   planned again names the same children and creates nothing new;
-- - an issue is created on the forge before its implement job exists, and
--   the job has the plan job as parent, routes to the opencode lane and
--   inherits the plan's admission and owner (no author check: ceaseless
--   wrote the issue);
-- - each row is handed to one caller at a time (SKIP LOCKED, and the same
--   statement moves next_attempt_at on), and a row whose creation may have
--   happened (attempts > 1) carries a marker the caller searches for first.

-- The marker in a child issue's body: unique per repo, plan issue and key.
create or replace function _child_marker(p_parent_number bigint, p_key text)
returns text
language sql immutable
as $$
    select format('<!-- ceaseless: child %s of #%s -->', p_key, p_parent_number);
$$;

comment on function _child_marker(bigint, text) is
    'The HTML comment appended to a child issue''s body, searched for before creating it again.';

-- Queue the children of the plan jobs a statement delivered, from each
-- one's last succeeded run (its block was checked by _forge_verdict).
create or replace function _tg_job_plan_children()
returns trigger
language plpgsql
set enable_nestloop = off
as $$
begin
    -- Most statements move no plan job: read the new rows once and stop.
    if not exists (select from new_rows n where n.kind = 'plan' and n.state = 'delivered') then
        return null;
    end if;
    insert into forge_child_issue (plan_job_id, repo_id, parent_number, key, position, title,
                                   body, marker, user_id)
    select n.id, r.id, n.number, _plan_child_key(c.child), c.position::integer,
           btrim(c.child ->> 'title'), coalesce(c.child ->> 'body', ''),
           _child_marker(n.number, _plan_child_key(c.child)), n.user_id
    from new_rows n
    join old_rows o on o.id = n.id and o.state <> 'delivered'
    join tracked_repo r on r.forge = n.forge and r.owner = n.owner and r.repo = n.repo
    cross join lateral (
        select ar.final_message from agent_run ar
        where ar.job_id = n.id and ar.outcome = 'succeeded'
        order by ar.started_at desc limit 1
    ) run
    cross join lateral jsonb_array_elements((_forge_block(run.final_message)).block -> 'children')
        with ordinality as c(child, position)
    where n.kind = 'plan' and n.state = 'delivered'
    on conflict (repo_id, parent_number, key) do nothing;
    return null;
end;
$$;

comment on function _tg_job_plan_children() is
    'After UPDATE on job: queue the child issues of plan jobs that became delivered (once per '
    'repo, plan issue and key).';

select _statement_trigger('job_plan_children', 'update', 'job');

-- Hand out up to p_limit child issues due for creation, each to this caller
-- only; attempts counts the hand-outs, and next_attempt_at moves 5 minutes
-- on, so a caller that dies mid-way leaves the row for another later.
create or replace function child_issues_due(
    p_limit integer default 10,
    p_now timestamptz default now()
)
returns setof forge_child_issue
language sql
as $$
    with due as (
        select c.id
        from forge_child_issue c
        where c.number is null and c.next_attempt_at <= p_now
        order by c.next_attempt_at
        limit p_limit
        for no key update skip locked
    )
    update forge_child_issue c
       set attempts = c.attempts + 1,
           next_attempt_at = p_now + interval '5 minutes'
     where c.id = any (array(select id from due))
    returning c.*;
$$;

comment on function child_issues_due(integer, timestamptz) is
    'Hand out up to p_limit child issues not yet created on the forge, each to one caller '
    '(SKIP LOCKED), counting the attempt and moving next_attempt_at 5 minutes on.';

-- The child issue exists on the forge as p_number: record it and enqueue its
-- implement job (parent = the plan job, lane = _forge_lane('implement',
-- true), owner = the plan's). Idempotent: recording again returns the same
-- job. Returns the implement job's id.
-- Raises: CE404 unknown child; CE409 recorded before as another number, or
-- the lane is missing from the agents registry.
create or replace function record_child_issue(
    p_id uuid,
    p_number bigint,
    p_html_url text,
    p_now timestamptz default now()
)
returns uuid
language plpgsql
as $$
declare
    v_child forge_child_issue;
    v_repo tracked_repo;
    v_lane constant text := _forge_lane('implement', true);
    v_job uuid;
begin
    select c.* into v_child from forge_child_issue c where c.id = p_id for no key update;
    if not found then
        raise exception 'no child issue with id %', p_id using errcode = 'CE404';
    end if;
    if v_child.number is not null and v_child.number <> p_number then
        raise exception 'child issue % was recorded as #% already, not #%',
            p_id, v_child.number, p_number using errcode = 'CE409';
    end if;
    if v_child.implement_job_id is not null then
        return v_child.implement_job_id;
    end if;
    if not exists (select from agents a where a.name = v_lane) then
        raise exception 'no agent named % in the registry: a plan''s children run there', v_lane
            using errcode = 'CE409',
                  hint = format('insert into ceaseless.agents (name, adapter, argv) values (%L, ...)',
                                v_lane);
    end if;
    select r.* into v_repo from tracked_repo r where r.id = v_child.repo_id;

    v_job := _enqueue_forge_job(v_repo, p_number, 'implement', v_lane, v_child.title, p_html_url,
                                v_child.plan_job_id, v_child.user_id, p_now);
    if v_job is null then
        -- A live job holds the issue already (someone labelled it too).
        select j.id into v_job from job j
        where j.forge = v_repo.forge and j.owner = v_repo.owner and j.repo = v_repo.repo
          and j.number = p_number and j.state in ('pending', 'claimed', 'running');
    end if;

    update forge_child_issue c
       set number = p_number,
           html_url = left(p_html_url, 2000),
           created_on_forge_at = p_now,
           implement_job_id = v_job,
           last_error = null
     where c.id = p_id;
    return v_job;
end;
$$;

comment on function record_child_issue(uuid, bigint, text, timestamptz) is
    'Record that a child issue exists on the forge and enqueue its implement job (parent = the '
    'plan job, opencode lane); idempotent. Returns the job id.';

-- Creating the child issue failed: keep why, try again after the retry
-- delay of its attempts (retry_base_secs doubling, up to retry_max_secs).
create or replace function child_issue_failed(
    p_id uuid,
    p_error text,
    p_now timestamptz default now()
)
returns timestamptz
language plpgsql
as $$
declare
    v_next timestamptz;
begin
    update forge_child_issue c
       set last_error = left(coalesce(p_error, 'unknown error'), 1000),
           next_attempt_at = p_now + _retry_delay(c.attempts)
     where c.id = p_id and c.number is null
    returning c.next_attempt_at into v_next;
    if not found then
        raise exception 'no child issue waiting for creation with id %', p_id using errcode = 'CE404';
    end if;
    return v_next;
end;
$$;

comment on function child_issue_failed(uuid, text, timestamptz) is
    'Record a failed creation of a child issue and return when it is tried again.';
