-- Gated approvals: a node with "gate": "approval" waits for a person.
--
-- Called by: the run engine when a gated node's upstreams have all
-- succeeded (_request_approval, from 51_topology_runs.sql); owners and
-- operators (decide_approval); every listener's maintenance tick
-- (expire_approvals).
-- Guarantees:
-- - a gated node asks once per start: one approvals row per (run, node),
--   expiring approval_timeout_secs after the request when the node sets one,
--   the node awaiting_approval, and a notification queued in the outbox for
--   the run's owner (kind approval) whose body holds the exact SQL to approve
--   or reject; a node started again (retry_topology_run) asks again on the
--   same row, its earlier decision cleared (the audit log keeps it);
-- - an approval is decided once: approve → the node's job is enqueued and the
--   run runs again; reject → the node fails and the run with it (the error
--   names the node and who rejected), the rest cancelled; a second decision
--   is refused (CE409) naming the first, who and when;
-- - an undecided approval past expires_at is decided by 'ceaseless' as its
--   node's on_expiry says: `expired`, failing its run the same way (fail, the
--   default), `expired` with the node skipped, its downstream nodes running
--   without its output (skip), or `approved`, running the node (approve); a
--   reminder goes to
--   the owner remind_before_secs before the expiry, once per request;
-- - an approval of a run that ended otherwise (cancelled, or failed
--   elsewhere) stays undecided and can no longer be decided (CE409): nobody
--   decided it, and the record says so;
-- - NOTIFY ceaseless_run and audit of every request and decision: by
--   approvals_changed (25_notify_audit.sql).
-- Locks: the run row FOR NO KEY UPDATE before the approval row, the lock
-- order of 51_topology_runs.sql; the expiry sweep skips runs another
-- statement holds (SKIP LOCKED) and takes them at its next tick.

-- Ask for a node's approval: the row, the node awaiting it, and the owner's
-- notification. The caller holds the run row and passes a waiting node, so
-- an existing row is an earlier start's (a retried run): it is asked again.
create or replace function _request_approval(p_run_id uuid, p_node_id text, p_now timestamptz)
returns uuid
language plpgsql
as $$
declare
    v_id uuid;
    v_expires timestamptz;
    v_on_expiry text;
    v_owner text;
    v_loop text;
begin
    insert into approvals (topology_run_id, node_id, requested_at, expires_at, remind_at)
    select n.topology_run_id, n.node_id, p_now,
           p_now + make_interval(secs => n.approval_timeout_secs),
           p_now + make_interval(secs => n.approval_timeout_secs - n.remind_before_secs)
    from topology_nodes n
    where n.topology_run_id = p_run_id and n.node_id = p_node_id
    on conflict (topology_run_id, node_id) do update
    set requested_at = excluded.requested_at, expires_at = excluded.expires_at,
        remind_at = excluded.remind_at, reminded_at = null,
        decision = null, decided_by = null, decided_by_role = null, decided_at = null,
        note = null
    returning id, expires_at into v_id, v_expires;
    select n.on_expiry into v_on_expiry
    from topology_nodes n where n.topology_run_id = p_run_id and n.node_id = p_node_id;

    update topology_nodes set state = 'awaiting_approval'
    where topology_run_id = p_run_id and node_id = p_node_id;

    select r.user_id,
           case when r.loop_id is not null
                then format(' (loop %s, iteration %s)', r.loop_id, r.iteration) else '' end
    into v_owner, v_loop
    from topology_runs r where r.id = p_run_id;

    insert into notifications (source_table, source_id, kind, subject, body, user_id)
    values ('approvals', v_id, 'approval',
            format('topology run %s: node %s awaits approval', p_run_id, p_node_id),
            _approval_message(v_id, p_run_id, p_node_id, v_loop, v_expires, v_on_expiry),
            v_owner);
    return v_id;
end;
$$;

-- What an undecided approval's expiry does, as its notification, reminder
-- and explain_topology_run say it: one phrase per on_expiry, or nothing for
-- an approval that never expires.
create or replace function _approval_expiry_text(p_on_expiry text, p_expires timestamptz)
returns text
language sql stable
as $$
    select case when p_expires is null then ''
                when p_on_expiry = 'approve'
                    then format('; undecided, it is approved at %s', p_expires)
                when p_on_expiry = 'skip'
                    then format('; undecided, it is skipped at %s (the nodes after it run '
                                'without its output)', p_expires)
                else format('; undecided, it fails the run at %s', p_expires) end;
$$;

