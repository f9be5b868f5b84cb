"""The trigger layer (functions/32_schedules.sql): routines and loops as one kind of thing.

One view of schedules, and one call per step of the scheduler (unscheduled, set next
fires, due, fire, disable, next fire), whichever kind the rows are.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from uuid import UUID

import psycopg
import pytest

from tests.factories import make_agent, make_routine
from tests.sql.loops import loop_row, make_loop, runs
from tests.sql.topology import graph, node

DUE = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
NOW = DUE + timedelta(seconds=1)


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn)


def _cron_routine(conn: psycopg.Connection, name: str = "tick", **kw: object) -> UUID:
    return make_routine(conn, name, "cron", {"schedule": "0 * * * *"}, **kw)  # type: ignore[arg-type]


def _cron_loop(conn: psycopg.Connection, **kw: object) -> UUID:
    return make_loop(conn, triggers={"cron": "0 * * * *", "timezone": "Europe/Berlin"}, **kw)


def _due(conn: psycopg.Connection, *rows: tuple[str, UUID]) -> None:
    for kind, row in rows:
        table = "routines" if kind == "routine" else "loops"
        conn.execute(f"update ceaseless.{table} set next_fire_at = %s where id = %s", (DUE, row))


def test_the_view_shows_routines_and_loops_as_schedules(conn: psycopg.Connection) -> None:
    cron = _cron_routine(conn)
    event = make_routine(conn, "on-deploy", "event", {"pattern": "deploy"})
    loop = _cron_loop(conn)
    manual_loop = make_loop(conn)

    rows = {
        row[1]: row
        for row in conn.execute(
            "select kind, id, owner, name, enabled, schedule, timezone from ceaseless.schedules"
        ).fetchall()
    }

    assert rows[cron] == ("routine", cron, "alice", "tick", True, "0 * * * *", "UTC")
    assert rows[event][5:] == (None, None)
    assert rows[loop][0] == "loop" and rows[loop][5:] == ("0 * * * *", "Europe/Berlin")
    assert rows[manual_loop][5:] == (None, None)


def test_a_user_sees_only_its_own_schedules(
    conn: psycopg.Connection, login_role: Callable[..., psycopg.Connection]
) -> None:
    _cron_routine(conn)
    alice = login_role("alice")
    row = alice.execute(
        "insert into ceaseless.loops (title, description, graph, task_template) "
        "values ('mine', '', %s, 'do it') returning id",
        (json.dumps(graph([node("A")])),),
    ).fetchone()
    assert row is not None

    assert alice.execute("select kind, id from ceaseless.schedules").fetchall() == [
        ("loop", row[0])
    ]


def test_unscheduled_names_rows_of_either_kind_by_id(conn: psycopg.Connection) -> None:
    routine = _cron_routine(conn)
    loop = _cron_loop(conn)
    other = _cron_routine(conn, "other")

    named = conn.execute(
        "select kind, id, schedule, timezone from ceaseless.unscheduled_schedules(%s) "
        "order by kind",
        ([routine, loop],),
    ).fetchall()
    every = conn.execute("select id from ceaseless.unscheduled_schedules()").fetchall()

    assert named == [
        ("loop", loop, "0 * * * *", "Europe/Berlin"),
        ("routine", routine, "0 * * * *", "UTC"),
    ]
    assert {row[0] for row in every} == {routine, loop, other}


def test_set_next_fires_stores_an_answer_only_while_its_schedule_holds(
    conn: psycopg.Connection,
) -> None:
    routine = _cron_routine(conn)
    loop = _cron_loop(conn)
    edited = _cron_loop(conn)
    conn.execute(
        'update ceaseless.loops set triggers = \'{"cron": "*/5 * * * *"}\' where id = %s',
        (edited,),
    )

    stored = conn.execute(
        "select ceaseless.set_next_fires(%s, %s, %s, %s, %s)",
        (
            ["routine", "loop", "loop"],
            [routine, loop, edited],
            ["0 * * * *"] * 3,
            ["UTC", "Europe/Berlin", "Europe/Berlin"],
            [DUE] * 3,
        ),
    ).fetchone()

    assert stored == (2,)
    assert loop_row(conn, loop)["next_fire_at"] == DUE
    assert loop_row(conn, edited)["next_fire_at"] is None
    # A kind names the table: a routine's id given as a loop's stores nothing.
    assert conn.execute(
        "select ceaseless.set_next_fires(array['loop'], array[%s::uuid], array['0 * * * *'], "
        "array['UTC'], array[%s::timestamptz])",
        (routine, DUE + timedelta(hours=1)),
    ).fetchone() == (0,)


def test_a_late_answer_never_brings_back_a_slot_already_stored_or_fired(
    conn: psycopg.Connection,
) -> None:
    # Every listener computes every routine's next slot; the slowest answers last.
    routine = _cron_routine(conn)
    answer = (["routine"], [routine], ["0 * * * *"], ["UTC"], [DUE])
    first = conn.execute("select ceaseless.set_next_fires(%s, %s, %s, %s, %s)", answer)
    assert first.fetchone() == (1,)
    later = DUE + timedelta(hours=1)
    conn.execute("update ceaseless.routines set next_fire_at = %s where id = %s", (later, routine))

    late = conn.execute("select ceaseless.set_next_fires(%s, %s, %s, %s, %s)", answer)

    assert late.fetchone() == (0,)
    stored = conn.execute(
        "select next_fire_at from ceaseless.routines where id = %s", (routine,)
    ).fetchone()
    assert stored == (later,)


def test_due_schedules_gives_one_kind_a_batch_routines_first(conn: psycopg.Connection) -> None:
    routine = _cron_routine(conn)
    loop = _cron_loop(conn)
    _due(conn, ("routine", routine), ("loop", loop))

    with conn.transaction():
        first = conn.execute("select kind, id from ceaseless.due_schedules(%s, 10)", (NOW,))
        assert first.fetchall() == [("routine", routine)]
        conn.execute(
            "select * from ceaseless.fire_cron(array['routine'], array[%s::uuid], "
            "array[%s::timestamptz], array[0], %s)",
            (routine, DUE + timedelta(hours=1), NOW),
        )
    second = conn.execute("select kind, id from ceaseless.due_schedules(%s, 10)", (NOW,))
    assert second.fetchall() == [("loop", loop)]


def test_fire_cron_fires_both_kinds_and_moves_each_to_its_slot(conn: psycopg.Connection) -> None:
    routine = _cron_routine(conn)
    loop = _cron_loop(conn)
    _due(conn, ("routine", routine), ("loop", loop))
    nexts = [DUE + timedelta(hours=1), DUE + timedelta(hours=2)]

    rows = conn.execute(
        "select kind, id, status, skip_reason, next_fire_at from ceaseless.fire_cron("
        "array['loop', 'routine'], %s, %s, array[2, 0], %s)",
        ([loop, routine], nexts, NOW),
    ).fetchall()

    assert sorted(rows) == sorted(
        [
            ("routine", routine, "running", None, nexts[1]),
            ("loop", loop, "running", None, nexts[0]),
        ]
    )
    [run] = runs(conn, loop)
    assert (run["trigger_type"], run["trigger_detail"]) == ("cron", "0 * * * * (2 missed slots)")


def test_fire_cron_leaves_out_what_is_no_longer_due_and_refuses_ragged_arrays(
    conn: psycopg.Connection,
) -> None:
    routine = _cron_routine(conn)
    _due(conn, ("routine", routine))
    later = conn.execute(
        "select * from ceaseless.fire_cron(array['routine'], array[%s::uuid], "
        "array[%s::timestamptz], array[0], %s)",
        (routine, DUE + timedelta(hours=1), DUE - timedelta(seconds=1)),
    ).fetchall()
    assert later == []

    with pytest.raises(psycopg.Error) as raised:
        conn.execute(
            "select * from ceaseless.fire_cron(array['routine', 'loop'], array[%s::uuid], "
            "array[%s::timestamptz], array[0], %s)",
            (routine, DUE, NOW),
        )
    assert raised.value.sqlstate == "CE422"
    assert "fire_cron: the four arrays must have one entry per schedule" in str(raised.value)


def test_disable_schedule_disables_either_kind_with_its_error(conn: psycopg.Connection) -> None:
    routine = _cron_routine(conn)
    loop = _cron_loop(conn)

    conn.execute("select ceaseless.disable_schedule('routine', %s, 'bad')", (routine,))
    conn.execute("select ceaseless.disable_schedule('loop', %s, %s)", (loop, "x" * 5000))

    assert conn.execute(
        "select enabled, last_error from ceaseless.routines where id = %s", (routine,)
    ).fetchone() == (False, "bad")
    row = loop_row(conn, loop)
    assert row["enabled"] is False and len(row["last_error"]) == 2000


def test_next_schedule_fire_is_the_earliest_of_both_kinds(conn: psycopg.Connection) -> None:
    routine = _cron_routine(conn)
    loop = _cron_loop(conn)
    assert conn.execute("select ceaseless.next_schedule_fire()").fetchone() == (None,)
    conn.execute(
        "update ceaseless.routines set next_fire_at = %s where id = %s",
        (DUE + timedelta(hours=1), routine),
    )
    conn.execute("update ceaseless.loops set next_fire_at = %s where id = %s", (DUE, loop))

    assert conn.execute("select ceaseless.next_schedule_fire()").fetchone() == (DUE,)
    conn.execute("update ceaseless.loops set enabled = false where id = %s", (loop,))
    assert conn.execute("select ceaseless.next_schedule_fire()").fetchone() == (
        DUE + timedelta(hours=1),
    )
