"""The metrics calls: the database-wide snapshot GET /metrics serves, and the counter fold.

Guarantees: `snapshot` reads (functions/94_metrics.sql, metrics_snapshot) and
changes nothing; `fold` moves counter deltas into their totals in one
transaction, so no increment is ever counted twice or lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg


@dataclass(frozen=True)
class Sample:
    """One sample of a metric family, as metrics_snapshot() returns it."""

    family: str
    kind: str
    help: str
    sample: str
    labels: dict[str, Any]
    value: float | None


async def snapshot(conn: psycopg.AsyncConnection) -> list[Sample]:
    cur = await conn.execute(
        "select family, kind, help, sample, labels, value from ceaseless.metrics_snapshot()"
    )
    return [Sample(*row) for row in await cur.fetchall()]


async def fold(conn: psycopg.AsyncConnection) -> int:
    cur = await conn.execute("select ceaseless._metrics_fold()")
    row = await cur.fetchone()
    return int(row[0]) if row else 0
