-- The notifications outbox: sink settings and what makes one valid (a
-- webhook's format included), claim and finish, the wake-up NOTIFY, and the
-- notification of a job that ended for good.
--
-- Called by: listeners (claim_notifications, finish_notifications, through
-- listener/daemon/outbox.py), operators (the notification_sinks and
-- notification_max_attempts settings; notification_status in 90_views.sql
-- shows what is wrong with a sink, by _notification_sink_problem), and
-- PostgreSQL after every INSERT into notifications and every UPDATE of job.
-- Guarantees:
-- - a job that becomes blocked on what only a person can fix (its agent
--   could not authenticate; a forge run asked for a human), and a plain job
--   that fails or is abandoned for good, queues one notification as its
--   agent's notify_on_* flags ask, in the statement that ended it, whoever
--   ended its run (finish_runs, or any UPDATE);
-- - at-least-once delivery: a claim leases its rows for 60 s by pushing
--   next_attempt_at forward, so a listener that dies mid-delivery loses
--   nothing (the rows come due again) but may cause a second delivery;
--   receivers deduplicate on the notification id;
-- - claims lock with FOR UPDATE SKIP LOCKED and the lease keeps a claimed row
--   out of every other claim, so two listeners never deliver one row at once;
-- - `pg` sinks are delivered entirely inside claim_notifications: the
--   pg_notify is sent on commit of the same transaction that marks the row
--   delivered, so it is sent exactly when the row says it was;
-- - whether and when to retry is decided here (exponential backoff with
--   jitter, up to notification_max_attempts), never in the listener;
-- - every INSERT statement on notifications sends one NOTIFY
--   ceaseless_notification ({"count": n}), so listeners wake at once;
-- - the two settings are seeded once, by db/0007_seed_data.sql: this file
--   writes no rows, so re-applying it never brings back one an operator deleted.

-- The sink configuration. A deleted row falls back to logging everything
-- rather than failing: the log sink loses nothing, and a notification that
-- cannot be delivered anywhere is worse than one in the listener's log.
--
-- PL/pgSQL for its cached plan (a SQL function with a SET clause is planned
-- on every call, and this runs for every notification queued).
create or replace function _notification_sinks()
returns jsonb
language plpgsql stable
as $$
begin
    return coalesce((select s.value from settings s where s.key = 'notification_sinks'),
                    '{"default": {"type": "log"}}'::jsonb);
end;
$$;

comment on function _notification_sinks() is
    'The notification_sinks setting, or {"default": {"type": "log"}} when the row is missing.';

-- Why sink p_name of configuration p_sinks cannot deliver, or NULL when it
-- can. Checked before any delivery so a typo fails the notification with a
-- message naming the fix, instead of retrying a hopeless delivery five times
-- or, for pg sinks, raising inside the claim and blocking every other row.
-- The 30 s ceiling on webhook timeouts keeps each delivery inside the 60 s
-- claim lease, so a slow receiver cannot cause a duplicate by outliving it.
create or replace function _notification_sink_problem(p_name text, p_sinks jsonb)
returns text
language plpgsql immutable
as $$
declare
    c_headers constant text := 'notification sink %L (type webhook): "headers" must be an object '
                               'of strings, e.g. {"Authorization": "Bearer …"}';
    c_timeout constant text := 'notification sink %L (type webhook): "timeout_secs" must be a '
                               'number of seconds above 0 and at most 30';
    c_format constant text := 'notification sink %L (type webhook): "format" must be "generic" '
                              '(the notification as JSON), "slack" (text and blocks) or '
                              '"discord" (content); got %s';
    v_sink jsonb;
    v_type text;
begin
    if jsonb_typeof(p_sinks) is distinct from 'object' then
        return 'setting notification_sinks must be a JSON object mapping sink names to their '
               'configuration, e.g. {"default": {"type": "log"}}';
    end if;
    if not p_sinks ? p_name then
        return format('unknown notification sink %L: add it to ceaseless.settings key '
                      'notification_sinks (configured sinks: %s)',
                      p_name,
                      coalesce((select string_agg(format('%L', k), ', ' order by k)
                                from jsonb_object_keys(p_sinks) k), 'none'));
    end if;
    v_sink := p_sinks -> p_name;
    if jsonb_typeof(v_sink) <> 'object' then
        return format('notification sink %L must be a JSON object such as {"type": "log"}', p_name);
    end if;
    v_type := v_sink ->> 'type';
    if v_type = 'log' then
        return null;
    elsif v_type = 'pg' then
        -- pg_notify raises on an empty or over-long channel; catching it here
        -- keeps that error out of the claim.
        if jsonb_typeof(v_sink -> 'channel') is distinct from 'string'
           or octet_length(v_sink ->> 'channel') not between 1 and 63 then
            return format('notification sink %L (type pg) needs "channel": a LISTEN channel '
                          'name of 1 to 63 bytes', p_name);
        end if;
        return null;
    elsif v_type = 'webhook' then
        -- Nested IFs, not OR: SQL does not promise to evaluate OR's operands
        -- in order, and jsonb_each or a numeric cast on the wrong JSON type
        -- would raise inside the claim.
        if jsonb_typeof(v_sink -> 'url') is distinct from 'string'
           or (v_sink ->> 'url') !~* '^https?://[^/]' then
            return format('notification sink %L (type webhook) needs "url": an http:// or '
                          'https:// address', p_name);
        end if;
        if v_sink ? 'headers' then
            if jsonb_typeof(v_sink -> 'headers') <> 'object' then
                return format(c_headers, p_name);
            end if;
            if exists (select from jsonb_each(v_sink -> 'headers') h
                       where jsonb_typeof(h.value) <> 'string') then
                return format(c_headers, p_name);
            end if;
        end if;
        -- What the receiver reads: Slack's and Discord's incoming webhooks
        -- refuse any JSON without their own field (text, content).
        if v_sink ? 'format' then
            if jsonb_typeof(v_sink -> 'format') <> 'string' then
                return format(c_format, p_name, v_sink -> 'format');
            end if;
            if (v_sink ->> 'format') not in ('generic', 'slack', 'discord') then
                return format(c_format, p_name, v_sink -> 'format');
            end if;
        end if;
        if v_sink ? 'timeout_secs' then
            if jsonb_typeof(v_sink -> 'timeout_secs') <> 'number' then
                return format(c_timeout, p_name);
            end if;
            if (v_sink ->> 'timeout_secs')::numeric <= 0
               or (v_sink ->> 'timeout_secs')::numeric > 30 then
                return format(c_timeout, p_name);
            end if;
        end if;
        return null;
    end if;
    return format('notification sink %L has type %s; use "log", "pg" or "webhook"',
                  p_name, coalesce((v_sink -> 'type')::text, '(none)'));
end;
$$;

comment on function _notification_sink_problem(text, jsonb) is
    'Why sink p_name of the sink configuration p_sinks cannot deliver (unknown, malformed), '
    'or NULL when it can.';

-- Claim up to p_limit due pending notifications for listener p_worker, oldest
-- due first, and settle what SQL can settle on the spot:
-- - `pg` sinks: pg_notify on the sink's channel ({id, source_table,
--   source_id, kind, subject}) and mark delivered, in this transaction;
-- - unknown or malformed sinks: failed with the reason, never retried;
-- - rows whose attempts are already used up (their last claim expired
--   without a report): failed.
-- The rest (log and webhook sinks) come back with state 'claimed' and their
-- sink configuration for the listener to deliver, leased for 60 s: their
-- next_attempt_at moves 60 s ahead and attempts counts this one. The listener
-- reports through finish_notifications; if it never does, the rows come due
-- again when the lease passes (at-least-once).
--
-- Locks: the claimed rows, FOR UPDATE SKIP LOCKED, so concurrent claimers
-- split the due rows instead of queueing on them.
-- Raises: CE422 missing worker or p_limit below 1; CE500 when the
-- notification_max_attempts setting is missing.
create or replace function claim_notifications(
    p_worker text,
    p_limit integer,
    p_now timestamptz default now()
)
returns table (
    id uuid, state text, attempts integer, sink_name text, sink jsonb,
    kind text, subject text, body text, recipient text,
    source_table text, source_id uuid, created_at timestamptz, last_error text
)
language plpgsql
as $$
#variable_conflict use_column
declare
    -- Read once, so every row of the batch is judged and returned against the
    -- same configuration even if an operator changes it meanwhile.
    v_sinks jsonb := _notification_sinks();
    v_max integer;
    v_lease constant interval := interval '60 seconds';
    v_ids uuid[];
