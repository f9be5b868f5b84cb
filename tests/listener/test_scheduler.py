"""The listener's cron half against a real database, with time passed in explicitly: routines
and loops are scheduled alike, as one kind of thing."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4
from zoneinfo import ZoneInfo

import psycopg
import pytest

from listener.config import ListenerConfig
from listener.daemon import scheduler
from listener.daemon.maintenance import Maintenance
from listener.daemon.router import Router
from listener.events import ScheduleChanged
from tests.factories import make_agent, make_routine
from tests.sql.loops import loop_row, make_loop

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=5000)
    conn.execute("update ceaseless.settings set value = '5000' where key = 'routine_max_running'")


def _cron(conn: psycopg.Connection, schedule: str, timezone: str = "UTC", **kw: object) -> UUID:
    return make_routine(
        conn,
        kw.pop("name", "c"),
        "cron",  # type: ignore[arg-type]
        {"schedule": schedule, "timezone": timezone},
        **kw,
    )


def _set_next(conn: psycopg.Connection, routine: UUID, at: datetime) -> None:
    conn.execute("update ceaseless.routines set next_fire_at = %s where id = %s", (at, routine))


def _fire(db_url: str, now: datetime) -> scheduler.FireReport:
    async def go() -> scheduler.FireReport:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            return await scheduler.fire_due(conn, now)

    return asyncio.run(go())


def _next(conn: psycopg.Connection, routine: UUID) -> datetime:
    row = conn.execute(
        "select next_fire_at from ceaseless.routines where id = %s", (routine,)
    ).fetchone()
    assert row is not None
    return row[0]


def test_reconcile_gives_every_waiting_cron_routine_its_next_slot(
    conn: psycopg.Connection, db_url: str
) -> None:
    routine = _cron(conn, "0 9 * * *", "Europe/Berlin")
    now = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)

    async def go() -> int:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as aconn:
            return await scheduler.reconcile(aconn, now)

    assert asyncio.run(go()) == 1
    assert _next(conn, routine) == datetime(2026, 6, 2, 9, 0, tzinfo=BERLIN)


def test_missed_slots_collapse_into_one_fire_that_records_them(
    conn: psycopg.Connection, db_url: str
) -> None:
    routine = _cron(conn, "* * * * *")
    due = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    _set_next(conn, routine, due)
    report = _fire(db_url, due + timedelta(minutes=5, seconds=10))
    assert report.fired == 1
    rows = conn.execute(
        "select status, skip_reason, missed_slots from ceaseless.routine_runs order by status"
    ).fetchall()
    # The fire that stands for them, and the slots that passed unfired.
    assert rows == [("running", None, 5), ("skipped", "missed_slots", 5)]
    assert _next(conn, routine) == due + timedelta(minutes=6)


def test_spring_forward_skips_the_slot_that_does_not_exist(
    conn: psycopg.Connection, db_url: str
) -> None:
    # Fired in time order, each assertion right after its fire: a later fire
    # would fire the other city's routine too.
    new_york = _cron(conn, "30 2 * * *", "America/New_York", name="ny")
    _set_next(conn, new_york, datetime(2026, 3, 7, 2, 30, tzinfo=NEW_YORK))
    _fire(db_url, datetime(2026, 3, 7, 2, 30, 1, tzinfo=NEW_YORK))
    # 02:30 on the change day does not exist: the next fire is the day after.
    assert _next(conn, new_york) == datetime(2026, 3, 9, 2, 30, tzinfo=NEW_YORK)

    berlin = _cron(conn, "30 2 * * *", "Europe/Berlin", name="berlin")
    _set_next(conn, berlin, datetime(2026, 3, 28, 2, 30, tzinfo=BERLIN))
    conn.execute("update ceaseless.routines set enabled = false where id = %s", (new_york,))
    _fire(db_url, datetime(2026, 3, 28, 2, 30, 1, tzinfo=BERLIN))
    assert _next(conn, berlin) == datetime(2026, 3, 30, 2, 30, tzinfo=BERLIN)


@pytest.mark.parametrize(
    ("schedule", "zone", "first"),
    [
        ("30 2 * * *", BERLIN, datetime(2026, 10, 25, 2, 30, tzinfo=BERLIN)),
        ("30 1 * * *", NEW_YORK, datetime(2026, 11, 1, 1, 30, tzinfo=NEW_YORK)),
    ],
)
def test_fall_back_fires_a_repeated_time_once(
    conn: psycopg.Connection, db_url: str, schedule: str, zone: ZoneInfo, first: datetime
) -> None:
    routine = _cron(conn, schedule, str(zone))
    _set_next(conn, routine, first)  # fold=0: the first of the two occurrences
    assert _fire(db_url, first + timedelta(seconds=1)).fired == 1
    assert _next(conn, routine) == first.replace(day=first.day + 1)
    # An hour later the wall clock shows the same time again; nothing is due.
    assert _fire(db_url, first + timedelta(hours=1, seconds=1)).fired == 0


def test_two_schedulers_racing_fire_each_due_routine_once(
    conn: psycopg.Connection, db_url: str
) -> None:
    conn.execute(
        "insert into ceaseless.routines (name, user_id, agent, trigger_type, trigger_config, "
        "action_type, action_config, cooldown_secs) "
        "select 'r' || g, 'alice', 'noop', 'cron', '{\"schedule\": \"* * * * *\"}', "
        '\'full_job\', \'{"title": "t", "description": "d"}\', 0 '
        "from generate_series(1, 1000) g"
    )
    due = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    conn.execute("update ceaseless.routines set next_fire_at = %s", (due,))
    now = due + timedelta(seconds=1)

    async def race() -> list[scheduler.FireReport]:
        async def one() -> scheduler.FireReport:
            async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as aconn:
                return await scheduler.fire_due(aconn, now)

        return list(await asyncio.gather(one(), one()))

    reports = asyncio.run(race())
    assert sum(r.fired for r in reports) == 1000
    per_routine = conn.execute(
        "select count(*) from ceaseless.routine_runs group by routine_id"
    ).fetchall()
    assert len(per_routine) == 1000 and {n for (n,) in per_routine} == {1}


def test_one_set_of_ids_schedules_routines_and_loops_alike(
    conn: psycopg.Connection, db_url: str
) -> None:
    routine = _cron(conn, "*/5 * * * *")
    loop = make_loop(conn, triggers={"cron": "0 9 * * *", "timezone": "Europe/Berlin"})
    untouched = _cron(conn, "*/5 * * * *", name="other")
    now = datetime(2026, 6, 1, 12, 1, tzinfo=UTC)

    async def go() -> int:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as aconn:
            return await scheduler.schedule(aconn, now, [routine, loop])

    assert asyncio.run(go()) == 2
    assert _next(conn, routine) == datetime(2026, 6, 1, 12, 5, tzinfo=UTC)
    assert loop_row(conn, loop)["next_fire_at"] == datetime(2026, 6, 2, 9, 0, tzinfo=BERLIN)
    assert _next(conn, untouched) is None


def test_one_pass_fires_what_is_due_of_both_kinds_and_sleeps_until_the_earliest_next(
    conn: psycopg.Connection, db_url: str
) -> None:
    routine = _cron(conn, "0 * * * *")
    loop = make_loop(conn, triggers={"cron": "*/30 * * * *"})
    due = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    _set_next(conn, routine, due)
    conn.execute("update ceaseless.loops set next_fire_at = %s where id = %s", (due, loop))

    report = _fire(db_url, due + timedelta(seconds=1))

    assert (report.fired, report.skipped) == (2, 0)
    assert _next(conn, routine) == due + timedelta(hours=1)
    assert loop_row(conn, loop)["next_fire_at"] == due + timedelta(minutes=30)
    assert report.next_due == due + timedelta(minutes=30)


def test_a_notice_of_either_table_joins_the_one_set_to_schedule() -> None:
    maintenance = Maintenance(ListenerConfig(url=""), None, None)  # type: ignore[arg-type]
    router = Router(None, None, None, maintenance)  # type: ignore[arg-type]
    routine, loop = uuid4(), uuid4()

    router.route(ScheduleChanged(table="routines", id=routine))
    router.route(ScheduleChanged(table="loops", id=loop))

    assert maintenance.to_schedule == {routine, loop}
    assert maintenance.cron_wake.is_set()
