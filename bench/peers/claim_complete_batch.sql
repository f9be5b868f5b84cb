-- pgbench script of the "batched ceiling" peer: claim the 100 oldest pending rows that no other
-- client holds and complete them, in one statement and so one commit per 100 jobs. This is the
-- most a Postgres queue can do per job when it batches everything; bench/peers/pgbench_batched.py
-- runs it.
UPDATE queue SET done = true
WHERE id IN (SELECT id FROM queue WHERE NOT done ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED);
