"""Retention under load: what pruning a large history costs the claims running beside it.

A database that has run for months holds `history` finished jobs past retention, each with
its agent run. One connection claims and finishes jobs as a listener does (claim_jobs with
p_start, claims of 10, timed on the client, each batch then finished untimed), while another
prunes the history in batches of `batch` (`prune(p_only => 'jobs')`, as the maintenance loop
calls it) until nothing is left to prune. The same claims are then timed on a twin database
with nothing to prune. Reported: the claims' p50 / p99 with and without the pruning beside
them, and the rows pruned per second.

The history is written as a bulk load, not by running it (its triggers off): what is measured
is the prune and the claims, not how the history came to be.

`python -m bench.prune_load` runs it alone.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass
from typing import Annotated

import psycopg
import typer

from bench.claim import claim_and_finish
from bench.observe import percentile
from bench.server import DatabaseUrlOpt, Server, provision

CLAIM = 10
MIN_CLAIMS = 100


@dataclass(frozen=True)
class Result:
    claim_p50_ms: float
    claim_p99_ms: float
    claims: int
    pruned: int
    prune_rows_per_s: float


def _load(conn: psycopg.Connection, history: int, pending: int) -> None:
    conn.execute(
        "insert into ceaseless.agents (name, adapter, max_concurrent) values ('noop', 'noop', %s)",
        (CLAIM,),
    )
    with conn.transaction():
        conn.execute("set local session_replication_role = replica")
        conn.execute(
            "insert into ceaseless.job (kind, state, agent, prompt, attempts, created_at, "
            "  updated_at, run_after, finished_at) "
            "select 'task', 'delivered', 'noop', 'old ' || g, 1, t, t, t, t "
            "from generate_series(1, %s) g, "
            "  lateral (select now() - interval '90 days' + g * interval '1 millisecond' as t) x",
            (history,),
        )
        conn.execute(
            "insert into ceaseless.agent_run (job_id, agent, adapter, worker, attempt, outcome, "
            "  started_at, finished_at, ended_by) "
            "select id, 'noop', 'noop', 'old', 1, 'succeeded', created_at, finished_at, 'agent' "
            "from ceaseless.job"
        )
    conn.execute(
        "insert into ceaseless.job (kind, agent, prompt) "
        "select 'task', 'noop', 'new ' || g from generate_series(1, %s) g",
        (pending,),
    )
    conn.execute("vacuum analyze ceaseless.job")
    conn.execute("vacuum analyze ceaseless.agent_run")


def _prune(dsn: str, batch: int, counted: list[int], done: threading.Event) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "select coalesce(sum(removed), 0) from ceaseless.prune(now(), %s, 'jobs')",
                (batch,),
            ).fetchone()
            removed = int(row[0]) if row else 0
            counted.append(removed)
            if removed < batch:
                break
    done.set()


def measure(server: Server, history: int, batch: int, claims: int | None) -> dict[str, Result]:
    """The claims with the history pruned beside them, then the same number without."""
    found: dict[str, Result] = {}
    timed_claims = claims
    for variant in ("pruning beside", "nothing to prune"):
        with server.database(migrated=True) as dsn, psycopg.connect(dsn, autocommit=True) as conn:
            # Enough pending work for the claims, never exhausted.
            _load(conn, history if variant == "pruning beside" else 0, 200_000)
            for _ in range(10):  # warm the plans
                claim_and_finish(conn, CLAIM)
            timings: list[float] = []
            pruned: list[int] = []
            done = threading.Event()
            began = time.perf_counter()
            if variant == "pruning beside":
                pruner = threading.Thread(target=_prune, args=(dsn, batch, pruned, done))
                pruner.start()
                # Until the pruning is over, and at least enough claims for a p99.
                while (not done.is_set() or len(timings) < MIN_CLAIMS) and (
                    claims is None or len(timings) < claims
                ):
                    timings.append(claim_and_finish(conn, CLAIM))
                pruner.join()
                timed_claims = len(timings)
            else:
                assert timed_claims is not None
                while len(timings) < timed_claims:
                    timings.append(claim_and_finish(conn, CLAIM))
            elapsed = time.perf_counter() - began
            found[variant] = Result(
                claim_p50_ms=statistics.median(timings),
                claim_p99_ms=percentile(timings, 99),
                claims=len(timings),
                pruned=sum(pruned),
                prune_rows_per_s=sum(pruned) / elapsed if pruned else 0.0,
            )
    return found


def main(
    history: Annotated[int, typer.Option(help="Finished jobs past retention.")] = 1_000_000,
    batch: Annotated[int, typer.Option(help="Rows per prune call.")] = 1_000,
    database_url: DatabaseUrlOpt = None,
) -> None:
    """Prune a large history in batches while claims run; the claims' latency with and without."""
    with provision(database_url) as server:
        found = measure(server, history, batch, None)
    typer.echo(f"retention under load: {history:,} finished jobs pruned in batches of {batch:,}")
    for variant, r in found.items():
        typer.echo(
            f"{variant:>17}: claim p50 {r.claim_p50_ms:.2f} ms, p99 {r.claim_p99_ms:.2f} ms "
            f"over {r.claims:,} claims of {CLAIM}; pruned {r.pruned:,} "
            f"({r.prune_rows_per_s:,.0f} rows/s)"
        )


if __name__ == "__main__":
    typer.run(main)
