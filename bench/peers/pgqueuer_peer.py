"""The pgqueuer peer: bulk-enqueue N no-op jobs, drain them with QueueManager processes.

Called by the benchmark harness as `run(dsn, jobs, workers=...)` on an empty database.

Setup (untimed): `Queries.install()` creates pgqueuer's schema at its default durability
("durable": every table WAL-logged, as ours are), `Queries.optimize_autovacuum()` applies the
table settings its performance guide asks for after installing, and one
`Queries.enqueue([...], [...], [...])` call inserts every job in a single statement.

Drain (timed): each worker process runs one `QueueManager` on its own psycopg (v3) async
connection, in drain mode, so `run()` returns once the queue is empty and the job-status buffer
is flushed. The batch size follows the performance guide's advice for short jobs.

Counting and timing: the no-op entrypoint appends `job.id` in its process; pgqueuer's own
bookkeeping is `pgqueuer_log`, where finishing a job writes a row with status 'successful' in
the same statement that deletes the job. The drain ends at the latest such row's `created`.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import datetime
from importlib.metadata import version

import psycopg
from pgqueuer import PsycopgDriver, Queries, QueueManager
from pgqueuer.models import Job
from pgqueuer.types import QueueExecutionMode

from bench.peers import Gate, PeerResult, drain_in_processes, tally

NAME = "pgqueuer"
ENTRYPOINT = "bench_noop"
# Jobs claimed per dequeue round trip. The default is 10; the guide says to raise it for jobs
# shorter than a second, and a no-op is as short as jobs get.
BATCH_SIZE = 100


async def _connect(dsn: str) -> psycopg.AsyncConnection:
    # pgqueuer's psycopg driver refuses connections without autocommit.
    return await psycopg.AsyncConnection.connect(dsn, autocommit=True)


async def _prepare(dsn: str, jobs: int) -> list[int]:
    """Install pgqueuer and enqueue `jobs` no-op jobs in one call; return their ids."""
    async with await _connect(dsn) as conn:
        queries = Queries(PsycopgDriver(conn))
        await queries.install()
        await queries.optimize_autovacuum()
        ids = await queries.enqueue([ENTRYPOINT] * jobs, [None] * jobs, [0] * jobs)
    return [int(job_id) for job_id in ids]


async def _consume(dsn: str, gate: Gate) -> list[int]:
    """One worker process: a QueueManager with a no-op entrypoint, run until drained."""
    seen: list[int] = []
    async with await _connect(dsn) as conn:
        manager = QueueManager(Queries(PsycopgDriver(conn)))

        @manager.entrypoint(ENTRYPOINT)
        async def noop(job: Job) -> None:
            seen.append(int(job.id))

        await gate.wait()
        await manager.run(batch_size=BATCH_SIZE, mode=QueueExecutionMode.drain)
    return seen


def _finished(dsn: str) -> tuple[Counter[int], datetime | None]:
    """Jobs pgqueuer logged as successful (with how many times each), and the last such log."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "select job_id, created from pgqueuer_log where status = 'successful'"
        ).fetchall()
    return Counter(int(job_id) for job_id, _ in rows), max((at for _, at in rows), default=None)


def run(dsn: str, jobs: int, *, workers: int = 1, timeout: float = 600.0) -> PeerResult:
    """Enqueue `jobs` no-op jobs in bulk and time `workers` QueueManager processes draining them."""
    ids = asyncio.run(_prepare(dsn, jobs))
    drain = drain_in_processes(_consume, dsn, workers, timeout=timeout)
    note = (
        f"pgqueuer {version('pgqueuer')}, psycopg {version('psycopg')} driver, "
        f"one QueueManager per process, batch_size={BATCH_SIZE}, drain mode, durability durable, "
        "autovacuum settings applied; counted task runs and pgqueuer_log 'successful' rows"
    )
    finished, last = _finished(dsn)
    return tally(NAME, ids, drain.runs, finished, seconds=drain.seconds_until(last), note=note)
