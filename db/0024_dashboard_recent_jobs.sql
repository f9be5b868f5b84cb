-- The dashboard's queue page (listener/dashboard/queries.py, JOBS_SQL): the
-- newest jobs, optionally filtered by state, lane and kind.
--
-- Without an index on created_at that page read the whole job table and
-- sorted it on every render (and it re-renders every 5 seconds while open):
-- a table that only grows made the operator's page the most expensive query
-- on the server. Walking this index backwards reads the newest rows first and
-- stops after the page's LIMIT; a filter only steps over what it skips.

set local search_path = ceaseless, pg_catalog, public;

create index job_created_idx on job (created_at desc);

comment on index job_created_idx is
    'Newest jobs first, for the dashboard''s queue page (ORDER BY created_at DESC LIMIT n): '
    'without it each render scans and sorts the whole job table.';
