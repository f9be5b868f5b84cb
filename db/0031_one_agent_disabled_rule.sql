-- Disabling an agent has one rule for every kind of pending job, in one
-- trigger (agents_disabled, functions/10_jobs.sql): the topology lane's own
-- trigger and function are gone.

set local search_path = ceaseless, pg_catalog, public;

drop trigger if exists agents_disabled_topology on agents;
drop function if exists _tg_agents_disabled_topology();
