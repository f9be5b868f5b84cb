-- Announcements a session chose to have relayed (setting ceaseless.notify =
-- 'relay', functions/25_notify_audit.sql, _announce) instead of sent with its
-- own commit: PostgreSQL commits notifying transactions one at a time, so
-- many writers that each notify queue on that lock whatever their inserts
-- cost (docs/performance.md, "Many writers"). A listener sends them, oldest
-- first, many to a commit (relay_announcements).
--
-- Unlogged: writing an announcement costs no WAL, and like a NOTIFY that no
-- session was listening for, one not yet sent means nothing after a crash or
-- a failover (listeners catch up by reading the tables when they reconnect).
-- No role but the owner and the listener may read or write it
-- (functions/99_access.sql).

set local search_path = ceaseless, pg_catalog, public;

create unlogged table announcements (
    id bigint generated always as identity primary key,
    channel text not null,
    payload text not null,
    created_at timestamptz not null default now(),
    -- pg_notify's own limits, checked when the announcement is written, so
    -- that the relay never holds one it cannot send (and which would stop
    -- every announcement behind it).
    constraint announcement_channel_sendable
        check (channel <> '' and octet_length(channel) < 64),
    constraint announcement_payload_sendable check (octet_length(payload) < 8000)
);

comment on table announcements is
    'Announcements written by sessions with ceaseless.notify = ''relay'', waiting for a listener '
    'to send them (relay_announcements), oldest first. Unlogged: lost in a crash, like a NOTIFY.';
comment on column announcements.id is
    'Write order: the order a listener sends them in.';
