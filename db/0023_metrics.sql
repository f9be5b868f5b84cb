-- Counters for GET /metrics (functions/94_metrics.sql, listener/metrics.py).
--
-- Prometheus counters (runs by outcome, run durations, routine fires and
-- skips, loop iterations, notification deliveries) must not be computed by
-- counting history on every scrape: job, agent_run and routine_runs only
-- grow, and a scrape every 15 seconds would read all of them. Triggers count
-- instead, as each row changes.
--
-- Two tables, so that counting never waits on a lock. A trigger only ever
-- INSERTs a row into metric_deltas (an insert conflicts with nobody: two
-- finish_runs batches of one lane never queue behind one counter row, and
-- no lock order between counters can deadlock two transactions). The sweep
-- every listener runs folds the deltas into metric_totals (_metrics_fold,
-- SKIP LOCKED splits the work), so metric_deltas holds a few seconds of
-- changes; metrics_snapshot() adds both.

set local search_path = ceaseless, pg_catalog, public;

create table metric_totals (
    -- The Prometheus series name, e.g. ceaseless_agent_runs_total.
    metric text not null,
    -- The series' labels, e.g. {"agent": "claude", "outcome": "failed"}.
    labels jsonb not null,
    value double precision not null,

    primary key (metric, labels),

    -- A name Prometheus refuses would fail the whole scrape, not one series.
    constraint metric_name_valid check (metric ~ '^ceaseless_[a-z_]+$'),
    -- Labels are a flat object of strings: anything else has no text form.
    constraint labels_is_object check (jsonb_typeof(labels) = 'object'),
    -- A counter that goes down reads as a restart to rate(): every alert
    -- on it would fire or clear at random.
    constraint value_not_negative check (value >= 0)
);

comment on table metric_totals is
    'Prometheus counters folded from metric_deltas: one row per series (metric, labels).';

create table metric_deltas (
    id bigint generated always as identity primary key,
    metric text not null,
    labels jsonb not null,
    value double precision not null,

    -- The same rules as metric_totals: a delta becomes part of a total.
    constraint metric_name_valid check (metric ~ '^ceaseless_[a-z_]+$'),
    constraint labels_is_object check (jsonb_typeof(labels) = 'object'),
    constraint value_not_negative check (value >= 0)
);

comment on table metric_deltas is
    'Counter increments written by triggers (insert-only, so counting never waits on a lock), '
    'folded into metric_totals by _metrics_fold() on every lease sweep.';
