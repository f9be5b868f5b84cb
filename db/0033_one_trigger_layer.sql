-- Routines and loops are fired by one trigger layer (functions/38-39_*.sql):
-- the scheduler's twin functions, one set per table, and the loop half of the
-- webhook path are replaced by one set over both kinds, and dropped once here.

set local search_path = ceaseless, pg_catalog, public;

drop function if exists unscheduled_cron_routines(uuid[]);
drop function if exists unscheduled_cron_loops(uuid[]);
drop function if exists due_cron_routines(timestamptz, integer);
drop function if exists due_cron_loops(timestamptz, integer);
drop function if exists fire_cron_routines(uuid[], timestamptz[], integer[], timestamptz);
drop function if exists fire_cron_loops(uuid[], timestamptz[], integer[], timestamptz);
drop function if exists set_next_fires(uuid[], text[], text[], timestamptz[]);
drop function if exists set_loop_next_fires(uuid[], text[], text[], timestamptz[]);
drop function if exists disable_routine(uuid, text);
drop function if exists disable_loop(uuid, text);
drop function if exists next_cron_fire();
drop function if exists next_cron_loop_fire();
drop function if exists _receive_loop_webhook(loops, bytea, jsonb);
-- Validation names each field in full through _invalid_value (00_helpers.sql).
drop function if exists _invalid(text, text, jsonb);
drop function if exists _invalid_loop(text, text, jsonb);