begin
    perform _check_claim('claim_notifications', p_worker, p_limit);
    v_max := _setting_int('notification_max_attempts');
    perform set_config('ceaseless.actor', p_worker, true);

    -- Due rows walk notifications_pending_idx in next_attempt_at order; a
    -- leased row is pending too but not yet due, so it is never picked twice.
    with picked as (
        select n.id, coalesce(n.channel, 'default') as sink_name
        from notifications n
        where n.status = 'pending'
          and n.next_attempt_at <= p_now
        order by n.next_attempt_at
        limit p_limit
        for update skip locked
    ),
    -- One verdict per row: why it cannot be delivered, else by whom.
    judged as (
        select p.id,
               p.attempts_left,
               case when not p.attempts_left
                        then format('gave up after %s attempts (notification_max_attempts = %s)%s',
                                    p.attempts, v_max,
                                    coalesce('; last error: ' || p.last_error,
                                             '; the last claim expired without a report'))
                    else _notification_sink_problem(p.sink_name, v_sinks)
               end as problem,
               v_sinks -> p.sink_name ->> 'type' as sink_type
        from (
            select pk.id, pk.sink_name, n.attempts, n.last_error, n.attempts < v_max as attempts_left
            from picked pk
            join notifications n on n.id = pk.id
        ) p
    ),
    moved as (
        update notifications n
        set attempts = n.attempts + case when j.attempts_left then 1 else 0 end,
            status = case when j.problem is not null then 'failed'
                          when j.sink_type = 'pg' then 'delivered'
                          else 'pending' end,
            delivered_at = case when j.problem is null and j.sink_type = 'pg' then p_now end,
            next_attempt_at = case when j.problem is null and j.sink_type <> 'pg'
                                   then p_now + v_lease
                                   else n.next_attempt_at end,
            last_error = coalesce(j.problem, n.last_error)
        from judged j
        where n.id = j.id
        returning n.id
    )
    select array_agg(m.id) into v_ids from moved m;

    -- Only this call can have moved these rows from pending to delivered, so
    -- the delivered ones are exactly the pg rows it settled. The NOTIFY goes
    -- out on commit, with the row that records it. The subject is cut so the
    -- payload stays far below pg_notify's 8000-byte limit. Each row is read
    -- by its key inside the fence and judged outside it: with the status
    -- beside the key, a young table's statistics let the planner read every
    -- delivered row (notifications_delivered_idx, kept for retention) and
    -- filter them by id, a claim costing as much as the delivered history.
    perform _announce(v_sinks -> coalesce(n.channel, 'default') ->> 'channel',
                      jsonb_build_object('id', n.id,
                                         'source_table', n.source_table,
                                         'source_id', n.source_id,
                                         'kind', n.kind,
                                         'subject', left(n.subject, 200))::text)
    from unnest(v_ids) as u(id)
    cross join lateral (select n.* from notifications n where n.id = u.id offset 0) n
    where n.status = 'delivered'
    order by n.created_at, n.id;

    return query
    select n.id,
           case n.status when 'pending' then 'claimed' else n.status end,
           n.attempts,
           coalesce(n.channel, 'default'),
           case when jsonb_typeof(v_sinks) = 'object' then v_sinks -> coalesce(n.channel, 'default') end,
           n.kind, n.subject, n.body, n.recipient,
           n.source_table, n.source_id, n.created_at, n.last_error
    from unnest(v_ids) as u(id)
    -- By key, as above: `id = any (…)` ran as a read of the whole table on a
    -- young table's statistics.
    cross join lateral (select n.* from notifications n where n.id = u.id offset 0) n
    order by n.created_at, n.id;
