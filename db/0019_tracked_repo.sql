-- Tracked repositories as the forge lane's API (spec section 8, issue part 1):
-- what a row needs beyond the seed's columns to be polled — the forge's API
-- address, the labels that mean discover / plan / implement, who may ask for
-- work, the quiet window's time zone, the poll schedule's bookkeeping, the
-- last error — and an owner under the row-level security model of 0016/0017.
--
-- Function bodies live in functions/70_tracked_repo.sql (validation, the
-- quiet window, the clamped interval, due_repos, finish_repo_poll) and
-- functions/71_repo_status.sql (the operator view).

set local search_path = ceaseless, pg_catalog, public;

-- ---------------------------------------------------------------------------
-- Where the forge's REST API is. GitHub's is https://api.github.com; GitHub
-- Enterprise and every Gitea host have their own, so the host cannot be
-- inferred from `forge`. Rows stored before this migration get GitHub's, or
-- for Gitea the clone URL's host with Gitea's /api/v1 (a row whose clone URL
-- has no http(s) host fails the NOT NULL below, loudly: guess no further).
-- ---------------------------------------------------------------------------
alter table tracked_repo add column api_url text;
update tracked_repo
   set api_url = case forge
                     when 'github' then 'https://api.github.com'
                     else substring(clone_url from '^(https?://[^/@]+)') || '/api/v1'
                 end;
alter table tracked_repo alter column api_url set not null;
comment on column tracked_repo.api_url is
    'Base URL of the forge''s REST API, without a trailing slash and without credentials: '
    'https://api.github.com (the default for forge github), https://ghe.example.com/api/v3, '
    'https://gitea.example.com/api/v1.';

-- ---------------------------------------------------------------------------
-- The labels that make an issue work, one per kind. They replace the seed's
-- flat `labels text[]`, which could not say which label asks for which kind;
-- nothing read it. The seed's rule stays: these are the only labels ever read,
-- and only as the request for work they are. The labels ceaseless writes to
-- mirror a job's state are never read to decide anything.
-- ---------------------------------------------------------------------------
alter table tracked_repo drop column labels;
alter table tracked_repo
    add column discover_label text not null default 'ceaseless:discover',
    add column plan_label text not null default 'ceaseless:plan',
    add column implement_label text not null default 'ceaseless:implement',
    -- One label meaning two kinds would make one issue two jobs' work, and
    -- which one ran would depend on the order the poller looked: refused.
    add constraint labels_distinct
        check (discover_label <> plan_label and discover_label <> implement_label
               and plan_label <> implement_label);
comment on column tracked_repo.discover_label is
    'The label on the tracking issue that asks for a discover job (default ceaseless:discover).';
comment on column tracked_repo.plan_label is
    'The label on an issue that asks for a plan job (default ceaseless:plan).';
comment on column tracked_repo.implement_label is
    'The label on an issue that asks for an implement job (default ceaseless:implement).';

-- ---------------------------------------------------------------------------
-- Admission: whose issues get work. An issue's text reaches an agent that can
-- push code, so anybody able to open an issue on a public repository would
-- otherwise be able to steer it. Empty admits nobody: a repository added
-- without naming its authors does nothing until it does, which is loud (its
-- issues stay untouched) rather than open to the world.
-- ---------------------------------------------------------------------------
alter table tracked_repo
    add column allowed_authors text[] not null default '{}';
comment on column tracked_repo.allowed_authors is
    'Forge logins whose issues (opened or labelled by them) get work; empty admits nobody. '
    'A child issue created by a plan inherits its parent job''s admission.';

-- ---------------------------------------------------------------------------
-- The quiet window's zone. HH:MM means nothing without one, and a fixed UTC
-- offset would move the window by an hour twice a year.
-- ---------------------------------------------------------------------------
alter table tracked_repo
    add column quiet_timezone text not null default 'UTC';
comment on column tracked_repo.quiet_timezone is
    'IANA time zone of quiet_from / quiet_until (default UTC); the window follows its '
    'daylight-saving changes.';

-- ---------------------------------------------------------------------------
-- Poll bookkeeping. interval_seconds stays what the user said; the floor is
-- applied at use (_repo_interval), so raising or lowering the floor changes
-- every repo at once and lowering it again restores what was asked.
-- ---------------------------------------------------------------------------
alter table tracked_repo
    add column next_poll_at timestamptz not null default now(),
    add column last_error text,
    add column last_error_at timestamptz,
    -- An error without its time cannot say whether it is still the news; a
    -- time without an error says nothing.
    add constraint last_error_complete
        check ((last_error is null) = (last_error_at is null));
comment on column tracked_repo.next_poll_at is
    'When the repo is next due (due_repos); a new repo is due at once. due_repos moves it one '
    'interval on when it hands the repo out, finish_repo_poll sets it from the poll''s end.';
comment on column tracked_repo.last_error is
    'Why the last poll failed (HTTP status, timeout, bad JSON), as the poller recorded it; '
    'cleared by the next successful poll. Never holds a token.';
comment on column tracked_repo.last_error_at is
    'When last_error was recorded.';

-- Any number of listeners ask "which repos are due?" every few seconds: the
-- index holds only enabled repos, in due order, so the answer reads the due
-- ones and stops (due_repos; plan asserted in tests/sql/test_tracked_repo.py).
create index tracked_repo_due_idx on tracked_repo (next_poll_at) where enabled;

-- ---------------------------------------------------------------------------
-- Owners (spec section 10): a repo is an owned row like a loop; its jobs are
-- its owner's.
-- ---------------------------------------------------------------------------
alter table tracked_repo add column user_id text not null default current_user;
comment on column tracked_repo.user_id is
    'The role that owns this repo; RLS shows a user role only its own.';
create index tracked_repo_user_idx on tracked_repo (user_id, created_at desc);

alter table tracked_repo enable row level security;
create policy all_rows on tracked_repo to ceaseless_listener, ceaseless_operator
    using (true) with check (true);
-- WITH CHECK refuses a row naming another owner: a user can neither point
-- someone else's work at a repo nor hand its own repo away.
create policy own_rows on tracked_repo to ceaseless_user
    using (user_id = current_user) with check (user_id = current_user);

-- ---------------------------------------------------------------------------
-- Operator policy of the forge lane.
-- ---------------------------------------------------------------------------
insert into settings (key, value, description) values
    ('forge_min_interval_secs', '60',
     'Floor on a tracked repo''s poll interval, applied at use: a repo asking for less is '
     'polled this often, so one row cannot spend the forge''s rate limit for every other.'),
    ('forge_token_source',
     '{"env": {"github": "CEASELESS_GITHUB_TOKEN", "gitea": "CEASELESS_GITEA_TOKEN"}, '
     '"label_env": {"github": "CEASELESS_GITHUB_LABEL_TOKEN", '
     '"gitea": "CEASELESS_GITEA_LABEL_TOKEN"}, "file": null}',
     'Where the listener finds forge tokens: the names of environment variables per forge '
     '(env: the runner''s identity; label_env: the separate identity that writes labels), or '
     'file: the path of a secrets file. Names and paths only: never put a token here.')
on conflict (key) do nothing;
