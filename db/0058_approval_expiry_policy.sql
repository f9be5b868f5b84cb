-- What an undecided approval does when it expires, and a reminder before it
-- does (the graph's gated node: "on_expiry", "remind_before_secs").

set local search_path = ceaseless, pg_catalog, public;

alter table topology_nodes
    -- fail: the node and its run fail (the behaviour before this column);
    -- approve: the gate opens by itself, for gates that only give a person
    -- the chance to stop the work.
    add column on_expiry text not null default 'fail'
        constraint on_expiry_known check (on_expiry in ('fail', 'approve')),
    -- A reminder this long before the approval expires; NULL for none. Only
    -- an expiring gate can be reminded of.
    add column remind_before_secs integer
        constraint remind_before_positive check (remind_before_secs > 0),
    add constraint reminder_needs_expiry
        check (remind_before_secs is null or approval_timeout_secs is not null);

alter table approvals
    -- When the reminder is due (its expiry less remind_before_secs), and when
    -- it was sent: a reminder goes once per request.
    add column remind_at timestamptz,
    add column reminded_at timestamptz;

create index approvals_reminder_idx on approvals (remind_at)
    where decision is null and reminded_at is null and remind_at is not null;

comment on column topology_nodes.on_expiry is
    'What an undecided approval of this gated node does at its expiry: fail (the node and run '
    'fail) or approve (it is approved by ceaseless and the node runs).';
comment on column topology_nodes.remind_before_secs is
    'Seconds before an approval of this node expires that its owner is reminded; NULL: no reminder.';
comment on column approvals.remind_at is
    'When the reminder of this approval is due (expires_at less the node''s remind_before_secs).';
comment on column approvals.reminded_at is
    'When the reminder was sent; NULL until then. One reminder per request.';
comment on index approvals_reminder_idx is
    'Undecided approvals whose reminder is still to send: what the maintenance tick reads.';