end;
$$;

comment on function claim_notifications(text, integer, timestamptz) is
    'Claim up to p_limit due pending notifications for listener p_worker. pg sinks are notified '
    'and marked delivered here, unknown or malformed sinks failed; the rest return as state '
    '''claimed'' with their sink config, leased for 60 s (at-least-once: an unreported claim '
    'comes due again).';

-- A delivery report (finish_notifications' p_results) as rows, one per id:
-- a success outranks a failure reported for the same id. A function of its
-- own for its estimate: the planner guesses a hundred rows for any
-- set-returning function, and against that many it hashed the report
-- against a read of every notification, twice a report, until the table
-- held ten thousand rows or so. A listener reports the few deliveries that
-- ended since its last report.
create or replace function _delivery_results(p_results jsonb)
returns table (id uuid, ok boolean, error text, attempt integer)
language plpgsql
immutable
rows 10
as $$
begin
    return query
    select distinct on ((r ->> 'id')::uuid)
           (r ->> 'id')::uuid,
           coalesce((r ->> 'ok')::boolean, false),
           coalesce(nullif(r ->> 'error', ''), 'delivery failed; the listener gave no reason'),
           (r ->> 'attempt')::integer
    from jsonb_array_elements(p_results) r
    order by (r ->> 'id')::uuid, coalesce((r ->> 'ok')::boolean, false) desc;
end;
$$;

comment on function _delivery_results(jsonb) is
    'finish_notifications'' p_results as rows (id, ok, error, attempt), one per id (a success '
    'first), planned as ten.';

-- Record what listener p_worker did with the notifications it claimed, as a
-- batch: p_results is a JSON array of {id, ok, error?, attempt?}. ok marks the
-- row delivered; otherwise it goes back to pending after an exponential
-- backoff with jitter, or to failed once notification_max_attempts are used.
-- `attempt` (the attempts value claim_notifications returned) fences off a
-- listener whose lease expired: its failure report is ignored once another
-- claim has taken the row, while a success is always kept, because the
-- receiver did get the notification. Rows already delivered are left alone,
-- so a duplicate or replayed report changes nothing.
--
-- Locks: the reported rows, in id order, so two finishers never deadlock.
-- Raises: CE422 when p_results is not a JSON array; CE500 when the
-- notification_max_attempts setting is missing.
create or replace function finish_notifications(
    p_worker text,
    p_results jsonb,
    p_now timestamptz default now()
)
returns table (
    id uuid, status text, attempts integer, next_attempt_at timestamptz, last_error text
)
language plpgsql
as $$
#variable_conflict use_column
declare
    v_max integer;
begin
    if jsonb_typeof(p_results) is distinct from 'array' then
        raise exception 'finish_notifications: p_results must be a JSON array of {id, ok, error}'
            using errcode = 'CE422';
    end if;
    v_max := _setting_int('notification_max_attempts');
    perform set_config('ceaseless.actor', coalesce(p_worker, ''), true);

    perform 1
    from notifications n
    where n.id in (select r.id from _delivery_results(p_results) r)
    order by n.id
    for update;

    return query
    update notifications n
    set status = case when r.ok then 'delivered'
                      when n.attempts >= v_max then 'failed'
                      else 'pending' end,
        delivered_at = case when r.ok then p_now end,
        next_attempt_at = case when r.ok or n.attempts >= v_max then n.next_attempt_at
                               else p_now + _retry_delay(n.attempts) end,
        last_error = case when r.ok then n.last_error else r.error end
    from _delivery_results(p_results) r
    where n.id = r.id
      and ((r.ok and n.status <> 'delivered')
           or (not r.ok and n.status = 'pending'
               and (r.attempt is null or r.attempt = n.attempts)))
    returning n.id, n.status, n.attempts, n.next_attempt_at, n.last_error;
end;
$$;

comment on function finish_notifications(text, jsonb, timestamptz) is
    'Record delivery results [{id, ok, error?, attempt?}]: ok → delivered; else retry after '
    'exponential backoff with jitter, or failed after notification_max_attempts. Stale failures '
    '(attempt superseded) and reports on delivered rows are ignored. Returns the rows it changed.';

-- New notifications: wake every listener at once instead of at its next poll.
-- One NOTIFY per statement, so a routine finishing with many recipients, or
-- a bulk insert, costs one message.
create or replace function _tg_notifications_insert()
returns trigger
language plpgsql
as $$
declare
    v_count bigint;
begin
    select count(*) into v_count from new_rows;
    if v_count > 0 then
        perform _announce('ceaseless_notification', jsonb_build_object('count', v_count)::text);
    end if;
    return null;
end;
$$;

comment on function _tg_notifications_insert() is
    'After INSERT on notifications: NOTIFY ceaseless_notification once per statement with {count}.';

-- CREATE OR REPLACE: DROP TRIGGER would lock the outbox against readers too.
select _statement_trigger('notifications_insert', 'insert', 'notifications');

-- A job that ends for good tells someone, by its agent's notify_on_* flags
-- and on its notify_channel (NULL: the default sink), for the job's owner:
--
-- | the job enters | when                                  | kind      | advice             |
-- |----------------|---------------------------------------|-----------|--------------------|
-- | blocked        | its run ended auth_failed: the agent  | attention | log the CLI in,    |
-- |                | could not authenticate                |           | then retry         |
-- | blocked        | its run ended needs_human: the agent  | attention | reply (reply_job)  |
-- |                | asks for a person                     |           |                    |
-- | blocked        | its run ended budget_exhausted: it    | attention | raise the ceiling  |
-- |                | passed its spend ceiling or max_turns |           | or reply           |
-- | failed         | a plain job (no routine, no topology  | failure   | the error, retry   |
-- |                | run): its attempts are used up        |           |                    |
-- | abandoned      | a plain job: every attempt's lease    | failure   | the error, retry   |
-- |                | expired                               |           |                    |
--
-- A blocked job's routine run or topology node waits for it, so its own
-- reply, raised ceiling or retry_job sends it on, whoever created it.
-- Routine and loop jobs that fail are announced by their routine (its
-- notify_on_failure, 44_routine_outcomes.sql) and their loop (its stopped
-- notification, 56_loop_firing.sql), so a failure is told once; a missing
-- login, an agent's question or a spent ceiling is told for every job, since
-- no routine or loop says what a person must do. The advice names the SQL and
-- the command that resume the job's session (reply_job, raise_job_budget). A
-- cancelled job was ended by a person.
--
-- Statement-level, like the job triggers of 25_notify_audit.sql: a finish
-- batch that blocks a thousand jobs of a lane whose login expired queues its
-- thousand notifications in one INSERT. A job counts once, when it enters
-- the state: a later UPDATE of a blocked row (its forge labels) is no new
-- block.
create or replace function _tg_job_ended()
returns trigger
language plpgsql
as $$
begin
    -- Most statements end nothing for good: read the new rows once and stop.
    if not exists (select from new_rows n where n.state in ('blocked', 'failed', 'abandoned')) then
        return null;
    end if;
    insert into notifications (source_table, source_id, kind, channel, subject, body, user_id)
    select 'job', e.id, m.kind, a.notify_channel, m.subject, m.body, j.user_id
    -- Entered one of the states in this statement. A set difference, not a
    -- join of the two transition tables: it is hashed or sorted, linear at
    -- any size, where a join planned for one row loops over the other table.
    from (select n.id, n.state from new_rows n where n.state in ('blocked', 'failed', 'abandoned')
          except
          select o.id, o.state from old_rows o
          where o.state in ('blocked', 'failed', 'abandoned')) e
    -- Each job, its agent and its run probed by key, the ended jobs on the
    -- outer side.
    cross join lateral (
        select j.agent, j.user_id, j.finished_at, j.last_error,
               j.routine_run_id is null and j.topology_run_id is null as plain
        from job j where j.id = e.id offset 0
    ) j
    cross join lateral (
        select a.notify_channel,
               case e.state when 'blocked' then a.notify_on_blocked
                            when 'failed' then a.notify_on_failed
                            else a.notify_on_abandoned end as wanted
        from agents a where a.name = j.agent offset 0
    ) a
    left join lateral (
        select r.outcome, r.error
        from agent_run r
        where e.state = 'blocked'
          and r.job_id = e.id
          and r.finished_at = j.finished_at
          and r.outcome in ('auth_failed', 'needs_human', 'budget_exhausted')
        order by r.started_at desc
        limit 1
    ) r on true
    cross join lateral (
        select format('select ceaseless.retry_job(%L);', e.id) as retry,
               format(E'Reply, and the agent resumes its session with your reply as its '
                      'prompt:\n  ceaseless job reply %s "your answer"\n  select '
                      'ceaseless.reply_job(%L, ''your answer'');', e.id, e.id) as reply
    ) x
    cross join lateral (
        select case when e.state = 'blocked' then 'attention' else 'failure' end as kind,
               case when r.outcome = 'auth_failed'
                        then format('job %s blocked: agent %s could not authenticate', e.id,
                                    j.agent)
                    when r.outcome = 'needs_human'
                        then format('job %s blocked: the agent asks for a human', e.id)
                    when r.outcome = 'budget_exhausted'
                        then format('job %s blocked: agent %s spent its budget', e.id, j.agent)
                    else format('job %s %s: agent %s', e.id, e.state, j.agent)
               end as subject,
               case when r.outcome = 'auth_failed'
                        then format(E'%s\n\nLog the agent''s CLI in (or fix its API key in '
                                    'agents.env), then run the job again: %s',
                                    left(coalesce(r.error, 'no detail given'), 2000), x.retry)
                    when r.outcome = 'needs_human'
                        then format(E'%s\n\n%s',
                                    left(coalesce(r.error, 'no reason given'), 2000), x.reply)
                    when r.outcome = 'budget_exhausted'
                        then format(E'%s\n\nRaise its ceiling and it resumes its session:\n'
                                    '  ceaseless job raise-budget %s USD\n  select '
                                    'ceaseless.raise_job_budget(%L, <usd>);\n\n%s',
                                    left(coalesce(r.error, 'no detail given'), 2000), e.id, e.id,
                                    x.reply)
                    when e.state = 'failed'
                        then format(E'%s\n\nIt used up its attempts. Run it again: %s',
                                    left(coalesce(j.last_error, 'no detail given'), 2000),
                                    x.retry)
                    else format(E'%s\n\nNo agent said it failed: its listener stopped '
                                'answering on every attempt (lease expired). Run it again: %s',
                                left(coalesce(j.last_error, 'no detail given'), 2000), x.retry)
               end as body
    ) m
    where a.wanted
      and (r.outcome is not null or (e.state <> 'blocked' and j.plain));
    return null;
end;
$$;

comment on function _tg_job_ended() is
    'After UPDATE on job: queue a notification for each job the statement ended for good, as '
    'its agent''s notify_on_* flags ask, on its notify_channel: blocked on a missing login '
    '(auth_failed), an agent''s question (needs_human) or a spent ceiling (budget_exhausted), '
    'any job, saying how to reply or raise the ceiling; failed or abandoned, a plain '
    'job (routines and loops announce their own). The body names the retry that works.';

select _statement_trigger('job_ended', 'update', 'job');
