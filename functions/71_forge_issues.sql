-- Issues into jobs: the rules of the forge lane's intake, decided here so that
-- every listener polling a repo reaches the same answer (docs/forge.md).
--
-- Called by: the listener's poller (listener/forge/poller.py) after each
-- listing, and `ceaseless repo poll`.
-- Guarantees:
-- - one live job per issue (job_live_issue_idx); a plan or implement job is
--   created once per issue and kind (run it again with retry_job); a
--   discover job recurs on the tracking issue, never within
--   discover_cooldown_secs after the last one finished;
-- - only issues opened, or labelled, by an allowed author get work;
-- - ingests of one repo are serialised (its row is locked), so two callers
--   cannot both decide "no job yet";
-- - a 304 (no listing) still decides from the cached listing, so discovery
--   recurs when nothing on the forge changed;
-- - routing: discover and plan → the claude_code lane, implement →
--   opencode with a parent job, claude_code without (lanes are agents rows,
--   repointed by changing them).

-- The lane (an agents row) a forge job of this kind runs on. A child issue's
-- implementation has been planned already, so it goes to the cheaper lane
-- that follows instructions; anything else needs the lane that plans.
-- PL/pgSQL: a SQL function with a SET clause is never inlined and is planned
-- again on every call, and the forge intake and poller call this per row.
create or replace function _forge_lane(p_kind text, p_has_parent boolean)
returns text
language plpgsql immutable
as $$
begin
    return (select case when p_kind = 'implement' and p_has_parent then 'opencode'
                else 'claude_code' end);
end;
$$;

comment on function _forge_lane(text, boolean) is
    'The agents row a forge job runs on: discover and plan → claude_code; implement → opencode '
    'when it has a parent job (a plan''s child), claude_code otherwise.';

-- The job's own prompt: what its kind asks of the agent, written here alone
-- so that the stored job says what its agent was told. The listener adds the
-- issue's title, body and comments (fetched when the job runs, marked as
-- text from the forge), the branch and the reply formats
-- (listener/forge/prompt.py).
create or replace function _forge_job_prompt(
    p_kind text, p_repo tracked_repo, p_number bigint
)
returns text
language sql immutable
as $$
    select format(
        case p_kind
            when 'discover' then
                'Discovery for %1$s/%2$s: this job is on the repository''s tracking issue #%3$s. '
                'Study the repository and the issue, and report the work you find in your '
                'final message.'
            when 'plan' then
                'Plan issue #%3$s of %1$s/%2$s: break it into smaller pieces of work that can '
                'each be done in one pull request, and report them as child issues in the '
                'children block below. Do not implement them, and do not open issues or pull '
                'requests yourself: ceaseless creates the child issues from your block.'
            else
                'Implement issue #%3$s of %1$s/%2$s: make the change the issue asks for, commit '
                'it on the branch given below, push that branch to `origin`, and open a pull '
                'request from it into %4$s. ceaseless finds your pull request on the forge by '
                'its head branch; what you write about it in your final message is not read.'
        end,
        p_repo.owner, p_repo.repo, p_number, p_repo.default_branch);
$$;

comment on function _forge_job_prompt(text, tracked_repo, bigint) is
    'What a forge job of this kind asks of its agent; the listener adds the issue, the branch '
    'and the blocks the agent may print.';

-- The job's payload: where its checkout comes from and where to push. The
-- branch carries the job id, so the pull request found by its head branch is
-- this job's and no other's.
create or replace function _forge_job_payload(
    p_job_id uuid, p_repo tracked_repo, p_title text, p_html_url text
)
returns jsonb
language sql immutable
as $$
    select jsonb_build_object('forge', jsonb_build_object(
        'repo_id', p_repo.id,
        'api_url', p_repo.api_url,
        'clone_url', p_repo.clone_url,
        'default_branch', p_repo.default_branch,
        'branch', 'ceaseless/' || p_job_id,
        'title', left(p_title, 256),
        'html_url', p_html_url));
$$;

comment on function _forge_job_payload(uuid, tracked_repo, text, text) is
    'job.payload of a forge job: {"forge": {repo_id, api_url, clone_url, default_branch, '
    'branch: ceaseless/<job id>, title, html_url}}.';

-- Enqueue the forge job of kind p_kind for issue p_number of the repo, on
-- lane p_lane, owned by p_user_id (the repo's owner, or a plan's for its
-- children), with p_parent_job_id for a plan's child; unless a live job holds
-- the issue already (job_live_issue_idx: one live job per issue, whoever
-- asked first). Returns the new job's id, or NULL when one was live.
create or replace function _enqueue_forge_job(
    p_repo tracked_repo, p_number bigint, p_kind text, p_lane text, p_title text,
    p_html_url text, p_parent_job_id uuid, p_user_id text, p_now timestamptz
)
returns uuid
language plpgsql
as $$
declare
    v_job constant uuid := gen_random_uuid();
