"""Table health after a drain: dead row versions, sizes and vacuums of the tables every job
writes, with ceaseless's storage parameters (db/0091_hot_table_upkeep.sql) and without them.

`jobs` noop jobs are inserted in one statement and drained by two listeners; once the last is
delivered, the statistics settle for a few seconds and each table's live and dead row versions,
its size with indexes, how often autovacuum ran on it during the drain and its share of HOT
updates are read. The variant "PostgreSQL defaults" is the same database with the parameters
reset (ALTER TABLE … RESET), so the two differ in nothing else.

`python -m bench.table_health` runs it alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Annotated

import psycopg
import typer

from bench import ours
from bench.server import DatabaseUrlOpt, Server, provision

TABLES = ("job", "agent_run", "audit_log", "metric_deltas", "routine_run_shards", "metric_totals")
# What db/0091 sets, per table: reset for the defaults variant.
PARAMETERS = (
    "autovacuum_vacuum_scale_factor",
    "autovacuum_vacuum_threshold",
    "autovacuum_vacuum_insert_scale_factor",
    "autovacuum_analyze_scale_factor",
    "autovacuum_vacuum_cost_delay",
    "fillfactor",
)
VARIANTS = ("as shipped", "PostgreSQL defaults")


@dataclass(frozen=True)
class Health:
    live: int
    dead: int
    size_mb: float
    autovacuums: int
    hot_share: float  # HOT updates / updates (nan without updates)


def _reset(conn: psycopg.Connection) -> None:
    for table in (*TABLES, "notifications", "lane_turns", "owner_turns"):
        conn.execute(f"alter table ceaseless.{table} reset ({', '.join(PARAMETERS)})")


def _health(conn: psycopg.Connection) -> dict[str, Health]:
    found = {}
    for table in TABLES:
        row = conn.execute(
            "select n_live_tup, n_dead_tup, pg_total_relation_size(relid), autovacuum_count, "
            "       case when n_tup_upd > 0 then n_tup_hot_upd::float / n_tup_upd end "
            "from pg_stat_user_tables where relid = %s::regclass",
            (f"ceaseless.{table}",),
        ).fetchone()
        assert row is not None
        found[table] = Health(
            int(row[0]), int(row[1]), int(row[2]) / 2**20, int(row[3]),
            float(row[4]) if row[4] is not None else float("nan"),
        )  # fmt: skip
    return found


def drain(server: Server, variant: str, jobs: int) -> tuple[float, dict[str, Health]]:
    """Seconds the drain took, and the tables' health after it."""
    with server.database(migrated=True) as url, psycopg.connect(url, autocommit=True) as conn:
        if variant == "PostgreSQL defaults":
            _reset(conn)
        seconds = ours.drain(url, conn, jobs, listeners=2, timeout=3600)
        # Other backends flush their statistics about once a second; autovacuum
        # workers report when they finish.
        time.sleep(3)
        return seconds, _health(conn)


def main(
    jobs: Annotated[int, typer.Option(help="Jobs drained.")] = 1_000_000,
    database_url: DatabaseUrlOpt = None,
) -> None:
    """Drain jobs and report the hot tables' dead rows and sizes, with and without the
    storage parameters ceaseless sets."""
    with provision(database_url) as server:
        for variant in VARIANTS:
            seconds, health = drain(server, variant, jobs)
            typer.echo(f"{variant}: {jobs:,} jobs drained in {seconds:.1f} s")
            for table, h in health.items():
                typer.echo(
                    f"  {table:>18}: {h.live:>10,} live {h.dead:>10,} dead {h.size_mb:8.1f} MB, "
                    f"{h.autovacuums} autovacuums, HOT {h.hot_share:.0%}"
                )


if __name__ == "__main__":
    typer.run(main)
