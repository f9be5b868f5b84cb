"""The listener's cron half for loops, against a real database, with time passed in explicitly."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar
from uuid import UUID
from zoneinfo import ZoneInfo

import psycopg
import pytest

from listener.daemon import scheduler
from tests.factories import make_agent
from tests.sql.loops import iterations, loop_row, make_loop, runs

BERLIN = ZoneInfo("Europe/Berlin")
T = TypeVar("T")


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn)


def _cron_loop(conn: psycopg.Connection, cron: str, timezone: str = "UTC", **kw: object) -> UUID:
    return make_loop(conn, triggers={"cron": cron, "timezone": timezone, **kw})


def _set_next(conn: psycopg.Connection, loop: UUID, at: datetime) -> None:
    conn.execute("update ceaseless.loops set next_fire_at = %s where id = %s", (at, loop))


def _run(db_url: str, work: Callable[[psycopg.AsyncConnection], Awaitable[T]]) -> T:
    async def go() -> T:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as aconn:
            return await work(aconn)

    return asyncio.run(go())


def test_reconcile_gives_every_waiting_cron_loop_its_next_slot(
    conn: psycopg.Connection, db_url: str
) -> None:
    loop = _cron_loop(conn, "0 9 * * *", "Europe/Berlin")
    manual = make_loop(conn)
    now = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    assert _run(db_url, lambda c: scheduler.reconcile(c, now)) == 1
    assert loop_row(conn, loop)["next_fire_at"] == datetime(2026, 6, 2, 9, 0, tzinfo=BERLIN)
    assert loop_row(conn, manual)["next_fire_at"] is None


def test_schedule_by_id_sets_only_the_loops_named(conn: psycopg.Connection, db_url: str) -> None:
    named = _cron_loop(conn, "*/5 * * * *")
    other = _cron_loop(conn, "*/5 * * * *")
    now = datetime(2026, 6, 1, 12, 1, tzinfo=UTC)
    stored = _run(db_url, lambda c: scheduler.schedule(c, now, [named]))
    assert stored == 1
    assert loop_row(conn, named)["next_fire_at"] == datetime(2026, 6, 1, 12, 5, tzinfo=UTC)
    assert loop_row(conn, other)["next_fire_at"] is None


def test_missed_slots_fire_once_and_the_next_slot_is_from_now(
    conn: psycopg.Connection, db_url: str
) -> None:
    loop = _cron_loop(conn, "* * * * *")
    due = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    _set_next(conn, loop, due)
    now = due + timedelta(minutes=5, seconds=10)
    report = _run(db_url, lambda c: scheduler.fire_due(c, now))
    assert report.fired == 1
    [run] = runs(conn, loop)
    assert (run["iteration"], run["trigger_type"]) == (1, "cron")
    assert run["trigger_detail"] == "* * * * * (5 missed slots)"
    assert loop_row(conn, loop)["next_fire_at"] == due + timedelta(minutes=6)
    assert report.next_due == due + timedelta(minutes=6)
    # Nothing more is due until then: no backlog is drained.
    assert _run(db_url, lambda c: scheduler.fire_due(c, now)).fired == 0


def test_a_slot_while_an_iteration_is_live_is_skipped_and_spent(
    conn: psycopg.Connection, db_url: str
) -> None:
    loop = _cron_loop(conn, "0 * * * *")
    conn.execute("select ceaseless.run_loop(%s)", (loop,))
    due = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    _set_next(conn, loop, due)
    report = _run(db_url, lambda c: scheduler.fire_due(c, due + timedelta(seconds=1)))
    assert report.skipped == 1 and report.fired == 0
    skipped = [r for r in runs(conn, loop) if r["status"] == "skipped"]
    assert [(r["skip_reason"], r["trigger_type"]) for r in skipped] == [("live_iteration", "cron")]
    assert loop_row(conn, loop)["next_fire_at"] == due + timedelta(hours=1)


def test_two_listeners_fire_each_due_loop_once(conn: psycopg.Connection, db_url: str) -> None:
    due = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    loops = [_cron_loop(conn, "* * * * *") for _ in range(30)]
    conn.execute("update ceaseless.loops set next_fire_at = %s", (due,))

    async def race() -> list[scheduler.FireReport]:
        async def one() -> scheduler.FireReport:
            async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as aconn:
                return await scheduler.fire_due(aconn, due + timedelta(seconds=1))

        return list(await asyncio.gather(one(), one()))

    reports = asyncio.run(race())
    assert sum(r.fired for r in reports) == 30
    assert all(len(iterations(conn, loop)) == 1 for loop in loops)
    assert conn.execute(
        "select count(*) from ceaseless.topology_runs where status = 'skipped'"
    ).fetchone() == (0,)


def test_a_disabled_or_edited_loop_is_not_fired_from_a_stale_read(
    conn: psycopg.Connection, db_url: str
) -> None:
    loop = _cron_loop(conn, "* * * * *")
    due = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    _set_next(conn, loop, due)
    conn.execute("update ceaseless.loops set enabled = false where id = %s", (loop,))
    rows = conn.execute(
        "select * from ceaseless.fire_cron(array['loop'], %s, %s, %s, %s)",
        ([loop], [due + timedelta(minutes=1)], [0], due + timedelta(seconds=1)),
    ).fetchall()
    assert rows == [] and runs(conn, loop) == []
    # A schedule computed for the old cron expression is not stored.
    conn.execute(
        "update ceaseless.loops set enabled = true, triggers = %s where id = %s",
        (json.dumps({"cron": "0 * * * *"}), loop),
    )
    stored = conn.execute(
        "select ceaseless.set_next_fires(array['loop'], %s, %s, %s, %s)",
        ([loop], ["* * * * *"], ["UTC"], [due]),
    ).fetchone()
    assert stored == (0,)


def test_a_stored_schedule_croniter_rejects_disables_the_loop(
    conn: psycopg.Connection, db_url: str
) -> None:
    loop = _cron_loop(conn, "0 9 * * *")
    long = ",".join(str(i % 60) for i in range(50_000)) + ",61 * * * *"
    conn.execute("alter table ceaseless.loops disable trigger loops_validate")
    conn.execute(
        "update ceaseless.loops set triggers = jsonb_build_object('cron', %s::text,"
        " 'timezone', 'UTC'), next_fire_at = null where id = %s",
        (long, loop),
    )
    conn.execute("alter table ceaseless.loops enable trigger loops_validate")
    _run(db_url, lambda c: scheduler.reconcile(c, datetime(2026, 6, 1, tzinfo=UTC)))
    row = loop_row(conn, loop)
    assert row["enabled"] is False
    assert "cannot be used" in row["last_error"] and len(row["last_error"]) < 300
