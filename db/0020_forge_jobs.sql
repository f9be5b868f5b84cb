-- The forge lane's jobs (spec section 8, issue parts 3, 5, 6 and 7): the
-- issues a poll saw, the child issues a plan asked for, the verdict on a
-- forge run (a pull request, a human, a plan's children) and the bookkeeping
-- of the labels that mirror a job's state.
--
-- Function bodies: functions/72_forge_issues.sql (ingest_issues and the
-- rules that turn an issue into a job), 73_forge_verdict.sql (what a forge
-- run's end means), 74_forge_children.sql (plan → child issues → implement
-- jobs), 75_forge_labels.sql (label mirroring), 76_forge_views.sql.

set local search_path = ceaseless, pg_catalog, public;

-- ---------------------------------------------------------------------------
-- The open issues of a tracked repo as its last successful listing showed
-- them. A 304 answer carries no issues, yet a discover job must recur on the
-- tracking issue once its cooldown has passed whether or not anything
-- changed: without a remembered listing, the poller would have to list
-- without If-None-Match every time, spending the forge's rate limit to learn
-- that nothing happened. ingest_issues replaces a repo's rows with each new
-- listing and decides every time from what is here.
--
-- Everything here is text from the forge, written by strangers: it is
-- bounded when stored and never read to decide anything except through the
-- repo's three work labels and its allowed authors.
-- ---------------------------------------------------------------------------
create table forge_issue (
    repo_id uuid not null references tracked_repo (id) on delete cascade,
    number bigint not null,
    title text not null,
    author text not null,
    labels text[] not null default '{}',
    -- Who added each work label, as the forge's issue events said (label →
    -- login), asked only for an issue whose author is not admitted: an
    -- allowed author labelling a stranger's issue admits it.
    labelled_by jsonb not null default '{}',
    html_url text,
    seen_at timestamptz not null,
    primary key (repo_id, number),

    -- Issue numbers start at 1 on both forges; 0 or less is a parsing bug
    -- that would make two different issues one.
    constraint number_positive check (number > 0),
    -- A title is a line of an issue; a megabyte of one is an attack on the
    -- prompt, and ingest_issues cuts titles to 1,000 characters.
    constraint title_bounded check (char_length(title) <= 1000),
    -- A login is at most 39 (GitHub) or 40 (Gitea) characters.
    constraint author_bounded check (char_length(author) between 1 and 100),
    constraint labels_bounded check (cardinality(labels) <= 100),
    constraint labelled_by_is_object check (jsonb_typeof(labelled_by) = 'object')
);

comment on table forge_issue is
    'The open issues of each tracked repo as its last listing showed them (title, author, '
    'labels, who added the work labels); replaced by ingest_issues on every listing, kept '
    'across 304 answers. Text from the forge: bounded, and read only for the work labels and '
    'admission.';

-- ---------------------------------------------------------------------------
-- Child issues a plan job asked for. A row is written when the plan run is
-- delivered and is the promise that the issue will exist: the listener
-- creates it on the forge (child_issues_due → create → record_child_issue),
-- and only then is the implement job enqueued, with the plan job as parent.
--
-- Unique by the plan's issue and the child's key, not by the plan job: a
-- plan retried, or planned again as a new job, reports the same children
-- and must not create them twice on the forge.
-- ---------------------------------------------------------------------------
create table forge_child_issue (
    id uuid primary key default gen_random_uuid(),
    plan_job_id uuid not null references job (id) on delete cascade,
    repo_id uuid not null references tracked_repo (id) on delete cascade,
    parent_number bigint not null,
    key text not null,
    position integer not null,
    title text not null,
    body text not null,
    -- Appended to the body of the issue created on the forge. A listener that
    -- dies after the forge created the issue and before record_child_issue
    -- ran looks for the marker before creating again (attempts > 1).
    marker text not null,
    attempts integer not null default 0,
    next_attempt_at timestamptz not null default now(),
    last_error text,
    number bigint,
    html_url text,
    implement_job_id uuid references job (id) on delete set null,
    created_at timestamptz not null default now(),
    created_on_forge_at timestamptz,
    user_id text not null,

    unique (repo_id, parent_number, key),

    -- A key is what makes a retried plan idempotent, and it goes into the
    -- marker searched for on the forge: short, and no markup.
    constraint key_format check (key ~ '^[A-Za-z0-9._-]{1,64}$'),
    -- GitHub refuses titles over 256 characters; a body over 65,536.
    constraint title_bounded check (char_length(title) between 1 and 256),
    constraint body_bounded check (char_length(body) <= 60000),
    constraint attempts_not_negative check (attempts >= 0),
    -- Created on the forge is a pair: the number and where it lives.
    constraint created_complete
        check ((number is null) = (created_on_forge_at is null)
               and (number is null or html_url is not null)),
    constraint last_error_bounded check (char_length(last_error) <= 1000)
);

