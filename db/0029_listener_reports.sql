-- What each running listener reports about itself: how its agents are confined and how its own
-- database connection authenticated. `ceaseless status` runs in another process, with another
-- environment, and cannot judge the listener's sandbox from its own; it reads this instead,
-- through listener_status (functions/90_views.sql).

set local search_path = ceaseless, pg_catalog, public;

create table listener_reports (
    worker text primary key,
    started_at timestamptz not null default now(),
    host text not null,
    pid integer not null,
    sandbox text not null,
    agent_user text,
    isolation_warning text,
    db_auth text not null,
    http text,

    -- A sandbox name the view does not know would read as neither confined nor not.
    constraint sandbox_known check (sandbox in ('bwrap', 'none')),
    -- 'password', 'trust', 'unknown', or the method PostgreSQL 16+ names in
    -- system_user (peer, cert, scram-sha-256, …): a word, never free text.
    constraint db_auth_word check (db_auth ~ '^[a-z0-9-]{1,32}$'),
    -- What a listener writes is bounded like every other text it sends.
    constraint bounded check (
        length(worker) <= 200 and length(host) <= 255 and length(agent_user) <= 64
        and length(isolation_warning) <= 2000 and length(http) <= 300
    )
);

comment on table listener_reports is
    'What each running listener reports about itself at start (its agents'' sandbox and OS user, '
    'how its database connection authenticated, the HTTP address it serves), removed when it '
    'stops. Written by listeners only; read through listener_status.';
comment on column listener_reports.worker is 'The listener''s worker id (job.claimed_by).';
comment on column listener_reports.sandbox is
    'How its agents are confined: bwrap (bubblewrap), or none.';
comment on column listener_reports.agent_user is
    'The OS user its agents run as; NULL: the listener''s own.';
comment on column listener_reports.isolation_warning is
    'Why its agents are not fully isolated, as the listener logged it at start; NULL: they are.';
comment on column listener_reports.db_auth is
    'How its own database connection authenticated: password, trust (no password, and the '
    'server says none was asked), unknown (no password, on a server before PostgreSQL 16 that '
    'cannot say why), or the method system_user names (peer, cert, …).';
comment on column listener_reports.http is
    'The HOST:PORT its HTTP server (webhooks, dashboard) listens on; NULL: none. Never its token.';
