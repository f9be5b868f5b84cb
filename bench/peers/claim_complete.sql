-- pgbench script of the "pgbench limit" peer: claim the oldest pending row and complete it, in
-- one statement and so one transaction, skipping rows that another client holds. This is the
-- least work a Postgres queue can do per job; bench/peers/pgbench_limit.py runs it.
UPDATE queue SET done = true
WHERE id = (SELECT id FROM queue WHERE NOT done ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED);