comment on table forge_child_issue is
    'Child issues a plan job reported, one row per (repo, plan issue, key): created on the '
    'forge by a listener (number, html_url), then enqueued as an implement job with the plan '
    'job as parent (implement_job_id).';

-- The loop that creates child issues asks "which are due?" every few seconds:
-- only rows not yet created are in the index.
create index forge_child_issue_due_idx
    on forge_child_issue (next_attempt_at) where number is null;
create index forge_child_issue_plan_idx on forge_child_issue (plan_job_id);

-- ---------------------------------------------------------------------------
-- Label mirroring (issue part 7). The seed's labels_synced_at records when
-- the labels last matched the job; these say what was written and when to
-- try again. The mirror writes one state label (ceaseless:pending, running,
-- delivered, blocked, failed) and removes the one it wrote before: it never
-- reads the issue's labels, so nothing a stranger puts there can steer it.
-- ---------------------------------------------------------------------------
alter table job
    add column labels_synced_label text,
    add column labels_retry_at timestamptz,
    add column labels_error text,
    -- A forge error page can be long; the job row is read by every claim.
    add constraint labels_error_bounded check (char_length(labels_error) <= 1000);

comment on column job.labels_synced_label is
    'The state label the mirror last wrote on the forge issue (ceaseless:<state>); NULL before '
    'the first sync. Written by the label identity, never read to decide anything.';
comment on column job.labels_retry_at is
    'When the label mirror may next try this job: set when handed out (so two listeners do '
    'not write the same labels) and after a failed sync (backoff).';
comment on column job.labels_error is
    'Why the last label sync failed; cleared by the next that succeeds. Never changes the job.';

-- The forge jobs whose mirrored label differs from their state: the mirror's
-- queue, in retry order. The predicate repeats _forge_state_label (functions/
-- 75_forge_labels.sql), inlined because an index predicate cannot call a
-- function defined after it; a test checks the two agree for every state.
create index job_labels_due_idx on job (labels_retry_at nulls first)
    where forge is not null
      and labels_synced_label is distinct from
          (case state
               when 'pending' then 'ceaseless:pending'
               when 'claimed' then 'ceaseless:running'
               when 'running' then 'ceaseless:running'
               when 'delivered' then 'ceaseless:delivered'
               when 'blocked' then 'ceaseless:blocked'
               else 'ceaseless:failed'
           end);

-- ---------------------------------------------------------------------------
-- A run that ends asking for a human. Its job is blocked with the reason and
-- a notification: retrying it would only ask again.
-- ---------------------------------------------------------------------------
alter table agent_run drop constraint outcome_known;
alter table agent_run add constraint outcome_known
    check (outcome in ('succeeded', 'failed', 'rate_limited', 'budget_exhausted',
                       'output_budget_exhausted', 'timed_out', 'cancelled', 'lease_expired',
                       'auth_failed', 'needs_human')) not valid;

-- ---------------------------------------------------------------------------
-- Settings.
-- ---------------------------------------------------------------------------
insert into settings (key, value, description) values
    ('forge_keep_failed_workspaces', 'false',
     'Keep the checkout of a forge job whose run did not succeed (true) for a post-mortem, '
     'or remove it like every other (false, the default).'),
    ('forge_plan_max_children', '20',
     'The most child issues one plan may ask for; a larger children block fails the plan.')
on conflict (key) do nothing;

-- ---------------------------------------------------------------------------
-- Row-level security: a user sees the issues and child issues of its own
-- repos; the listener and operators see all.
-- ---------------------------------------------------------------------------
alter table forge_issue enable row level security;
create policy all_rows on forge_issue to ceaseless_listener, ceaseless_operator
    using (true) with check (true);
create policy own_rows on forge_issue to ceaseless_user
    using (exists (select from tracked_repo r where r.id = forge_issue.repo_id));

alter table forge_child_issue enable row level security;
create policy all_rows on forge_child_issue to ceaseless_listener, ceaseless_operator
    using (true) with check (true);
create policy own_rows on forge_child_issue to ceaseless_user
    using (user_id = current_user);
