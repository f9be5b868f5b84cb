-- The labels of a refused fire are built by one function for routines and
-- loops (_metrics_skip_labels(kind, ...), functions/94_metrics.sql); the
-- two per-kind forms go.

set local search_path = ceaseless, pg_catalog, public;

drop function if exists _metrics_skip_labels(uuid, text, text, text);
drop function if exists _metrics_loop_skip_labels(uuid, text, text, text);
