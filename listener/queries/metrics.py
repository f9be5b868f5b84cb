"""The metrics calls: the database-wide snapshot GET /metrics serves, and the counter fold.

Guarantees: `snapshot` reads (functions/94_metrics.sql, metrics_snapshot) and
changes nothing; `fold` moves counter deltas into their totals in one
transaction, so no increment is ever counted twice or lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import class_row

from listener.queries import fetch


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
    return await fetch.rows(
        conn,
        class_row(Sample),
        "select family, kind, help, sample, labels, value from ceaseless.metrics_snapshot()",
    )


async def fold(conn: psycopg.AsyncConnection) -> int:
    return int(await fetch.value(conn, "select ceaseless._metrics_fold()") or 0)