comment on function _approval_expiry_text(text, timestamptz) is
    'What an undecided approval''s expiry does, by on_expiry (fail, skip, approve), as a phrase '
    'for its notification and explain_topology_run; empty when it never expires.';

-- What an approval's notification (and its reminder) says: the node and run,
-- when it expires and what the expiry does, the SQL that decides it, and the
-- run's dashboard page when a listener serves one (the newest listener's
-- --http address, as it reported it at start).
create or replace function _approval_message(
    p_approval_id uuid, p_run_id uuid, p_node_id text, p_loop text, p_expires timestamptz,
    p_on_expiry text
)
returns text
language plpgsql stable
as $$
declare
    v_http text := (select l.http from listener_reports l where l.http is not null
                    order by l.started_at desc limit 1);
begin
    return format(E'Node %s of topology run %s%s waits for a decision%s.\n\n'
                  || E'Approve:\n  select ceaseless.decide_approval(%L, true, null, %L);\n\n'
                  || E'Reject:\n  select ceaseless.decide_approval(%L, false, null, %L);\n%s',
                  p_node_id, p_run_id, p_loop,
                  _approval_expiry_text(p_on_expiry, p_expires),
                  p_approval_id, 'approved', p_approval_id, 'rejected',
                  case when v_http is not null
                       then format(E'\nDashboard: http://%s/runs/%s\n', v_http, p_run_id)
                       else '' end);
end;
$$;

comment on function _approval_message(uuid, uuid, text, text, timestamptz, text) is
    'The body of an approval''s notification and reminder: node, run, expiry and what it does, '
    'the decide_approval calls, and the run''s dashboard link when a listener serves HTTP.';

comment on function _request_approval(uuid, text, timestamptz) is
    'Create the approval of a gated node (expiring after its approval_timeout_secs), mark the '
    'node awaiting_approval and queue the owner''s notification with the SQL to decide it.';

-- Decide an approval. p_decided_by names the person (NULL: the calling
-- role); decided_by_role and the audit row's actor are the login role that
-- called, which the caller cannot choose.
--
-- Security definer: a user may decide the approvals of its own runs,
-- operators and listeners any; one it may not decide is as unknown as one
-- that does not exist.
-- Locks: the run row, then the approval row.
-- Raises: CE404 unknown approval; CE409 already decided (naming the decision,
-- who and when) or its run has ended; CE422 p_approve NULL or a note over the
-- prompt cap.
create or replace function decide_approval(
    p_approval_id uuid,
    p_approve boolean,
    p_decided_by text,
    p_note text,
    p_now timestamptz default now()
)
returns void
language plpgsql
as $$
declare
    v_approval approvals;
    v_owner text;
    v_status text;
    v_state text;
    v_who text := coalesce(nullif(_trim_blank(left(p_decided_by, 200)), ''), _actor());
begin
    select a.* into v_approval from approvals a where a.id = p_approval_id;
    select r.user_id into v_owner from topology_runs r where r.id = v_approval.topology_run_id;
    if v_approval.id is null or not _acts_for(v_owner) then
        raise exception 'decide_approval: no approval with id %', p_approval_id
            using errcode = 'CE404';
    end if;
    if p_approve is null then
        raise exception 'decide_approval: p_approve must be true (approve) or false (reject); got NULL'
            using errcode = 'CE422';
    end if;
    perform _refuse_long('approvals.note', p_note, 'prompt');

    select r.status into v_status from topology_runs r
    where r.id = v_approval.topology_run_id for no key update;
    select * into v_approval from approvals where id = p_approval_id for update;
    if v_approval.decision is not null then
        raise exception 'decide_approval: approval % was already % by % at %',
            p_approval_id, v_approval.decision, v_approval.decided_by, v_approval.decided_at
            using errcode = 'CE409';
    end if;
    select n.state into v_state from topology_nodes n
    where n.topology_run_id = v_approval.topology_run_id and n.node_id = v_approval.node_id;
    if v_status not in ('running', 'awaiting_approval') or v_state <> 'awaiting_approval' then
        raise exception 'decide_approval: approval % can no longer be decided: its run % is %',
            p_approval_id, v_approval.topology_run_id, v_status
            using errcode = 'CE409';
    end if;

    update approvals
    set decision = case when p_approve then 'approved' else 'rejected' end,
        decided_by = v_who, decided_by_role = session_user, decided_at = p_now, note = p_note
    where id = p_approval_id;

    if p_approve then
        perform _enqueue_topology_node(v_approval.topology_run_id, v_approval.node_id);
        perform _settle_topology_run(v_approval.topology_run_id, p_now);
    else
        perform _fail_topology_node(
            v_approval.topology_run_id, v_approval.node_id,
            format('approval rejected by %s%s', v_who,
                   case when _is_blank(p_note) then '' else ': ' || left(p_note, 500) end),
            p_now);
    end if;
