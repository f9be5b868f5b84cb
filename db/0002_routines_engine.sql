-- The routines engine: what firing, webhooks and run outcomes need beyond the
-- foundation's tables.
--
-- Function bodies live in functions/40_routines.sql and 45_webhooks.sql.

set local search_path = ceaseless, pg_catalog, public;

-- A lightweight routine must answer: an empty reply is a failed run that is
-- retried (spec 5.8), not a delivered one. The flag travels with the job so
-- finish_runs can tell without knowing about routines.
alter table job
    add column expects_reply boolean not null default false;

comment on column job.expects_reply is
    'An empty final message counts as a failure (retried while attempts remain): set for '
    'lightweight routine runs, whose whole product is the reply.';

-- Who fired a run and why, for the operator: the routine's schedule, the event
-- preview or the webhook path.
comment on column routine_runs.trigger_detail is
    'What fired the run: the cron schedule, a preview of the event content, or the webhook path.';

-- The cooldown is measured from the end of the last run (spec 5.6).
comment on column routines.last_run_at is
    'When the last run finished (ok, attention or failed); cooldown_secs counts from here.';

-- Webhook replay protection: a signature seen once is refused for the rest
-- of the timestamp window, so a captured request cannot be sent again.
create table webhook_deliveries (
    id bigint generated always as identity primary key,
    target text not null check (target in ('routine', 'loop')),
    target_id uuid not null,
    signature text not null,
    sent_at timestamptz not null,
    received_at timestamptz not null default now(),

    -- The replay check is this constraint: a second insert of the same
    -- signature for the same target fails, atomically, whoever races it.
    constraint signature_seen_once unique (target, target_id, signature)
);

comment on table webhook_deliveries is
    'Signatures of accepted webhook requests, kept for the timestamp window to refuse replays.';

-- Pruning old signatures walks this, so the table stays the size of one window.
create index webhook_deliveries_received_idx on webhook_deliveries (received_at);

insert into settings (key, value, description) values
    ('webhook_window_secs', '300',
     'A webhook timestamp further than this from now is refused, and signatures are '
     'remembered this long to refuse replays.')
on conflict (key) do nothing;

-- How many routine runs are running right now, kept by trigger. The global
-- cap reads one row instead of counting every running run on every fire (a
-- batch of n fires would otherwise cost n²), and locking that row is what
-- serialises fires against the cap.
create table routine_run_gauge (
    singleton boolean primary key default true,
    running integer not null default 0,

    -- One row: a second would split the count and let the cap be exceeded.
    constraint one_row check (singleton),
    -- A negative count is a missed decrement somewhere: refuse it loudly.
    constraint running_not_negative check (running >= 0)
);

comment on table routine_run_gauge is
    'The number of routine_runs in status running, maintained by trigger, for the global cap.';

insert into routine_run_gauge default values;

-- The cooldown deferral and the concurrency guard read a routine's running
-- runs; the seed's status index covers all routines at once.
create index idx_routine_runs_running
    on routine_runs (routine_id)
    where status = 'running';
