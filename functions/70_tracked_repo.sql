-- Tracked repositories: validation of what users store, and the poll schedule.
--
-- Called by: PostgreSQL, before each INSERT and UPDATE of tracked_repo
-- (tracked_repo_validate); the listener's forge poller (due_repos, then
-- finish_repo_poll per repo); the forge intake (_forge_lock_repo,
-- 71_forge_issues.sql); repo_status (90_views.sql) and operators
-- (_repo_quiet_at, _repo_interval).
-- Guarantees:
-- - nothing half-valid is stored: forge, owner, repo, api_url, clone_url,
--   default_branch, interval_seconds, the quiet window and its zone, the
--   three labels, allowed_authors and tracking_issue are checked on every
--   INSERT and on every UPDATE that changes more than the poll bookkeeping;
--   the error (CE422) names the field, the rule and a bounded value; api_url
--   defaults to https://api.github.com for forge github; shortening
--   interval_seconds brings next_poll_at forward to one new interval from now;
-- - tokens_allowed (may the listener's forge tokens be used for the repo) is
--   false on every row a user role inserts, and on every row whose forge,
--   owner, repo, api_url or clone_url a user role changes; only an operator,
--   a listener or a superuser sets it;
-- - no credential is stored: api_url may carry no user information at all,
--   clone_url no password (ssh://git@host/… names a user, not a secret);
-- - interval_seconds is stored as the user gave it and clamped at use to the
--   forge_min_interval_secs setting (_repo_interval);
-- - due_repos hands each due repo to one caller: it locks the rows FOR NO KEY
--   UPDATE SKIP LOCKED and, in the same statement, moves next_poll_at one
--   clamped interval on, so neither a concurrent caller nor a later one
--   within the interval gets the repo again, whether or not the first caller
--   keeps its transaction open while it polls;
-- - a repo inside its quiet window, or disabled, is never handed out.

-- Why p_ref is not a branch name git accepts (git check-ref-format --branch),
-- or NULL. The checkout runs `git clone --branch <default_branch>`: a name
-- git refuses would fail every job of the repo, long after it was stored.
create or replace function _git_branch_error(p_ref text)
returns text
language sql immutable
as $$
    select case
        when p_ref is null or p_ref = '' then 'must not be empty'
        when p_ref ~ '[[:cntrl:] ~^:?*\[\\]' then
            'must not contain spaces, control characters or any of ~ ^ : ? * [ \'
        when p_ref ~ '\.\.' then 'must not contain ..'
        when p_ref ~ '@\{' then 'must not contain @{'
        when p_ref = '@' then 'must not be @'
        when p_ref ~ '^[-/]' then 'must not start with - or /'
        when p_ref ~ '(/|\.|\.lock)$' then 'must not end with /, . or .lock'
        when p_ref ~ '//' then 'must not contain //'
        when p_ref ~ '(^|/)\.' then 'no part may start with .'
        when p_ref ~ '\.lock/' then 'no part may end with .lock'
    end;
$$;

comment on function _git_branch_error(text) is
    'NULL when p_ref is a branch name git accepts (check-ref-format --branch rules), else why '
    'not; never raises.';

-- Why p_url is not an address `git clone` can use without a stored secret,
-- or NULL: a URL (http, https, ssh, git, file) without a password, an
-- scp-style address (git@host:owner/repo.git), or an absolute local path
-- (tests clone local bare repositories).
create or replace function _clone_url_error(p_url text)
returns text
language sql immutable
as $$
    select case
        when p_url is null or p_url = '' then 'must not be empty'
        when p_url ~ '[[:cntrl:]]' then 'must not contain control characters'
        when p_url ~* '^[a-z][a-z0-9+.-]*://' then
            case
                when p_url !~* '^(https?|ssh|git|file)://' then
                    'a URL must use http, https, ssh, git or file'
                when p_url ~ '^[^:]+://[^/@]*:[^/@]*@' then
                    'must not hold a password: the listener supplies credentials'
                when p_url ~ '\s' then 'must not contain whitespace'
                when p_url ~* '^file://' then case when p_url ~ '^file:///' then null
                                                 else 'a file URL must be file:///absolute/path' end
                when p_url !~ '^[^:]+://[^/@[:space:]]*@?[A-Za-z0-9.\[\]:-]+(:[0-9]+)?/.' then
                    'a URL needs a host and a path'
            end
        when p_url ~ '^/' then null
        when p_url ~ '^([A-Za-z0-9._-]+@)?[A-Za-z0-9][A-Za-z0-9.-]*:[^[:space:]]+$' then null
        else 'must be a URL (https://host/owner/repo.git), an scp-style address '
             '(git@host:owner/repo.git) or an absolute local path'
    end;
$$;

comment on function _clone_url_error(text) is
    'NULL when p_url is a clone address without a stored secret (URL, scp-style address or '
    'absolute local path), else why not; never raises.';

-- Check a tracked repo in full, filling api_url's default. Returns the row
-- to store. Raises CE422 (_invalid_value) at the first bad field.
create or replace function _validated_repo(p_row tracked_repo)
returns tracked_repo
language plpgsql stable
as $$
declare
    v_error text;
    v_labels text[] := array[p_row.discover_label, p_row.plan_label, p_row.implement_label];
    v_label_fields text[] := array['discover_label', 'plan_label', 'implement_label'];
    v_author text;
begin
    if p_row.forge is null or p_row.forge not in ('github', 'gitea') then
        perform _invalid_value('tracked_repo.forge', 'must be github or gitea',
                               to_jsonb(p_row.forge));
    end if;

    -- GitHub logins: letters, digits and single hyphens, up to 39; Gitea also
    -- allows . and _. Anything else cannot name an account on the forge and
    -- would be pasted into API paths.
    if p_row.forge = 'github' then
        if p_row.owner is null or char_length(p_row.owner) > 39
           or p_row.owner !~ '^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?$' then
            perform _invalid_value('tracked_repo.owner',
                                   'must be a GitHub account name: up to 39 letters, digits or '
                                   'hyphens, not starting or ending with a hyphen',
                                   to_jsonb(p_row.owner));
        end if;
    elsif p_row.owner is null or char_length(p_row.owner) > 40
          or p_row.owner !~ '^[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?$' then
        perform _invalid_value('tracked_repo.owner',
                               'must be a Gitea account name: up to 40 letters, digits, '
                               'hyphens, dots or underscores, starting and ending with a letter, '
                               'digit or underscore',
                               to_jsonb(p_row.owner));
    end if;
    if p_row.repo is null or char_length(p_row.repo) > 100
       or p_row.repo !~ '^[A-Za-z0-9._-]+$' or p_row.repo in ('.', '..') then
        perform _invalid_value('tracked_repo.repo',
                               'must be a repository name: up to 100 letters, digits, hyphens, '
                               'dots or underscores, not . or ..',
                               to_jsonb(p_row.repo));
    end if;

    if p_row.api_url is null and p_row.forge = 'github' then
        p_row.api_url := 'https://api.github.com';
    end if;
    if p_row.api_url is null then
        perform _invalid_value('tracked_repo.api_url',
                               'a gitea repo needs its host''s API URL, e.g. '
                               'https://gitea.example.com/api/v1',
                               null);
    end if;
    if p_row.api_url !~* '^https?://[^/@?#[:space:]]+(/[^?#[:space:]]*)?$' then
        perform _invalid_value('tracked_repo.api_url',
                               'must be an absolute http(s) URL with no credentials, query or '
                               'fragment',
                               to_jsonb(p_row.api_url));
    end if;
    if p_row.api_url ~ '/$' then
        perform _invalid_value('tracked_repo.api_url', 'must not end with /',
                               to_jsonb(p_row.api_url));
    end if;

    v_error := _clone_url_error(p_row.clone_url);
    if v_error is not null then
        perform _invalid_value('tracked_repo.clone_url', v_error, to_jsonb(p_row.clone_url));
    end if;
    v_error := _git_branch_error(p_row.default_branch);
    if v_error is not null then
        perform _invalid_value('tracked_repo.default_branch',
                               'must be a git branch name: ' || v_error,
                               to_jsonb(p_row.default_branch));
    end if;

    if p_row.interval_seconds is null or p_row.interval_seconds <= 0 then
        perform _invalid_value('tracked_repo.interval_seconds',
                               'must be a positive number of seconds (the forge_min_interval_secs '
                               'floor applies at use)',
                               to_jsonb(p_row.interval_seconds));
    end if;

    if (p_row.quiet_from is null) <> (p_row.quiet_until is null) then
        perform _invalid_value(case when p_row.quiet_from is null then 'tracked_repo.quiet_from'
                                     else 'tracked_repo.quiet_until' end,
                               'a quiet window needs both quiet_from and quiet_until, or neither',
                               null);
    end if;
    if p_row.quiet_from !~ '^([01][0-9]|2[0-3]):[0-5][0-9]$' then
        perform _invalid_value('tracked_repo.quiet_from', 'must be HH:MM, 00:00 to 23:59',
                               to_jsonb(p_row.quiet_from));
    end if;
    if p_row.quiet_until !~ '^([01][0-9]|2[0-3]):[0-5][0-9]$' then
        perform _invalid_value('tracked_repo.quiet_until', 'must be HH:MM, 00:00 to 23:59',
                               to_jsonb(p_row.quiet_until));
    end if;
    if p_row.quiet_from = p_row.quiet_until then
        perform _invalid_value('tracked_repo.quiet_until',
                               'must differ from quiet_from (for no quiet window, leave both unset)',
                               to_jsonb(p_row.quiet_until));
    end if;
    v_error := _timezone_error(p_row.quiet_timezone);
    if v_error is not null then
        perform _invalid_value('tracked_repo.quiet_timezone', v_error,
                               to_jsonb(p_row.quiet_timezone));
    end if;

    -- Labels are compared as the forge shows them: GitHub trims them and caps
    -- them at 50 characters, so a padded or longer one would never match.
    for i in 1 .. 3 loop
        perform _check_not_blank('tracked_repo.' || v_label_fields[i], v_labels[i]);
        if v_labels[i] <> btrim(v_labels[i]) or char_length(v_labels[i]) > 50 then
            perform _invalid_value('tracked_repo.' || v_label_fields[i],
                                   'must be at most 50 characters without leading or trailing '
                                   'spaces',
                                   to_jsonb(v_labels[i]));
        end if;
        for j in 1 .. i - 1 loop
            if lower(v_labels[i]) = lower(v_labels[j]) then
                perform _invalid_value('tracked_repo.' || v_label_fields[i],
                                       format('must differ from %s (labels match without case)',
                                              v_label_fields[j]),
                                       to_jsonb(v_labels[i]));
            end if;
        end loop;
    end loop;

    if p_row.allowed_authors is null then
        perform _invalid_value('tracked_repo.allowed_authors',
                               'must be a list (empty admits nobody)', null);
    end if;
    foreach v_author in array p_row.allowed_authors loop
        if v_author is null or v_author !~ '^[A-Za-z0-9_.-]+$' then
            perform _invalid_value('tracked_repo.allowed_authors',
                                   'each entry must be a forge login (letters, digits, - . _)',
                                   to_jsonb(v_author));
        end if;
    end loop;
    if cardinality(p_row.allowed_authors)
       <> (select count(distinct lower(a)) from unnest(p_row.allowed_authors) a) then
        perform _invalid_value('tracked_repo.allowed_authors', 'must not name a login twice',
                               to_jsonb(p_row.allowed_authors));
    end if;

    if p_row.tracking_issue is not null and p_row.tracking_issue <= 0 then
        perform _invalid_value('tracked_repo.tracking_issue', 'must be a positive issue number',
                               to_jsonb(p_row.tracking_issue));
    end if;
    if p_row.discover_cooldown_secs is null or p_row.discover_cooldown_secs < 0 then
        perform _invalid_value('tracked_repo.discover_cooldown_secs',
                               'must be zero or more seconds',
                               to_jsonb(p_row.discover_cooldown_secs));
    end if;
    perform _check_not_blank('tracked_repo.user_id', p_row.user_id);
    return p_row;
end;
$$;

comment on function _validated_repo(tracked_repo) is
    'Check a tracked repo in full and fill api_url''s default (GitHub''s); raises CE422 naming '
    'the field, the rule and the value at the first bad one.';

-- The poll bookkeeping: columns due_repos and finish_repo_poll write on every
-- poll, which change nothing a user configured.
create or replace function _repo_bookkeeping()
returns text[]
language sql immutable
as $$
    select array['next_poll_at', 'last_polled_at', 'last_etag', 'last_error', 'last_error_at'];
$$;

comment on function _repo_bookkeeping() is
    'The tracked_repo columns that only record polling; an UPDATE of these alone is not '
    're-validated.';

create or replace function _tg_tracked_repo_validate()
returns trigger
language plpgsql
as $$
begin
    if tg_op = 'UPDATE'
       and to_jsonb(new) - _repo_bookkeeping() = to_jsonb(old) - _repo_bookkeeping() then
        -- A poll's bookkeeping re-checks nothing: the configuration is as
        -- valid as when it was stored.
        return new;
    end if;
    new := _validated_repo(new);
    -- The listener's forge tokens are spent on a repo only when an operator
    -- allowed it (db/0030): a user role can neither allow it nor keep the
    -- allowance while pointing the repo at another repository.
    if not _acts_for_everyone()
       and (tg_op = 'INSERT'
            or (new.forge, new.owner, new.repo, new.api_url, new.clone_url)
               is distinct from (old.forge, old.owner, old.repo, old.api_url, old.clone_url)) then
        new.tokens_allowed := false;
    end if;
    -- A shorter interval takes effect now, not after the longer one ends: a
    -- repo moved from daily to five-minute polls would otherwise wait a day.
    if tg_op = 'UPDATE' and new.interval_seconds < old.interval_seconds then
        new.next_poll_at := least(new.next_poll_at, now() + _repo_interval(new));
    end if;
    return new;
end;
$$;

comment on function _tg_tracked_repo_validate() is
    'Before INSERT/UPDATE on tracked_repo: validate the configuration in full (CE422 naming field, '
    'rule and value) and fill api_url''s default; tokens_allowed is false on a row a user role '
    'writes or retargets; a shorter interval brings next_poll_at forward; poll bookkeeping '
    'alone is not re-checked.';

create or replace trigger tracked_repo_validate
    before insert or update on tracked_repo
    for each row execute function _tg_tracked_repo_validate();

comment on trigger tracked_repo_validate on tracked_repo is
    'Nothing half-valid is stored: every configured column is checked before the row is written.';

-- Is p_now inside the repo's quiet window? The instant is read as wall-clock
-- time in quiet_timezone, so the window keeps its local hours across
-- daylight-saving changes. A window whose start is after its end crosses
-- midnight (22:00-06:00: quiet from 22:00 to 06:00 the next morning). The
-- start is inside the window, the end is not. On a day whose clocks skip
-- part of the window, the skipped wall-clock minutes never happen.
-- PL/pgSQL: a SQL function with a SET clause is never inlined and is planned
-- again on every call, and the forge intake and poller call this per row.
create or replace function _repo_quiet_at(p_repo tracked_repo, p_now timestamptz default now())
returns boolean
language plpgsql stable
as $$
begin
    return (select case
                    when p_repo.quiet_from is null then false
                    when p_repo.quiet_from < p_repo.quiet_until then
                        v.local >= p_repo.quiet_from::time and v.local < p_repo.quiet_until::time
                    else
                        v.local >= p_repo.quiet_from::time or v.local < p_repo.quiet_until::time
                end
                from (select (p_now at time zone p_repo.quiet_timezone)::time as local) v);
end;
$$;

comment on function _repo_quiet_at(tracked_repo, timestamptz) is
    'True when p_now falls in the repo''s quiet window, read as wall-clock time in its '
    'quiet_timezone (DST-safe; a window may cross midnight; start inside, end outside).';

-- The interval the repo is polled at: what it asked for, but never less than
-- the forge_min_interval_secs floor. Security definer (99_access.sql): a user
-- role may not read settings, yet repo_status shows it the interval used.
-- PL/pgSQL: a SQL function with a SET clause is never inlined and is planned
-- again on every call, and the forge intake and poller call this per row.
create or replace function _repo_interval(p_repo tracked_repo)
returns interval
language plpgsql stable
as $$
begin
    return (select make_interval(secs => greatest(p_repo.interval_seconds,
                                          _setting_int('forge_min_interval_secs'))));
end;
$$;

comment on function _repo_interval(tracked_repo) is
    'The repo''s poll interval clamped at use to the forge_min_interval_secs setting; the stored '
    'interval_seconds stays what the user asked for.';

-- The enabled repos whose next poll has come and that are not quiet at
-- p_now, oldest due first, at most p_limit: each handed to this caller only.
-- Locks: FOR NO KEY UPDATE SKIP LOCKED on the rows handed out, which another
-- listener's due_repos skips; the same statement moves next_poll_at one
-- clamped interval on, so after this transaction commits no caller gets the
-- repo again before then, even if its poll never reports back
-- (finish_repo_poll then sets the real next time).
create or replace function due_repos(p_now timestamptz default now(), p_limit integer default 10)
returns setof tracked_repo
language sql
as $$
    -- due: walks tracked_repo_due_idx in due order and stops after p_limit
    -- handed-out rows; a quiet repo is read and left (it is due, only not
    -- now), a repo another caller holds is skipped, not waited for.
    with due as (
        select r.id
        from tracked_repo r
        where r.enabled
          and r.next_poll_at <= p_now
          and not _repo_quiet_at(r, p_now)
        order by r.next_poll_at
        limit p_limit
        for no key update skip locked
    )
    -- The update finds each handed-out row by its key (an array probe of
    -- the primary key): a join with `due` may be planned as a scan of every
    -- repo, since the generic plan cannot know how few are due.
    update tracked_repo r
       set next_poll_at = p_now + _repo_interval(r)
     where r.id = any (array(select id from due))
    returning r.*;
$$;

comment on function due_repos(timestamptz, integer) is
    'Hand out up to p_limit enabled repos due at p_now and outside their quiet window, each to '
    'one caller only (SKIP LOCKED), moving their next_poll_at one clamped interval on.';

-- The repo, locked: ingests of one repo queue (two callers cannot both
-- decide "no job yet"), and a poll's end is recorded on the row it locked.
-- Raises CE404 for an unknown id.
create or replace function _forge_lock_repo(p_repo_id uuid)
returns tracked_repo
language plpgsql
as $$
declare
    v_repo tracked_repo;
begin
    select r.* into v_repo from tracked_repo r where r.id = p_repo_id for no key update;
    if not found then
        raise exception 'no tracked repo with id %', p_repo_id using errcode = 'CE404';
    end if;
    return v_repo;
end;
$$;

comment on function _forge_lock_repo(uuid) is
    'The tracked repo with this id, locked FOR NO KEY UPDATE (ingests and poll ends of one repo '
    'queue); CE404 when there is none.';

-- Record a poll's end. Success (p_error NULL): last_polled_at, last_etag
-- (p_etag; NULL keeps the one before) and the last error cleared. Failure:
-- last_error (first 1000 characters) and last_error_at, the etag kept so the
-- next poll is still conditional. The next poll is one clamped interval
-- after p_now, or p_next_poll_at when that is later (a rate limit's reset or
-- Retry-After defers the repo, never hastens it).
-- Raises: CE404 when no repo has the id.
create or replace function finish_repo_poll(
    p_repo_id uuid,
    p_now timestamptz default now(),
    p_etag text default null,
    p_error text default null,
    p_next_poll_at timestamptz default null
)
returns timestamptz
language plpgsql
as $$
declare
    v_repo constant tracked_repo := _forge_lock_repo(p_repo_id);
    v_next timestamptz;
begin
    update tracked_repo r
       set last_polled_at = p_now,
           last_etag = case when p_error is null then coalesce(p_etag, r.last_etag)
                            else r.last_etag end,
           last_error = left(p_error, 1000),
           last_error_at = case when p_error is null then null else p_now end,
           next_poll_at = greatest(p_now + _repo_interval(r), p_next_poll_at)
     where r.id = v_repo.id
    returning r.next_poll_at into v_next;
    return v_next;
end;
$$;

comment on function finish_repo_poll(uuid, timestamptz, text, text, timestamptz) is
    'Record a poll''s end (last_polled_at, last_etag on success, last_error on failure) and set '
    'next_poll_at to one clamped interval later, or to p_next_poll_at when later (rate limits).';
