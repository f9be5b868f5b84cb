-- The forge intake's answer names, beside each issue's kind, the repo's
-- label that asks for it, so the poller asks the forge who added that label
-- without keeping its own copy of the kind → label rule. A function's result
-- type cannot change under CREATE OR REPLACE: the three are dropped here, once,
-- and functions/ (applied right after the migrations) creates them again.

set local search_path = ceaseless, pg_catalog, public;

drop function if exists ingest_issues(uuid, jsonb, timestamptz);
drop function if exists note_labellers(uuid, jsonb, timestamptz);
drop function if exists _forge_decide(tracked_repo, bigint[], timestamptz);