end;
$$;

comment on function decide_approval(uuid, boolean, text, text, timestamptz) is
    'Approve (the node''s job is enqueued) or reject (the node and its run fail) a pending '
    'approval. Raises CE404 (unknown), CE409 (already decided, or its run ended), CE422.';

-- Expire undecided approvals whose time has passed, as their node's
-- on_expiry says: fail (decided `expired` by 'ceaseless', failing the node
-- and its run), skip (decided `expired`, the node skipped and its downstream
-- nodes started) or approve (decided `approved` by 'ceaseless', the node runs);
-- and send the reminders that are due (remind_before_secs before the
-- expiry), once per request. Returns how many expired.
--
-- Locks: each run FOR NO KEY UPDATE SKIP LOCKED (a run busy elsewhere waits
-- for the next tick), then its approval.
create or replace function expire_approvals(p_now timestamptz default now())
returns integer
language plpgsql
as $$
declare
    v_due record;
    v_on_expiry text;
    v_count integer := 0;
begin
    for v_due in
        -- approvals_expiry_idx: only undecided approvals that can expire.
        select a.id, a.topology_run_id, a.node_id, a.expires_at
        from approvals a
        where a.decision is null and a.expires_at is not null and a.expires_at <= p_now
        order by a.topology_run_id, a.node_id
    loop
        perform from topology_runs r
        where r.id = v_due.topology_run_id and r.status in ('running', 'awaiting_approval')
        for no key update skip locked;
        if not found then
            continue;
        end if;
        update approvals a
        set decision = case n.on_expiry when 'approve' then 'approved' else 'expired' end,
            decided_by = 'ceaseless', decided_by_role = session_user, decided_at = p_now,
            note = case n.on_expiry
                       when 'approve' then 'approved undecided at its expiry'
                       when 'skip' then 'skipped undecided at its expiry'
                   end
        from topology_nodes n
        where a.id = v_due.id and a.decision is null
          and n.topology_run_id = v_due.topology_run_id and n.node_id = v_due.node_id
          and n.state = 'awaiting_approval'
        returning n.on_expiry into v_on_expiry;
        if found then
            if v_on_expiry = 'approve' then
                perform _enqueue_topology_node(v_due.topology_run_id, v_due.node_id);
                perform _settle_topology_run(v_due.topology_run_id, p_now);
            elsif v_on_expiry = 'skip' then
                perform _skip_topology_node(v_due.topology_run_id, v_due.node_id, p_now);
            else
                perform _fail_topology_node(
                    v_due.topology_run_id, v_due.node_id,
                    format('approval %s expired undecided at %s', v_due.id, v_due.expires_at),
                    p_now);
            end if;
            v_count := v_count + 1;
        end if;
    end loop;

    -- Reminders due: one notification each, to the run's owner, with what the
    -- request said. approvals_reminder_idx: only those still to send.
    with due as (
        update approvals a
        set reminded_at = p_now
        from topology_nodes n, topology_runs r
        where a.decision is null and a.reminded_at is null and a.remind_at <= p_now
          and n.topology_run_id = a.topology_run_id and n.node_id = a.node_id
          and n.state = 'awaiting_approval'
          and r.id = a.topology_run_id
        returning a.id, a.topology_run_id, a.node_id, a.expires_at, n.on_expiry, r.user_id,
                  case when r.loop_id is not null
                       then format(' (loop %s, iteration %s)', r.loop_id, r.iteration)
                       else '' end as loop_text
    )
    insert into notifications (source_table, source_id, kind, subject, body, user_id)
    select 'approvals', d.id, 'approval',
           format('reminder: topology run %s: node %s awaits approval until %s',
                  d.topology_run_id, d.node_id, d.expires_at),
           _approval_message(d.id, d.topology_run_id, d.node_id, d.loop_text, d.expires_at,
                             d.on_expiry),
           d.user_id
    from due d;
    return v_count;
end;
$$;

comment on function expire_approvals(timestamptz) is
    'Decide undecided approvals past expires_at by their node''s on_expiry (expired, failing the '
    'run; expired, skipping the node; or approved, running the node), and send the reminders '
    'due; returns how many expired. Maintenance, every listener.';
