"""A transaction held open elsewhere: how a saturated queue degrades, and how fast it recovers.

Every SKIP LOCKED queue shares this weakness: a transaction left open (a REPEATABLE READ report,
a forgotten psql session) holds back the xmin horizon, so no dead row younger than it can be
vacuumed or pruned, and every claim walks past more of them. This scenario keeps a queue
saturated (a producer tops the backlog up to `backlog` pending jobs, 1,000 per statement) while
two consumers drain it; after `before` seconds another connection opens a REPEATABLE READ
transaction, reads one row of the queue table and stays idle for `hold` seconds; the drain goes
on for `after` seconds more.

Reported per system: completed jobs per second in 10 s buckets (by the completion times the
system itself recorded, on the server's clock), the full speed before the hold (median of the
buckets before it), the slowest bucket while held, the first bucket after the hold back at 90 %
of full speed, and the queue tables' dead tuples and size at the end.

Systems, one after the other on fresh databases of one server: ceaseless (two `ceaseless listen`
processes with the noop adapter; completions are agent_run.finished_at) and pgqueuer (two
QueueManager processes; completions are pgqueuer_log's 'successful' rows).

`python -m bench.held_transaction` runs it alone.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated

import psycopg
import typer
from pgqueuer import PsycopgDriver, Queries

from bench.observe import Listener
from bench.peers import drain_in_processes
from bench.peers.pgqueuer_peer import _consume as pgqueuer_consume
from bench.server import DatabaseUrlOpt, Server, provision

BUCKET_SECS = 10.0
TOP_UP = 1_000


@dataclass
class Timeline:
    """One system's run: completions per bucket, the hold's window, the tables at the end."""

    system: str
    started_at: datetime
    held_from: float = 0.0  # seconds after the start, server clock
    held_to: float = 0.0
    buckets: list[float] = field(default_factory=list)  # jobs/s per bucket
    dead_tuples: dict[str, int] = field(default_factory=dict)
    size_mb: dict[str, float] = field(default_factory=dict)

    def bucket_of(self, seconds: float) -> int:
        return int(seconds // BUCKET_SECS)

    def full_speed(self) -> float:
        before = self.buckets[1 : self.bucket_of(self.held_from)]  # the first bucket warms up
        return statistics.median(before) if before else float("nan")

    def slowest_held(self) -> float:
        held = self.buckets[self.bucket_of(self.held_from) + 1 : self.bucket_of(self.held_to)]
        return min(held) if held else float("nan")

    def recovered_after(self) -> float | None:
        """Seconds from the end of the hold to the end of the first bucket back at 90 %."""
        target = 0.9 * self.full_speed()
        # The first bucket mostly after the hold.
        first = round(self.held_to / BUCKET_SECS)
        for index in range(first, len(self.buckets) - 1):  # the last bucket is cut short
            if self.buckets[index] >= target:
                return (index + 1) * BUCKET_SECS - self.held_to
        return None


def _server_now(conn: psycopg.Connection) -> datetime:
    row = conn.execute("select clock_timestamp()").fetchone()
    assert row is not None
    return row[0]


class _Holder(threading.Thread):
    """A REPEATABLE READ transaction on its own connection: one row read, then idle."""

    def __init__(self, dsn: str, table: str, delay: float, hold: float) -> None:
        super().__init__(daemon=True)
        self._dsn, self._table, self._delay, self._hold = dsn, table, delay, hold
        self.began: datetime | None = None
        self.ended: datetime | None = None

    def run(self) -> None:
        time.sleep(self._delay)
        with psycopg.connect(self._dsn) as conn:
            conn.execute("set transaction isolation level repeatable read")
            conn.execute(f"select 1 from {self._table} limit 1").fetchall()
            self.began = _server_now(conn)
            time.sleep(self._hold)
            conn.commit()
            self.ended = _server_now(conn)


def _produce(
    pending: Callable[[], int], enqueue: Callable[[], None], until: float, backlog: int
) -> None:
    """Top the backlog up to `backlog` pending jobs, `TOP_UP` at a time, until `until`."""
    while time.monotonic() < until:
        if pending() < backlog:
            enqueue()
        else:
            time.sleep(0.05)


def _buckets(times: list[float], total: float) -> list[float]:
    count = int(total // BUCKET_SECS) + 1
    done = [0] * count
    for at in times:
        if 0 <= at < count * BUCKET_SECS:
            done[int(at // BUCKET_SECS)] += 1
    return [n / BUCKET_SECS for n in done]


def _tables(conn: psycopg.Connection, tables: list[str], timeline: Timeline) -> None:
    # Other backends flush their statistics about once a second.
    time.sleep(1.5)
    for table in tables:
        row = conn.execute(
            "select n_dead_tup, pg_total_relation_size(relid) from pg_stat_user_tables "
            "where relid = %s::regclass",
            (table,),
        ).fetchone()
        assert row is not None
        timeline.dead_tuples[table] = int(row[0])
        timeline.size_mb[table] = int(row[1]) / 2**20


def ceaseless(server: Server, before: float, hold: float, after: float, backlog: int) -> Timeline:
    with server.database(migrated=True) as url, psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "insert into ceaseless.agents (name, adapter, max_concurrent) "
            "values ('noop', 'noop', 100000)"
        )
        listeners = [
            Listener(url, "--poll-interval", "1", "--concurrency", "5000", worker_id=f"held-{i}")
            for i in range(2)
        ]
        try:
            for listener in listeners:
                listener.wait_ready()
            timeline = Timeline("ceaseless", _server_now(conn))
            holder = _Holder(url, "ceaseless.job", before, hold)
            holder.start()
            total = before + hold + after
            _produce(
                lambda: int(
                    conn.execute(
                        "select count(*) from ceaseless.job where state = 'pending'"
                    ).fetchone()[0]  # type: ignore[index]
                ),
                lambda: conn.execute(
                    "insert into ceaseless.job (kind, agent, prompt) "
                    "select 'task', 'noop', 'held' from generate_series(1, %s)",
                    (TOP_UP,),
                ),
                time.monotonic() + total,
                backlog,
            )
            holder.join()
        finally:
            for listener in listeners:
                listener.stop()
        times = [
            float(r[0])
            for r in conn.execute(
                "select extract(epoch from finished_at - %s) from ceaseless.agent_run "
                "where outcome = 'succeeded'",
                (timeline.started_at,),
            )
        ]
        _timed(timeline, holder, times, total)
        _tables(conn, ["ceaseless.job", "ceaseless.agent_run"], timeline)
        return timeline


def pgqueuer(server: Server, before: float, hold: float, after: float, backlog: int) -> Timeline:
    with server.database(migrated=False) as url, psycopg.connect(url, autocommit=True) as conn:

        async def install() -> None:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as aconn:
                queries = Queries(PsycopgDriver(aconn))
                await queries.install()
                await queries.optimize_autovacuum()

        asyncio.run(install())
        total = before + hold + after
        holder = _Holder(url, "pgqueuer", before, hold)
        started: list[datetime] = []

        def produce() -> None:
            async def enqueue_loop() -> None:
                async with await psycopg.AsyncConnection.connect(url, autocommit=True) as aconn:
                    queries = Queries(PsycopgDriver(aconn))
                    started.append(_server_now(conn))
                    holder.start()
                    until = time.monotonic() + total
                    while time.monotonic() < until:
                        row = await (
                            await aconn.execute(
                                "select count(*) from pgqueuer where status = 'queued'"
                            )
                        ).fetchone()
                        if row is not None and row[0] < backlog:
                            await queries.enqueue(
                                ["bench_noop"] * TOP_UP, [None] * TOP_UP, [0] * TOP_UP
                            )
                        else:
                            await asyncio.sleep(0.05)

            asyncio.run(enqueue_loop())

        # The consumers drain until the queue is empty: the producer keeps it full for the
        # whole run, so they end once it stops.
        producer = threading.Thread(target=produce, daemon=True)

        # A full queue before the consumers start: in drain mode they stop at an empty one.
        async def seed() -> None:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as aconn:
                await Queries(PsycopgDriver(aconn)).enqueue(
                    ["bench_noop"] * backlog, [None] * backlog, [0] * backlog
                )

        asyncio.run(seed())
        producer.start()
        drain_in_processes(pgqueuer_consume, url, 2, timeout=total + 600)
        producer.join()
        holder.join()
        timeline = Timeline("pgqueuer", started[0])
        times = [
            float(r[0])
            for r in conn.execute(
                "select extract(epoch from created - %s) from pgqueuer_log "
                "where status = 'successful'",
                (timeline.started_at,),
            )
        ]
        _timed(timeline, holder, times, total)
        _tables(conn, ["pgqueuer", "pgqueuer_log"], timeline)
        return timeline


def _timed(timeline: Timeline, holder: _Holder, times: list[float], total: float) -> None:
    assert holder.began is not None and holder.ended is not None
    timeline.held_from = (holder.began - timeline.started_at).total_seconds()
    timeline.held_to = (holder.ended - timeline.started_at).total_seconds()
    timeline.buckets = _buckets(times, total)


def report(timeline: Timeline) -> str:
    recovered = timeline.recovered_after()
    lines = [
        f"{timeline.system}: held {timeline.held_from:.0f}-{timeline.held_to:.0f} s; "
        f"full speed {timeline.full_speed():.0f} jobs/s, slowest while held "
        f"{timeline.slowest_held():.0f}, back at 90 % "
        + (f"{recovered:.0f} s after the hold" if recovered is not None else "not within the run"),
        "  jobs/s per 10 s: " + " ".join(f"{b:.0f}" for b in timeline.buckets),
        "  at the end: "
        + ", ".join(
            f"{t} {timeline.dead_tuples[t]:,} dead, {timeline.size_mb[t]:.1f} MB"
            for t in timeline.dead_tuples
        ),
    ]
    return "\n".join(lines)


def main(
    before: Annotated[float, typer.Option(help="Seconds of drain before the hold.")] = 30,
    hold: Annotated[float, typer.Option(help="Seconds the transaction stays open.")] = 120,
    after: Annotated[float, typer.Option(help="Seconds of drain after the hold.")] = 60,
    backlog: Annotated[int, typer.Option(help="Pending jobs the producer keeps.")] = 20_000,
    database_url: DatabaseUrlOpt = None,
) -> None:
    """Drain a saturated queue while another connection holds a transaction open."""
    with provision(database_url) as server:
        for system in (ceaseless, pgqueuer):
            typer.echo(report(system(server, before, hold, after, backlog)))


if __name__ == "__main__":
    typer.run(main)
