-- Agent output is not trusted.
--
-- An agent's output reaches the queue's state: a reported rate-limit reset
-- pauses a whole lane, a reported session id goes back onto the next
-- attempt's command line. Agents read untrusted text (webhook bodies, event
-- content), so what they print is bounded here:
--
-- - a reset time is clamped to rate_limit_max_wait_secs (finish_runs). A
--   reply naming year 9999 paused its lane until then: one injected webhook
--   body disabled a lane;
-- - a session id handed back to an agent must have the shape its CLI prints
--   (a UUID for Claude Code, ses_… for opencode), not merely "no leading
--   dash": anything else is not a session either CLI can resume;
-- - an agent CLI that cannot authenticate ends its run `auth_failed`: the
--   job is blocked for a person to log the agent in, with a notification,
--   instead of burning its attempts on a failure no retry can fix.
--
-- The widened and tightened CHECKs are added NOT VALID, so this migration
-- takes its ACCESS EXCLUSIVE locks only for a moment instead of scanning
-- agent_run and job under them: the rows already stored satisfy them (a
-- widened list admits every old value; the job rows that break the new
-- session rule are cleared first, in this transaction), and every new or
-- updated row is checked.

set local search_path = ceaseless, pg_catalog, public;

insert into settings (key, value, description) values
    ('rate_limit_max_wait_secs', '86400',
     'Longest wait a rate-limit reset reported by an agent may impose, in seconds: its job '
     'waits and its lane pauses until the reported time, but never longer than this after '
     'the run ended. Agents print what their prompt tells them to; without a ceiling, one '
     'reply naming the year 9999 stopped its lane for good.')
on conflict (key) do nothing;

-- auth_failed: the agent's CLI could not authenticate with its provider
-- (Claude Code's "Not logged in · Please run /login", opencode's
-- ProviderAuthError, an HTTP 401). Without its own outcome it was `failed`
-- and retried until its attempts ran out, though only a person can fix it.
alter table agent_run drop constraint agent_run_outcome_check;
alter table agent_run add constraint outcome_known
    check (outcome in ('succeeded', 'failed', 'rate_limited',
                       'budget_exhausted', 'output_budget_exhausted',
                       'timed_out', 'cancelled', 'lease_expired', 'auth_failed')) not valid;

-- 'job': a notification about a job itself (an agent that needs a login
-- blocked it), for jobs of every kind, not only routines' and loops'. Without
-- it, a blocked forge or task job told nobody.
alter table notifications drop constraint notifications_source_table_check;
alter table notifications add constraint source_table_known
    check (source_table in ('routine_runs', 'topology_runs', 'job')) not valid;

-- A session id goes onto the agent's command line as --resume=<id> /
-- --session=<id>. Ids of another shape are no session the CLIs can resume;
-- forgetting one costs a fresh session. The rule is _resume_session_id_ok
-- (functions/10_jobs.sql), spelled out here because migrations run before
-- functions exist; the job validation trigger names the field and the value
-- before this CHECK can print the row.
update job set resume_session_id = null
where resume_session_id !~ '^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|ses_[0-9A-Za-z]{26})$';

alter table job drop constraint resume_session_id_plausible;
alter table job add constraint resume_session_id_resumable
    check (resume_session_id ~ '^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|ses_[0-9A-Za-z]{26})$') not valid;
