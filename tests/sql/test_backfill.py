"""backfill_routine and backfill_loop: collapsed cron slots fired on request, once each."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID

import psycopg
import pytest

from tests.factories import make_agent, make_routine

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn)


def _hourly(conn: psycopg.Connection, **columns: object) -> UUID:
    return make_routine(
        conn,
        trigger_type="cron",
        trigger_config={"schedule": "0 * * * *", "timezone": "UTC"},
        max_concurrent=100,
        **columns,
    )


def _backfill(
    conn: psycopg.Connection, kind: str, row: UUID, start: datetime, end: datetime, most: int = 100
) -> list[tuple]:
    return conn.execute(
        f"select slot_at, outcome, status, skip_reason from ceaseless.backfill_{kind}"
        "(%s, %s, %s, %s, %s)",
        (row, start, end, most, NOW),
    ).fetchall()


def test_a_backfill_fires_each_slot_in_the_range_once_with_its_slot(
    conn: psycopg.Connection,
) -> None:
    routine = _hourly(conn)
    rows = _backfill(conn, "routine", routine, NOW.replace(hour=8), NOW.replace(hour=11))
    assert [(r[0].hour, r[1], r[2]) for r in rows] == [
        (8, "fired", "running"),
        (9, "fired", "running"),
        (10, "fired", "running"),
    ]
    runs = conn.execute(
        "select trigger_type, slot_at, started_at from ceaseless.routine_runs "
        "where routine_id = %s order by slot_at",
        (routine,),
    ).fetchall()
    assert [(t, s.hour, a) for t, s, a in runs] == [
        ("backfill", 8, NOW),
        ("backfill", 9, NOW),
        ("backfill", 10, NOW),
    ]