begin
    insert into job (id, forge, owner, repo, number, kind, agent, prompt, payload, parent_job_id,
                     user_id, fairness_key, run_after, created_at, updated_at)
    values (v_job, p_repo.forge, p_repo.owner, p_repo.repo, p_number, p_kind, p_lane,
            _forge_job_prompt(p_kind, p_repo, p_number),
            _forge_job_payload(v_job, p_repo, p_title, p_html_url),
            p_parent_job_id, p_user_id, p_user_id, p_now, p_now, p_now)
    on conflict (forge, owner, repo, number)
        where state in ('pending', 'claimed', 'running') and forge is not null
        do nothing;
    return case when found then v_job end;
end;
$$;

comment on function _enqueue_forge_job(tracked_repo, bigint, text, text, text, text, uuid, text,
                                       timestamptz) is
    'Insert the forge job of a kind for an issue of the repo (prompt and payload of its kind, '
    'the lane, owner and parent given), unless a live job holds the issue; its id, or NULL.';

-- The label that asks for a kind on this repo.
-- PL/pgSQL: a SQL function with a SET clause is never inlined and is planned
-- again on every call, and the forge intake and poller call this per row.
create or replace function _forge_kind_label(p_repo tracked_repo, p_kind text)
returns text
language plpgsql immutable
as $$
begin
    return (select case p_kind when 'discover' then p_repo.discover_label
                       when 'plan' then p_repo.plan_label
                       when 'implement' then p_repo.implement_label end);
end;
$$;

comment on function _forge_kind_label(tracked_repo, text) is
    'The repo''s label that asks for a job of this kind.';

-- Decide each cached issue with a work label (all of the repo's, or those
-- numbered in p_numbers) and create the jobs that are due. The repo row must
-- be locked by the caller.
create or replace function _forge_decide(
    p_repo tracked_repo, p_numbers bigint[], p_now timestamptz
)
returns table (number bigint, kind text, label text, decision text, job_id uuid)
language plpgsql
as $$
#variable_conflict use_column
declare
    v_row record;
    v_issue forge_issue;
    v_kind text;
    v_lane text;
    v_last_finished timestamptz;
    -- Each kind's label, and the allowed logins, read once per call rather
    -- than once per issue. Logins and labels compare case-insensitively, as
    -- both forges treat them.
    v_labels jsonb := jsonb_build_object(
        'discover', _forge_kind_label(p_repo, 'discover'),
        'plan', _forge_kind_label(p_repo, 'plan'),
        'implement', _forge_kind_label(p_repo, 'implement'));
    v_allowed text[] := array(select lower(a) from unnest(p_repo.allowed_authors) a);
