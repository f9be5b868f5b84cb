"""The procrastinate peer: batch-defer N no-op jobs, drain them with worker processes.

Called by the benchmark harness as `run(dsn, jobs, workers=...)` on an empty database.

Setup (untimed): `SchemaManager.apply_schema_async()` creates procrastinate's schema, and one
`batch_defer_async(...)` call defers every job in a single statement.

Drain (timed): each worker process opens an `App` on the psycopg (v3) `PsycopgConnector` and
runs `run_worker_async(wait=False)`, which returns once no job is left and its own jobs are
finished. `concurrency` is procrastinate's documented throughput knob for async tasks (parallel
sub-workers in one process); the pool gets one connection per sub-worker plus the ones the
worker keeps for itself, so sub-workers never queue for a connection. Finished jobs are kept
(`delete_jobs="never"`, the default), which is what lets us count them.

Counting and timing: the no-op task appends its job id in its process; procrastinate's own
bookkeeping is `procrastinate_events`, where a job reaching 'succeeded' writes a 'succeeded'
event in the same transaction. The drain ends at the latest such event's `at`.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import datetime
from importlib.metadata import version

import psycopg
from procrastinate import App, JobContext, PsycopgConnector

from bench.peers import Gate, PeerResult, drain_in_processes, tally

NAME = "procrastinate"
TASK = "bench_noop"
# Parallel sub-workers per worker process, so finishing jobs overlaps with fetching the next.
# A worker still fetches one job at a time, so values from 1 to 30 measured about the same.
CONCURRENCY = 10
# Connections a worker holds besides its sub-workers' (the LISTEN connection, and one spare for
# heartbeats and abort polling).
_OWN_CONNECTIONS = 2


def _app(dsn: str) -> App:
    size = CONCURRENCY + _OWN_CONNECTIONS
    return App(connector=PsycopgConnector(conninfo=dsn, min_size=size, max_size=size))


async def _prepare(dsn: str, jobs: int) -> list[int]:
    """Apply procrastinate's schema and defer `jobs` no-op jobs in one call; return their ids."""
    app = _app(dsn)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        deferrer = app.configure_task(TASK)
        return await deferrer.batch_defer_async(*({} for _ in range(jobs)))


async def _consume(dsn: str, gate: Gate) -> list[int]:
    """One worker process: an App with a no-op task, its worker run until no job is left."""
    seen: list[int] = []
    app = _app(dsn)

    @app.task(name=TASK, pass_context=True)
    async def noop(context: JobContext) -> None:
        assert context.job.id is not None
        seen.append(context.job.id)

    async with app.open_async():
        await gate.wait()
        await app.run_worker_async(
            concurrency=CONCURRENCY, wait=False, install_signal_handlers=False
        )
    return seen


def _finished(dsn: str) -> tuple[Counter[int], datetime | None]:
    """Jobs procrastinate recorded as succeeded (with how many times each), and the last one."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "select job_id, at from procrastinate_events where type = 'succeeded'"
        ).fetchall()
    return Counter(int(job_id) for job_id, _ in rows), max((at for _, at in rows), default=None)


def run(dsn: str, jobs: int, *, workers: int = 1, timeout: float = 600.0) -> PeerResult:
    """Defer `jobs` no-op jobs in bulk and time `workers` worker processes draining them."""
    ids = asyncio.run(_prepare(dsn, jobs))
    drain = drain_in_processes(_consume, dsn, workers, timeout=timeout)
    finished, last = _finished(dsn)
    note = (
        f"procrastinate {version('procrastinate')}, PsycopgConnector (psycopg "
        f"{version('psycopg')}), one worker per process, concurrency={CONCURRENCY}, "
        f"pool {CONCURRENCY + _OWN_CONNECTIONS}, wait=False; counted task runs and "
        "'succeeded' events"
    )
    return tally(NAME, ids, drain.runs, finished, seconds=drain.seconds_until(last), note=note)
