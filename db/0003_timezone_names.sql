-- The IANA time zone names routines may use, as a table with an index.
--
-- Validating a routine's timezone against the pg_timezone_names view scans
-- the server's whole zone database on every call (10 ms on PostgreSQL 18,
-- 40-90 ms on 15): a bulk insert of a thousand routines took half a minute.
-- functions/35_cron.sql refills this table on every migrate, so it follows
-- the server's zone database across upgrades.

set local search_path = ceaseless, pg_catalog, public;

create table timezone_names (
    -- Exact case: zoneinfo, which computes the times, is case-sensitive.
    name text primary key
);

comment on table timezone_names is
    'IANA zone names the server knows (no posix/ or right/ copies); refilled on every migrate.';
