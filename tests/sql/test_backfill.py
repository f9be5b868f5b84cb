"""backfill_routine and backfill_loop: collapsed cron slots fired on request, once each."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import psycopg
import pytest

from tests.factories import make_agent, make_routine
from tests.sql.loops import make_loop

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


def _runs(conn: psycopg.Connection, routine: UUID) -> list[tuple]:
    return conn.execute(
        "select trigger_type, slot_at, status from ceaseless.routine_runs "
        "where routine_id = %s and slot_at is not null order by slot_at, created_at",
        (routine,),
    ).fetchall()


def test_a_slot_a_cron_fire_was_due_at_is_not_fired_again(conn: psycopg.Connection) -> None:
    routine = _hourly(conn)
    due = NOW.replace(hour=9)
    conn.execute("update ceaseless.routines set next_fire_at = %s where id = %s", (due, routine))
    # The listener fires 09:00 at 11:30, the 10:00 and 11:00 slots collapsed into it.
    conn.execute(
        "select * from ceaseless.fire_cron(array['routine'], %s, %s, %s, %s)",
        ([routine], [NOW], [2], NOW.replace(hour=11, minute=30)),
    )
    assert _runs(conn, routine) == [("cron", due, "running")]
    rows = _backfill(conn, "routine", routine, NOW.replace(hour=9), NOW.replace(hour=12))
    assert [(r[0].hour, r[1]) for r in rows] == [
        (9, "already_fired"),
        (10, "fired"),
        (11, "fired"),
    ]
    # Idempotent: a second backfill of the same range fires nothing.
    again = _backfill(conn, "routine", routine, NOW.replace(hour=9), NOW.replace(hour=12))
    assert [r[1] for r in again] == ["already_fired"] * 3
    assert len(_runs(conn, routine)) == 3


def test_past_p_max_slots_are_reported_not_fired_and_a_later_call_fires_them(
    conn: psycopg.Connection,
) -> None:
    routine = _hourly(conn)
    rows = _backfill(conn, "routine", routine, NOW.replace(hour=0), NOW.replace(hour=5), most=2)
    assert [r[1] for r in rows] == ["fired", "fired", "over_max", "over_max", "over_max"]
    rows = _backfill(conn, "routine", routine, NOW.replace(hour=0), NOW.replace(hour=5), most=2)
    assert [r[1] for r in rows] == ["already_fired"] * 2 + ["fired"] * 2 + ["over_max"]


def test_guardrails_apply_and_a_refused_slot_can_be_backfilled_later(
    conn: psycopg.Connection,
) -> None:
    routine = make_routine(
        conn,
        trigger_type="cron",
        trigger_config={"schedule": "0 * * * *", "timezone": "UTC"},
        max_concurrent=1,
    )
    rows = _backfill(conn, "routine", routine, NOW.replace(hour=8), NOW.replace(hour=10))
    assert [r[1:] for r in rows] == [
        ("fired", "running", None),
        ("refused", "skipped", "concurrency"),
    ]
    conn.execute(
        "update ceaseless.routine_runs set status = 'ok', completed_at = %s "
        "where routine_id = %s and status = 'running'",
        (NOW, routine),
    )
    rows = _backfill(conn, "routine", routine, NOW.replace(hour=8), NOW.replace(hour=10))
    assert [r[1] for r in rows] == ["already_fired", "fired"]


def test_a_loop_backfill_is_refused_while_its_iteration_is_live(
    conn: psycopg.Connection,
) -> None:
    loop = make_loop(conn, triggers={"cron": "0 * * * *", "timezone": "UTC"})
    rows = _backfill(conn, "loop", loop, NOW.replace(hour=8), NOW.replace(hour=10))
    assert [r[1:] for r in rows] == [
        ("fired", "running", None),
        ("refused", "skipped", "live_iteration"),
    ]
    fired = conn.execute(
        "select trigger_type, slot_at from ceaseless.topology_runs "
        "where loop_id = %s and iteration is not null",
        (loop,),
    ).fetchall()
    assert fired == [("backfill", NOW.replace(hour=8))]


def test_slots_are_read_in_the_schedules_time_zone(conn: psycopg.Connection) -> None:
    routine = make_routine(
        conn,
        trigger_type="cron",
        trigger_config={"schedule": "0 9 * * *", "timezone": "America/New_York"},
    )
    rows = _backfill(conn, "routine", routine, datetime(2026, 2, 27, tzinfo=UTC), NOW)
    # 09:00 in New York is 14:00 UTC in winter; 2 March's is still to come at NOW (12:00).
    assert [r[0] for r in rows] == [
        datetime(2026, 2, 27, 14, tzinfo=UTC),
        datetime(2026, 2, 28, 14, tzinfo=UTC),
        datetime(2026, 3, 1, 14, tzinfo=UTC),
    ]


@pytest.mark.parametrize(
    ("start", "end", "most", "message"),
    [
        (NOW, NOW.replace(hour=8), 10, "backfill_routine.p_to: must be after p_from"),
        (NOW.replace(hour=8), NOW.replace(hour=13), 10, "backfill_routine.p_to: must not be "
         "after now"),
        (NOW.replace(hour=8), NOW, 0, "backfill_routine.p_max: must be 1 to 1000 (the setting "
         "backfill_max); got 0"),
        (NOW.replace(hour=8), NOW, 1001, "backfill_routine.p_max: must be 1 to 1000"),
    ],
)  # fmt: skip
def test_bad_bounds_are_refused_naming_the_field_the_rule_and_the_value(
    conn: psycopg.Connection, start: datetime, end: datetime, most: int, message: str
) -> None:
    routine = _hourly(conn)
    with pytest.raises(psycopg.errors.Error) as info:
        _backfill(conn, "routine", routine, start, end, most)
    assert info.value.sqlstate == "CE422"
    assert message in str(info.value)


def test_a_range_past_the_slot_cap_is_refused_and_a_routine_without_a_schedule_too(
    conn: psycopg.Connection,
) -> None:
    every_second = make_routine(
        conn, trigger_type="cron", trigger_config={"schedule": "* * * * * *", "timezone": "UTC"}
    )
    with pytest.raises(psycopg.errors.Error) as info:
        _backfill(conn, "routine", every_second, NOW.replace(day=1, hour=0), NOW)
    assert info.value.sqlstate == "CE422" and "holds more than 100000 slots" in str(info.value)
    conn.rollback()
    manual = make_routine(conn, "m")
    with pytest.raises(psycopg.errors.Error) as info:
        _backfill(conn, "routine", manual, NOW.replace(hour=8), NOW)
    assert info.value.sqlstate == "CE422" and "must name a routine with a cron schedule" in str(
        info.value
    )


def test_a_backfill_is_audited_with_its_counts(conn: psycopg.Connection) -> None:
    routine = _hourly(conn)
    _backfill(conn, "routine", routine, NOW.replace(hour=8), NOW.replace(hour=11), most=2)
    detail = conn.execute(
        "select detail from ceaseless.audit_log where entity = 'routine' and entity_id = %s "
        "and action = 'backfill'",
        (routine,),
    ).fetchone()
    assert detail is not None
    assert {k: detail[0][k] for k in ("slots", "fired", "over_max", "max")} == {
        "slots": 3,
        "fired": 2,
        "over_max": 1,
        "max": 2,
    }


def test_a_user_backfills_only_its_own_routines_and_loops(
    conn: psycopg.Connection, login_role: Callable[[str], psycopg.Connection]
) -> None:
    alice, bob = login_role("alice"), login_role("bob")
    mine = make_routine(
        alice,
        trigger_type="cron",
        trigger_config={"schedule": "0 * * * *", "timezone": "UTC"},
        user_id=alice.info.user,
    )
    loop = make_loop(alice, triggers={"cron": "0 * * * *", "timezone": "UTC"})
    for kind, row in (("routine", mine), ("loop", loop)):
        with pytest.raises(psycopg.errors.Error) as info:
            _backfill(bob, kind, row, NOW.replace(hour=8), NOW.replace(hour=9))
        assert info.value.sqlstate == "CE404"
        rows = _backfill(alice, kind, row, NOW.replace(hour=8), NOW.replace(hour=9))
        assert [r[1] for r in rows] == ["fired"]
    assert bob.execute("select count(*) from ceaseless.routine_runs").fetchone() == (0,)


def test_backfills_racing_the_cron_batch_fire_each_slot_once(
    conn: psycopg.Connection, db_url: str
) -> None:
    routine = _hourly(conn)
    conn.execute(
        "update ceaseless.routines set next_fire_at = %s where id = %s",
        (NOW.replace(hour=10), routine),
    )
    conn.commit()
    start, end = NOW.replace(hour=0), NOW.replace(hour=12)

    def backfill(c: psycopg.Connection) -> list[tuple]:
        return _backfill(c, "routine", routine, start, end)

    def cron(c: psycopg.Connection) -> Any:
        with c.transaction():
            due = c.execute("select id from ceaseless.due_schedules(%s, 10)", (NOW,)).fetchall()
            if due:
                c.execute(
                    "select * from ceaseless.fire_cron(array['routine'], %s, %s, %s, %s)",
                    ([routine], [NOW.replace(hour=13)], [1], NOW),
                )
        return due

    barrier = threading.Barrier(4)
    results: list[Any] = [None] * 4

    def go(i: int, action: Callable[[psycopg.Connection], Any]) -> None:
        with psycopg.connect(db_url, autocommit=True) as c:
            c.execute("set lock_timeout = '20s'")
            barrier.wait()
            try:
                results[i] = action(c)
            except psycopg.Error as exc:
                results[i] = exc

    threads = [
        threading.Thread(target=go, args=(i, a))
        for i, a in enumerate([backfill, backfill, backfill, cron])
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert not [r for r in results if isinstance(r, psycopg.Error)], results
    fired = conn.execute(
        "select slot_at, count(*) from ceaseless.routine_runs "
        "where routine_id = %s and slot_at is not null and status <> 'skipped' "
        "group by slot_at order by slot_at",
        (routine,),
    ).fetchall()
    assert [(slot.hour, count) for slot, count in fired] == [(h, 1) for h in range(12)]
