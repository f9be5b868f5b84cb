"""Lease upkeep: what one heartbeat (extend_leases) and one sweep (expire_leases) cost at 2,000
and 20,000 leases, at a baseline git ref and at this checkout.

Each measurement has a fresh database whose job and agent_run tables are young (never
analysed, autovacuum off on them), as after a burst or a restore: the planner cannot size the
batch there, which is where a plan turns quadratic.
- heartbeat: a listener's connection first heartbeats one lease at a time (ten times, so
  PL/pgSQL keeps the plans it made for one id), then claims `leases` jobs beside another
  listener's `leases` and heartbeats them all, each lease past half its life;
- sweep: `leases` running jobs of a vanished listener beside as many pending ones, all expired
  by one expire_leases call.
The call is timed on the client and read through auto_explain (ANALYZE without timing,
BUFFERS, nested statements included): its shared buffers, and the two numbers that show a
batch gone quadratic (tests/sql/test_batch_plans.py): the most rows one join discarded (linear:
at most one per lease) and the most times one CTE was read (linear: once).

`python -m bench.leases --baseline-ref main` runs it alone.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Any

import psycopg
import typer

from bench.claim import baseline_tree
from bench.plans import explained, nodes, shared_buffers
from bench.server import DatabaseUrlOpt, Server, provision
from listener.database.migrate import migrate

SIZES = (2_000, 20_000)
ONE_LEASE_HEARTBEATS = 10


def _young(conn: psycopg.Connection, jobs: int) -> None:
    for table in ("job", "agent_run"):
        conn.execute(f"alter table ceaseless.{table} set (autovacuum_enabled = false)")
    conn.execute(
        "insert into ceaseless.agents (name, adapter, max_concurrent) values ('noop', 'noop', %s)",
        (10 * jobs,),
    )
    conn.execute(
        "insert into ceaseless.job (kind, agent, prompt) "
        "select 'task', 'noop', 'job ' || g from generate_series(1, %s) g",
        (jobs,),
    )


def _claim(conn: psycopg.Connection, worker: str, leases: int) -> list[Any]:
    rows = conn.execute(
        "select id from ceaseless.claim_jobs(%s, %s, p_start => true)", (worker, leases)
    ).fetchall()
    assert len(rows) == leases
    return [job for (job,) in rows]


def _heartbeat(conn: psycopg.Connection, leases: int) -> Callable[[], int]:
    _young(conn, 3 * leases + ONE_LEASE_HEARTBEATS)
    heartbeat = (
        "select count(*) filter (where renewed) from ceaseless.extend_leases("
        "'w1', %s, now() + interval '50 seconds', 60)"
    )
    for _ in range(ONE_LEASE_HEARTBEATS):
        conn.execute(heartbeat, (_claim(conn, "w1", 1),))
    _claim(conn, "other", leases)
    held = _claim(conn, "w1", leases)
    return lambda: int(conn.execute(heartbeat, (held,)).fetchone()[0])  # type: ignore[index]


def _sweep(conn: psycopg.Connection, leases: int) -> Callable[[], int]:
    _young(conn, 2 * leases)
    _claim(conn, "gone", leases)
    return lambda: int(
        conn.execute("select ceaseless.expire_leases(now() + interval '1 day')").fetchone()[0]  # type: ignore[index]
    )


SCENARIOS: dict[str, Callable[[psycopg.Connection, int], Callable[[], int]]] = {
    "heartbeat (extend_leases)": _heartbeat,
    "sweep (expire_leases)": _sweep,
}


def measure(server: Server, baseline: Path | None, scenario: str, leases: int) -> dict[str, Any]:
    """One call of `scenario` over `leases` leases on a fresh database, measured."""
    with server.database(migrated=baseline is None) as url:
        if baseline is not None:
            migrate(url, root=baseline)
        with psycopg.connect(url, autocommit=True) as conn:
            call = SCENARIOS[scenario](conn, leases)
            with explained(conn) as plans:
                started = time.perf_counter()
                touched = call()
                elapsed = (time.perf_counter() - started) * 1000
    assert touched == leases, (scenario, touched, leases)
    top = plans[-1]["Plan"]  # auto_explain logs the outermost statement last
    every = [node for plan in plans for node in nodes(plan["Plan"])]
    return {
        "ms": elapsed,
        "buffers": shared_buffers(top),
        # Linear: no join discards more rows than there are leases, no CTE is read twice.
        "discarded": max(node.get("Rows Removed by Join Filter", 0) for node in every),
        "rescans": max(
            (node.get("Actual Loops", 1) for node in every if node["Node Type"] == "CTE Scan"),
            default=1,
        ),
    }


def main(
    baseline_ref: Annotated[
        str | None, typer.Option(help="Also measure this git ref, e.g. main.")
    ] = None,
    runs: Annotated[int, typer.Option(help="Fresh databases per size and variant.")] = 3,
    database_url: DatabaseUrlOpt = None,
) -> None:
    """Time and read one heartbeat and one sweep at 2,000 and 20,000 leases."""
    with provision(database_url) as server:
        variants: dict[str, Path | None] = {"here": None}
        with baseline_tree(baseline_ref) if baseline_ref else nullcontext() as baseline:
            if baseline is not None:
                variants = {baseline_ref or "": baseline, **variants}
            typer.echo(
                f"lease upkeep on young tables, one call per fresh database, {runs} runs "
                "(medians; the most reads of one CTE over the runs)"
            )
            for scenario in SCENARIOS:
                for leases in SIZES:
                    for name, tree in variants.items():
                        found = [measure(server, tree, scenario, leases) for _ in range(runs)]
                        typer.echo(
                            f"{scenario:>26} {leases:>6,} leases {name:>8}: "
                            f"{statistics.median(m['ms'] for m in found):>9.1f} ms, "
                            f"{statistics.median(m['buffers'] for m in found):>9,.0f} buffers, "
                            f"most rows one join discarded "
                            f"{statistics.median(m['discarded'] for m in found):>11,.0f}, "
                            f"most reads of one CTE {max(m['rescans'] for m in found):>6,.0f}"
                        )


if __name__ == "__main__":
    typer.run(main)