begin
    -- The kind and the admission of every issue in one statement, planned
    -- once: written as helper functions, they cost a call per issue, which
    -- is most of a large listing's time.
    for v_row in
        select i as issue, w.kind,
               -- Admission: the issue's author is allowed, or an allowed
               -- author added the label that asks for the work. NULL: not
               -- known yet, ask the forge who did. A label entry with no
               -- login (the forge's events did not say): not admitted.
               case
                   when lower(i.author) = any (v_allowed) then true
                   when cardinality(v_allowed) = 0 then false
                   else (select bool_or(coalesce(lower(l.value #>> '{}') = any (v_allowed), false))
                         from jsonb_each(i.labelled_by) l
                         where lower(l.key) = lower(v_labels ->> w.kind))
               end as admitted
        from forge_issue i
        cross join lateral (select array(select lower(l) from unnest(i.labels) l) as labels) il
        -- Which kind of work the labels ask for. The discover label counts on
        -- the tracking issue only (on any issue while the repo names none);
        -- with several work labels, the earlier step wins: discover, then
        -- plan, then implement (the plan's children carry the
        -- implementation).
        cross join lateral (
            select case
                when lower(v_labels ->> 'discover') = any (il.labels)
                     and (p_repo.tracking_issue is null or p_repo.tracking_issue = i.number)
                    then 'discover'
                when lower(v_labels ->> 'plan') = any (il.labels) then 'plan'
                when lower(v_labels ->> 'implement') = any (il.labels) then 'implement'
            end as kind
        ) w
        where i.repo_id = p_repo.id
          and (p_numbers is null or i.number = any (p_numbers))
          and w.kind is not null
        order by i.number
    loop
        v_issue := v_row.issue;
        v_kind := v_row.kind;
        number := v_issue.number;
        kind := v_kind;
        label := v_labels ->> v_kind;
        job_id := null;
        if v_row.admitted is null then
            decision := 'needs_labeller';
            return next;
            continue;
        elsif not v_row.admitted then
            decision := 'not_admitted';
            return next;
            continue;
        end if;

        -- job_live_issue_idx: one live job per issue, whatever its kind.
        select j.id into job_id from job j
        where j.forge = p_repo.forge and j.owner = p_repo.owner and j.repo = p_repo.repo
          and j.number = v_issue.number and j.state in ('pending', 'claimed', 'running');
        if found then
            decision := 'live';
            return next;
            continue;
        end if;

        -- job_issue_history_idx: the latest job of this kind for the issue.
        select j.id, j.finished_at into job_id, v_last_finished from job j
        where j.forge = p_repo.forge and j.owner = p_repo.owner and j.repo = p_repo.repo
          and j.number = v_issue.number and j.kind = v_kind
        order by j.created_at desc
        limit 1;
        if found and v_kind <> 'discover' then
            decision := 'done';
            return next;
            continue;
        elsif found and v_last_finished > p_now - make_interval(secs => p_repo.discover_cooldown_secs) then
            decision := 'cooldown';
            return next;
            continue;
        end if;

        v_lane := _forge_lane(v_kind, false);
        if not exists (select from agents a where a.name = v_lane) then
            job_id := null;
            decision := 'no_lane';
            return next;
            continue;
        end if;

        job_id := _enqueue_forge_job(p_repo, v_issue.number, v_kind, v_lane, v_issue.title,
                                     v_issue.html_url, null, p_repo.user_id, p_now);
        decision := case when job_id is not null then 'created' else 'live' end;
        return next;
    end loop;
end;
$$;

comment on function _forge_decide(tracked_repo, bigint[], timestamptz) is
    'Decide the cached issues of a locked repo (all, or those in p_numbers) and create the jobs '
    'due: created, live, done, cooldown, not_admitted, needs_labeller, no_lane; with the kind '
    'and the repo''s label that asks for it.';

-- One listed issue, checked: a listing that is not what the client promised
-- is a bug or a hostile forge, and is refused whole (the repo's last_error
-- then says why) rather than half-stored.
create or replace function _forge_listed_issue(p_item jsonb, p_position integer)
returns forge_issue
language plpgsql immutable
as $$
declare
    v_where constant text := format('ingest_issues.p_issues[%s]', p_position);
    v_issue forge_issue;
begin
    if jsonb_typeof(p_item) <> 'object' then
        perform _invalid_value(v_where, 'must be an object', p_item);
    end if;
    if jsonb_typeof(p_item -> 'number') <> 'number' or (p_item ->> 'number') !~ '^[1-9][0-9]{0,17}$' then
        perform _invalid_value(v_where || '.number', 'must be a positive integer',
                               p_item -> 'number');
    end if;
    if jsonb_typeof(p_item -> 'title') is distinct from 'string' then
        perform _invalid_value(v_where || '.title', 'must be a string',
                               p_item -> 'title');
    end if;
    if jsonb_typeof(p_item -> 'author') is distinct from 'string'
       or char_length(p_item ->> 'author') not between 1 and 100 then
        perform _invalid_value(v_where || '.author', 'must be a login (1 to 100 characters)',
                               p_item -> 'author');
    end if;
    if jsonb_typeof(coalesce(p_item -> 'labels', '[]')) <> 'array'
       or jsonb_array_length(coalesce(p_item -> 'labels', '[]')) > 100
       or exists (select from jsonb_array_elements(coalesce(p_item -> 'labels', '[]')) l
                  where jsonb_typeof(l) <> 'string') then
        perform _invalid_value(v_where || '.labels', 'must be an array of at most 100 names',
                               p_item -> 'labels');
    end if;
    v_issue.number := (p_item ->> 'number')::bigint;
    v_issue.title := left(p_item ->> 'title', 1000);
    v_issue.author := p_item ->> 'author';
    v_issue.labels := array(select left(l, 100)
                            from jsonb_array_elements_text(coalesce(p_item -> 'labels', '[]')) l);
    v_issue.html_url := left(p_item ->> 'html_url', 2000);
    return v_issue;
end;
$$;

comment on function _forge_listed_issue(jsonb, integer) is
    'One item of a listing as a forge_issue (title and labels cut to their bounds), or CE422 '
    'naming the item, the field and the rule.';

-- The poller's one call after a listing. p_issues: every open issue of the
-- repo as listed (a JSON array of {number, title, author, labels, html_url}),
-- or NULL when the forge answered 304 (the cached listing stands). Replaces
-- the cached listing, keeping who added each label for issues whose labels
-- did not change, then decides every issue with a work label.
-- Raises: CE404 unknown repo; CE422 a listing that is not as documented,
-- naming the item and field (nothing is stored then).
create or replace function ingest_issues(
    p_repo_id uuid,
    p_issues jsonb,
    p_now timestamptz default now()
)
returns table (number bigint, kind text, label text, decision text, job_id uuid)
language plpgsql
as $$
#variable_conflict use_column
declare
    v_repo tracked_repo := _forge_lock_repo(p_repo_id);
begin
    if p_issues is not null then
        if jsonb_typeof(p_issues) <> 'array' then
            perform _invalid_value('ingest_issues.p_issues', 'must be a JSON array or NULL',
                                   p_issues);
        end if;
        if jsonb_array_length(p_issues) > 10000 then
            perform _invalid_value('ingest_issues.p_issues', 'must list at most 10,000 issues',
                                   to_jsonb(jsonb_array_length(p_issues)));
        end if;
        -- One statement: the issues no longer listed go, the listed ones are
        -- upserted (disjoint rows). The last occurrence of a number wins: a
        -- listing that moved while it was paged through can show one twice.
        with listed as (
            select distinct on (l.number) l.*
            from jsonb_array_elements(p_issues) with ordinality as e(item, position)
            cross join lateral _forge_listed_issue(e.item, e.position::integer) l
            order by l.number, e.position desc
        ),
        gone as (
            delete from forge_issue i
            where i.repo_id = v_repo.id
              and not exists (select from listed l where l.number = i.number)
        )
        insert into forge_issue as i (repo_id, number, title, author, labels, labelled_by,
                                      html_url, seen_at)
        select v_repo.id, l.number, l.title, l.author, l.labels, '{}', l.html_url, p_now
        from listed l
        on conflict (repo_id, number) do update
        set title = excluded.title,
            author = excluded.author,
            labels = excluded.labels,
            -- Who added a label is still known while the labels are the same.
            labelled_by = case when i.labels = excluded.labels then i.labelled_by else '{}' end,
            html_url = excluded.html_url,
            seen_at = excluded.seen_at;
    end if;
    return query select * from _forge_decide(v_repo, null, p_now);
end;
$$;

comment on function ingest_issues(uuid, jsonb, timestamptz) is
    'After a poll: replace the repo''s cached listing with p_issues (NULL after a 304 keeps it) '
    'and decide each issue with a work label, creating the jobs due. One row per such issue, '
    'with its kind and the label that asks for it: '
    'created (job_id) | live | done | cooldown | not_admitted | needs_labeller | no_lane.';

-- Who added the work labels, as the forge's issue events said, for the
-- issues ingest_issues answered needs_labeller: p_labellers =
-- {"42": {"ceaseless:plan": "alice"}}. Decides those issues again.
-- Raises: CE404 unknown repo; CE422 a map that is not {number: {label: login}}.
create or replace function note_labellers(
    p_repo_id uuid,
    p_labellers jsonb,
    p_now timestamptz default now()
)
returns table (number bigint, kind text, label text, decision text, job_id uuid)
language plpgsql
as $$
#variable_conflict use_column
declare
    v_repo tracked_repo := _forge_lock_repo(p_repo_id);
    v_bad text;
begin
    if jsonb_typeof(p_labellers) is distinct from 'object' then
        perform _invalid_value('note_labellers.p_labellers', 'must be a JSON object',
                               p_labellers);
    end if;
    select e.key into v_bad from jsonb_each(p_labellers) e
    where e.key !~ '^[1-9][0-9]{0,17}$' or jsonb_typeof(e.value) <> 'object'
       or exists (select from jsonb_each(e.value) l
                  where jsonb_typeof(l.value) <> 'string'
                     or char_length(l.value #>> '{}') not between 1 and 100)
    limit 1;
    if v_bad is not null then
        perform _invalid_value('note_labellers.p_labellers',
                               'must map issue numbers to {label: login}',
                               jsonb_build_object(v_bad, p_labellers -> v_bad));
    end if;
    -- A work label the map does not name is recorded as unknown (JSON
    -- null): the forge was asked and did not say, so the issue is not
    -- admitted, and the poller does not ask again every poll.
    update forge_issue i
       set labelled_by = i.labelled_by
                         || coalesce((select jsonb_object_agg(l, null)
                                      from unnest(i.labels) l
                                      where lower(l) in (lower(v_repo.discover_label),
                                                         lower(v_repo.plan_label),
                                                         lower(v_repo.implement_label))), '{}')
                         || e.value
      from jsonb_each(p_labellers) e
     where i.repo_id = v_repo.id and i.number = e.key::bigint;
    return query
    select * from _forge_decide(
        v_repo, array(select k::bigint from jsonb_object_keys(p_labellers) k), p_now);
end;
$$;

comment on function note_labellers(uuid, jsonb, timestamptz) is
    'Record who added the work labels of listed issues ({"42": {"label": "login"}}) and decide '
    'those issues again (same answer as ingest_issues).';
