-- The SSE observer (listener/observer.py): what following a loop needs.
--
-- A loop's stream is its own audit rows, its iterations' and their nodes'
-- and approvals'. Node and approval rows name their run, not its loop; the
-- run rows name the loop in detail.loop_id. This index finds a loop's run
-- rows after a given audit id by key, so a loop with thousands of
-- iterations costs a follower the rows it has not seen, not a probe of
-- every iteration it ever ran.

set local search_path = ceaseless, pg_catalog, public;

create index audit_log_run_loop_idx on audit_log ((detail ->> 'loop_id'), id)
    where entity = 'topology_run';

comment on index audit_log_run_loop_idx is
    'A loop''s topology_run audit rows after a given id (loop_events, the SSE loop stream).';
