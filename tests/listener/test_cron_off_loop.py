"""croniter runs in a worker thread, never on the listener's event loop.

Reproduced: croniter ran on the loop, and a 50,000-item minute list cost 0.6 s a
call, during which no lease was extended and no webhook answered. The caps refuse
such schedules now (tests/sql/test_bounded_input.py), and db/0045 disabled those
stored before them; this checks the other half, that whatever croniter costs is
not paid on the loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from listener import cron
from listener.daemon import scheduler
from tests.e2e.support import ROOT
from tests.factories import make_agent, make_routine

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn)


@pytest.fixture
def croniter_threads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The threads the real cron.next_fire and cron.slots_between ran in."""
    threads: list[int] = []

    def spy(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            threads.append(threading.get_ident())
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(cron, "next_fire", spy(cron.next_fire))
    monkeypatch.setattr(cron, "slots_between", spy(cron.slots_between))
    return threads


async def _on_loop(db_url: str, work: Callable[[psycopg.AsyncConnection], Any]) -> int:
    """Run `work` on a fresh connection; return the id of the loop's thread."""
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        await work(conn)
    return threading.get_ident()


def test_scheduling_computes_slots_off_the_event_loop(
    conn: psycopg.Connection, db_url: str, croniter_threads: list[int]
) -> None:
    make_routine(conn, "a", "cron", {"schedule": "0 9 * * *"})
    make_routine(conn, "b", "cron", {"schedule": "*/5 * * * *"})
    loop_thread = asyncio.run(_on_loop(db_url, lambda c: scheduler.schedule(c, NOW)))
    assert len(croniter_threads) == 2
    assert loop_thread not in croniter_threads


def test_firing_computes_slots_off_the_event_loop(
    conn: psycopg.Connection, db_url: str, croniter_threads: list[int]
) -> None:
    routine = make_routine(conn, "a", "cron", {"schedule": "* * * * *"})
    conn.execute("update ceaseless.routines set next_fire_at = %s where id = %s", (NOW, routine))
    now = NOW + timedelta(minutes=3)
    loop_thread = asyncio.run(_on_loop(db_url, lambda c: scheduler.fire_due(c, now)))
    # next_fire and slots_between, both off the loop.
    assert len(croniter_threads) == 2
    assert loop_thread not in croniter_threads
    row = conn.execute(
        "select missed_slots from ceaseless.routine_runs where status = 'running'"
    ).fetchone()
    assert row == (3,)


def _store_around_the_check(conn: psycopg.Connection, routine: object, schedule: str) -> None:
    """Give a routine a schedule without the validation trigger: one stored long ago."""
    conn.execute("alter table ceaseless.routines disable trigger routines_validate")
    conn.execute(
        "update ceaseless.routines set trigger_config = jsonb_build_object('schedule', %s::text,"
        " 'timezone', 'UTC'), next_fire_at = null where id = %s",
        (schedule, routine),
    )
    conn.execute("alter table ceaseless.routines enable trigger routines_validate")


def test_a_stored_schedule_over_the_caps_is_disabled_by_its_migration(
    conn: psycopg.Connection, db_url: str, croniter_threads: list[int]
) -> None:
    # Stored before the caps existed: db/0045 disables it once, with the reason,
    # since the listener trusts the check at INSERT and no longer repeats it.
    long = make_routine(conn, "long", "cron", {"schedule": "0 9 * * *"})
    _store_around_the_check(conn, long, ",".join(str(i % 60) for i in range(50_000)) + " * * * *")
    wide = make_routine(conn, "wide", "cron", {"schedule": "0 9 * * *"})
    _store_around_the_check(conn, wide, "0 9 * * " + ",".join(["1"] * 61))
    fine = make_routine(conn, "fine", "cron", {"schedule": "0 9 * * " + ",".join(["1"] * 60)})
    migration = ROOT / "db" / "0045_stored_schedules_past_the_caps.sql"
    with conn.transaction():
        conn.execute(migration.read_text().encode())
    rows = {
        name: (enabled, reason)
        for name, enabled, reason in conn.execute(
            "select name, enabled, last_error from ceaseless.routines where id = any(%s)",
            ([long, wide, fine],),
        )
    }
    assert rows["fine"] == (True, None)
    for name in ("long", "wide"):
        enabled, reason = rows[name]
        assert enabled is False and "at most 60 items in a field" in reason, (name, reason)
    # Only the routine left enabled gets a slot computed.
    asyncio.run(_on_loop(db_url, lambda c: scheduler.schedule(c, NOW)))
    assert len(croniter_threads) == 1


def test_a_stored_schedule_croniter_cannot_read_is_disabled_with_a_short_reason(
    conn: psycopg.Connection, db_url: str
) -> None:
    routine = make_routine(conn, "a", "cron", {"schedule": "0 9 * * *"})
    _store_around_the_check(conn, routine, "1," * 50_000 + "61 * * * *")
    asyncio.run(_on_loop(db_url, lambda c: scheduler.schedule(c, NOW)))
    row = conn.execute(
        "select enabled, last_error from ceaseless.routines where id = %s", (routine,)
    ).fetchone()
    assert row is not None and row[0] is False
    assert "croniter cannot read it: " in row[1] and len(row[1]) < 300
