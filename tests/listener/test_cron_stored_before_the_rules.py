"""A schedule stored before the database refused its form keeps firing as croniter reads it.

The gate (functions/30_cron.sql) refuses forms croniter reads otherwise than the text
says: a reversed or equal range, a * in a list, a day field naming every day beside a
restricted other. A routine or loop stored with one earlier was accepted because the
gate then read it as croniter does, so its slots do not change (docs/cron.md, "Schedules
stored before a rule"): migrating does not fail on it, the scheduler computes and fires
it, enabling and disabling it works, and only a change of its configuration must fix it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar
from uuid import UUID

import psycopg
import pytest

from listener.daemon import scheduler
from listener.database.migrate import migrate
from tests.factories import make_agent, make_routine
from tests.sql.loops import loop_row, make_loop

T = TypeVar("T")
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)  # a Monday


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn)


def _run(db_url: str, work: Callable[[psycopg.AsyncConnection], Awaitable[T]]) -> T:
    async def go() -> T:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as aconn:
            return await work(aconn)

    return asyncio.run(go())


def _store_around_the_check(
    conn: psycopg.Connection, table: str, row_id: UUID, column: str, key: str, schedule: str
) -> None:
    """Give a row a schedule without its validation trigger: one stored before the rule."""
    conn.execute(f"alter table ceaseless.{table} disable trigger {table}_validate")
    conn.execute(
        f"update ceaseless.{table} set {column} = jsonb_set({column}, %s, to_jsonb(%s::text)), "
        "next_fire_at = null where id = %s",
        ([key], schedule, row_id),
    )
    conn.execute(f"alter table ceaseless.{table} enable trigger {table}_validate")


def _routine_row(conn: psycopg.Connection, routine: UUID) -> tuple[bool, datetime | None]:
    row = conn.execute(
        "select enabled, next_fire_at from ceaseless.routines where id = %s", (routine,)
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def test_a_routine_with_a_reversed_range_keeps_firing_on_the_same_slots(
    conn: psycopg.Connection, db_url: str
) -> None:
    # Runs are left running: room for all of them.
    routine = make_routine(conn, "late-night", "cron", {"schedule": "0 9 * * *"}, max_concurrent=10)
    _store_around_the_check(conn, "routines", routine, "trigger_config", "schedule", "0 22-2 * * *")
    refused = conn.execute(
        "select ceaseless._cron_error(trigger_config ->> 'schedule') from ceaseless.routines "
        "where id = %s",
        (routine,),
    ).fetchone()
    assert refused is not None and "a range must run upwards" in refused[0]

    # Migrating (functions re-applied) neither fails on it nor changes it.
    migrate(db_url, reapply_functions=True)
    assert _routine_row(conn, routine) == (True, None)

    # croniter wraps it, as the gate did when it was stored: 22, 23, 0, 1 and 2 o'clock.
    assert _run(db_url, lambda c: scheduler.schedule(c, NOW)) == 1
    fired_at = []
    now = NOW
    for _ in range(6):
        _, due = _routine_row(conn, routine)
        assert due is not None
        fired_at.append(due.astimezone(UTC).hour)
        now = due + timedelta(seconds=1)
        report = _run(db_url, lambda c, at=now: scheduler.fire_due(c, at))
        assert report.fired == 1
    assert fired_at == [22, 23, 0, 1, 2, 22]

    # Disabling and enabling it are not configuration changes: both work.
    conn.execute("update ceaseless.routines set enabled = false where id = %s", (routine,))
    conn.execute("update ceaseless.routines set enabled = true where id = %s", (routine,))
    assert _routine_row(conn, routine) == (True, None)
    assert _run(db_url, lambda c: scheduler.schedule(c, now)) == 1

    # A change of its configuration checks the schedule again.
    with pytest.raises(psycopg.Error) as error:
        conn.execute(
            "update ceaseless.routines set name = 'late-night-2' where id = %s", (routine,)
        )
    assert error.value.sqlstate == "CE422"
    assert (error.value.diag.message_primary or "").startswith(
        'routines.trigger_config.schedule: hour field "22-2": a range must run upwards'
    )


def test_a_loop_with_a_star_in_a_day_list_keeps_firing_on_the_same_slots(
    conn: psycopg.Connection, db_url: str
) -> None:
    loop = make_loop(conn, triggers={"cron": "0 0 * * mon", "timezone": "UTC"})
    _store_around_the_check(conn, "loops", loop, "triggers", "cron", "0 0 1,*,15 * mon")
    migrate(db_url, reapply_functions=True)
    # croniter reads "1,*,15" as *, so Mondays alone decide: as the gate read it then.
    assert _run(db_url, lambda c: scheduler.reconcile(c, NOW)) == 1
    assert loop_row(conn, loop)["next_fire_at"] == datetime(2026, 6, 8, tzinfo=UTC)
    with pytest.raises(psycopg.Error) as error:
        conn.execute(
            "update ceaseless.loops set triggers = triggers || %s where id = %s",
            (json.dumps({"on_completion": False}), loop),
        )
    assert error.value.sqlstate == "CE422"
    assert "* must stand alone" in (error.value.diag.message_primary or "")
