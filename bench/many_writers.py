"""Many writers: what NOTIFY costs when many connections insert jobs, one per transaction.

Every job INSERT announces itself on ceaseless_job in its own transaction (_tg_job_insert,
functions/25_notify_audit.sql), and PostgreSQL lets one notifying transaction commit at a time:
its commit appends to the notify queue under one database-wide lock. With tens of writers that
lock, not the insert, can become the cost. This scenario measures it rather than guessing: 64
connections (by default) insert one job per transaction as fast as they can, while 1, 8 or 32
other sessions sit idle LISTENing on another channel (as idle listeners of other systems would),
and compares the same inserts with NOTIFY switched off.

Variants, each on a fresh database of one server:
- ceaseless, NOTIFY on: as shipped;
- ceaseless, relayed: the writers' sessions set ceaseless.notify = 'relay', so their
  announcements wait in ceaseless.announcements and one relay sends them, many to a commit,
  paced as a listener paces it (relay_announcements, listener/daemon/maintenance.py); the
  run counts until every insert is committed, and then checks that every announcement was
  sent;
- ceaseless, NOTIFY off: the bench database's `_notify_group` replaced by one that sends
  nothing (a bench-only switch; the insert, its audit row and its triggers are unchanged);
- pgqueuer, NOTIFY on: its own `Queries.enqueue`, one job per call, its statement trigger
  notifying as shipped;
- pgqueuer, NOTIFY off: the same with that trigger disabled.

Per variant and listener count: commits/s over the whole run and the p50 / p99 latency of one
insert's commit as the writer saw it. The variants run one after the other within a round, the
rounds repeated, so a busy moment of the machine weighs on all alike.

`python -m bench.many_writers` runs it alone.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass
from typing import Annotated

import psycopg
import typer
from pgqueuer import PsycopgDriver, Queries
from pgqueuer.domain.settings import DBSettings

from bench.observe import percentile
from bench.server import DatabaseUrlOpt, Server, provision
from listener.backoff import Backoff
from listener.daemon.maintenance import RELAY_FIRST_WAIT, RELAY_LONGEST_WAIT

VARIANTS = (
    "ceaseless, NOTIFY on",
    "ceaseless, relayed",
    "ceaseless, NOTIFY off",
    "pgqueuer, NOTIFY on",
    "pgqueuer, NOTIFY off",
)
IDLE_CHANNEL = "bench_idle"


@dataclass(frozen=True)
class Result:
    commits_per_s: float
    p50_ms: float
    p99_ms: float
    rows: int


def _prepare(conn: psycopg.Connection, variant: str) -> None:
    if variant.startswith("ceaseless"):
        conn.execute(
            "insert into ceaseless.agents (name, adapter, max_concurrent) "
            "values ('noop', 'noop', 1)"
        )
        if variant.endswith("off"):
            # The one function every job NOTIFY goes through, made silent.
            conn.execute(
                "create or replace function ceaseless._notify_group("
                "p_channel text, p_ids uuid[], p_fields jsonb) returns void "
                "language sql as $$ select $$"
            )


async def _prepare_pgqueuer(dsn: str, notify: bool) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await Queries(PsycopgDriver(conn)).install()
        if not notify:
            trigger = DBSettings().trigger
            await conn.execute(f"alter table pgqueuer disable trigger {trigger}")


async def _write(dsn: str, variant: str, writers: int, inserts: int) -> list[float]:
    """`writers` connections each inserting `inserts` jobs, one per transaction; the latency of
    every commit in ms."""
    options = "-c ceaseless.notify=relay" if variant == "ceaseless, relayed" else ""
    conns = [
        await psycopg.AsyncConnection.connect(dsn, autocommit=True, options=options)
        for _ in range(writers)
    ]
    start = asyncio.Event()

    async def one(conn: psycopg.AsyncConnection) -> list[float]:
        timings: list[float] = []
        queries = Queries(PsycopgDriver(conn)) if variant.startswith("pgqueuer") else None
        await start.wait()
        for _ in range(inserts):
            began = time.perf_counter()
            if queries is not None:
                await queries.enqueue(["bench_noop"], [None], [0])
            else:
                await conn.execute(
                    "insert into ceaseless.job (kind, agent, prompt) values ('task', 'noop', 'x')"
                )
            timings.append((time.perf_counter() - began) * 1000)
        return timings

    try:
        tasks = [asyncio.create_task(one(conn)) for conn in conns]
        start.set()
        return [t for timings in await asyncio.gather(*tasks) for t in timings]
    finally:
        for conn in conns:
            await conn.close()


async def _relay(dsn: str, writing: asyncio.Event) -> int:
    """Send the relayed announcements as a listener does, until the writers are done and
    none wait; how many were sent."""
    sent = 0
    idle = Backoff(first=RELAY_FIRST_WAIT, ceiling=RELAY_LONGEST_WAIT)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        while True:
            cur = await conn.execute("select ceaseless.relay_announcements()")
            row = await cur.fetchone()
            assert row is not None
            sent += int(row[0])
            if row[0]:
                idle.reset()
            elif not writing.is_set():
                return sent
            else:
                await idle.sleep()


async def _measure(dsn: str, variant: str, listeners: int, writers: int, inserts: int) -> Result:
    idle = [await psycopg.AsyncConnection.connect(dsn, autocommit=True) for _ in range(listeners)]
    writing = asyncio.Event()
    writing.set()
    relay = asyncio.create_task(_relay(dsn, writing)) if variant == "ceaseless, relayed" else None
    try:
        for conn in idle:
            await conn.execute(f"listen {IDLE_CHANNEL}")
        began = time.perf_counter()
        timings = await _write(dsn, variant, writers, inserts)
        elapsed = time.perf_counter() - began
        writing.clear()
        if relay is not None and await relay != len(timings):
            raise RuntimeError(f"{variant}: not every announcement was relayed")
    finally:
        for conn in idle:
            await conn.close()
    table = "pgqueuer" if variant.startswith("pgqueuer") else "ceaseless.job"
    with psycopg.connect(dsn) as conn:
        row = conn.execute(f"select count(*) from {table}").fetchone()
    return Result(
        commits_per_s=len(timings) / elapsed,
        p50_ms=statistics.median(timings),
        p99_ms=percentile(timings, 99),
        rows=int(row[0]) if row else 0,
    )


def many_writers(server: Server, listeners: int, writers: int, inserts: int) -> dict[str, Result]:
    """Every variant once, on a database of its own, with `listeners` idle LISTEN sessions."""
    found: dict[str, Result] = {}
    for variant in VARIANTS:
        ours = variant.startswith("ceaseless")
        with server.database(migrated=ours) as dsn:
            if ours:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    _prepare(conn, variant)
            else:
                asyncio.run(_prepare_pgqueuer(dsn, notify=variant.endswith("on")))
            found[variant] = asyncio.run(_measure(dsn, variant, listeners, writers, inserts))
    return found


def main(
    writers: Annotated[int, typer.Option(help="Connections inserting at once.")] = 64,
    inserts: Annotated[int, typer.Option(help="Inserts per writer, one per transaction.")] = 200,
    listeners: Annotated[
        list[int], typer.Option(help="Idle LISTEN sessions on another channel (repeatable).")
    ] = [1, 8, 32],  # noqa: B006 - typer reads the default, never mutates it
    runs: Annotated[int, typer.Option(help="Rounds of every variant.")] = 3,
    database_url: DatabaseUrlOpt = None,
) -> None:
    """Insert jobs from many connections with NOTIFY on and off, ceaseless next to pgqueuer."""
    with provision(database_url) as server:
        typer.echo(
            f"many writers: {writers} connections x {inserts} inserts, one per transaction; "
            f"{runs} rounds (median [min-max] of the rounds)"
        )
        for count in listeners:
            rounds: dict[str, list[Result]] = {variant: [] for variant in VARIANTS}
            for _ in range(runs):
                for variant, result in many_writers(server, count, writers, inserts).items():
                    rounds[variant].append(result)
            for variant, results in rounds.items():
                cells = []
                for metric in ("commits_per_s", "p50_ms", "p99_ms"):
                    values = [getattr(r, metric) for r in results]
                    cells.append(
                        f"{metric} {statistics.median(values):.1f} "
                        f"[{min(values):.1f}-{max(values):.1f}]"
                    )
                lost = sum(writers * inserts - r.rows for r in results)
                typer.echo(
                    f"{count:>2} idle listeners, {variant:>22}: "
                    + ", ".join(cells)
                    + f"; rows missing {lost}"
                )


if __name__ == "__main__":
    typer.run(main)
