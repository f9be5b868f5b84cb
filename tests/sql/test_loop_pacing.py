"""A loop's pace (loops.min_interval_secs) through SQL, with p_now pinned: a fire sooner than
the interval after the latest iteration's fire waits as a held fire and starts when the
interval has passed, never skipped; 0 is unpaced; run_loop is not paced; bad values are
refused; a user paces her own loop.

Iterations are fired at T, an hour ahead of the clock, so an iteration ending now (the
engine's clock) is always inside the interval of one fired at T, however slow the test.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
import pytest

from tests.factories import make_agent
from tests.sql.loops import iterations, live, loop_row, make_loop, runs, succeed
from tests.sql.topology import graph, node

T = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
SECOND = timedelta(seconds=1)


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=100)


def _run_loop(conn: psycopg.Connection, loop: UUID, at: datetime) -> UUID:
    row = conn.execute("select ceaseless.run_loop(%s, %s)", (loop, at)).fetchone()
    assert row is not None
    return row[0]


def _held(conn: psycopg.Connection, loop: UUID) -> list[dict[str, Any]]:
    cur = conn.execute(
        "select * from ceaseless.held_fires where loop_id = %s order by seq", (loop,)
    )
    assert cur.description is not None
    names = [c.name for c in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def _fire_held(conn: psycopg.Connection, at: datetime) -> list[tuple[str, str | None]]:
    return [
        (r[0], r[1])
        for r in conn.execute(
            "select status, skip_reason from ceaseless.fire_held(%s)", (at,)
        ).fetchall()
    ]


def _event(conn: psycopg.Connection, content: str, at: datetime, user: str = "alice") -> None:
    conn.execute(
        "insert into ceaseless.events (user_id, content, created_at) values (%s, %s, %s)",
        (user, content, at),
    )


def _skipped(conn: psycopg.Connection, loop: UUID) -> list[str]:
    return [r["skip_reason"] for r in runs(conn, loop) if r["status"] == "skipped"]


def _why(conn: psycopg.Connection, loop: UUID, at: datetime) -> list[tuple[str, str, Any]]:
    return [
        (r[0], r[1], r[2])
        for r in conn.execute("select * from ceaseless.explain_loop(%s, %s)", (loop, at))
    ]


def _spinning_loop(conn: psycopg.Connection, **columns: Any) -> UUID:
    """An infinite on_completion loop, started at T: its iterations end the moment they start."""
    loop = make_loop(conn, triggers={"on_completion": True}, **columns)
    _run_loop(conn, loop, T)
    return loop


# --- the pace ----------------------------------------------------------------------------


def test_an_instant_on_completion_loop_fires_at_most_once_per_interval(
    conn: psycopg.Connection,
) -> None:
    loop = _spinning_loop(conn, min_interval_secs=1)
    # Ten seconds of a scheduler calling fire_held ten times a second, every iteration
    # ending as soon as it is live: unpaced, this chain would run a hundred iterations.
    for tick in range(1, 101):
        at = T + tick * timedelta(milliseconds=100)
        for run in runs(conn, loop):
            if run["status"] in ("pending", "running"):
                succeed(conn, run["id"])
        _fire_held(conn, at)
    chain = iterations(conn, loop)
    assert [i["iteration"] for i in chain] == list(range(1, 12))
    assert [i["created_at"] for i in chain] == [T + n * SECOND for n in range(11)]
    assert [i["trigger_type"] for i in chain] == ["manual"] + ["on_completion"] * 10
    # Deferred, never refused.
    assert _skipped(conn, loop) == []


def test_a_deferred_chain_fire_is_held_and_shown_until_the_interval_ends(
    conn: psycopg.Connection,
) -> None:
    loop = _spinning_loop(conn, min_interval_secs=5)
    first = live(conn, loop)
    succeed(conn, first)

    [held] = _held(conn, loop)
    assert (held["reason"], held["blocked_by"], held["trigger_type"], held["fire_at"]) == (
        "buffered",
        "min_interval",
        "on_completion",
        T + 5 * SECOND,
    )
    assert held["trigger_detail"] == "iteration 1 succeeded"
    assert [i["status"] for i in iterations(conn, loop)] == ["succeeded"]
    status = conn.execute(
        "select min_interval_secs, paced_until, held_fires, held_next_at, skipped_fires "
        "from ceaseless.loop_status where id = %s",
        (loop,),
    ).fetchone()
    assert status == (5, T + 5 * SECOND, 1, T + 5 * SECOND, 0)
    why = _why(conn, loop, T + 2 * SECOND)
    assert [(r[0], r[2]) for r in why] == [
        ("buffered", T + 5 * SECOND),
        ("min_interval", T + 5 * SECOND),
    ]
    assert "held by min_interval" in why[0][1]
    assert "min_interval_secs is 5" in why[1][1] and "not skipped" in why[1][1]
    # The scheduler sleeps until then.
    assert conn.execute("select ceaseless.next_schedule_fire()").fetchone() == (T + 5 * SECOND,)

    assert _fire_held(conn, T + 5 * SECOND - timedelta(milliseconds=1)) == []
    assert _fire_held(conn, T + 5 * SECOND) == [("running", None)]
    chain = iterations(conn, loop)
    assert [(i["iteration"], i["parent_run_id"]) for i in chain] == [(1, None), (2, first)]
    assert chain[1]["created_at"] == T + 5 * SECOND
    assert _held(conn, loop) == []
    assert _skipped(conn, loop) == []
    # Once the interval has passed, nothing is explained by it.
    assert "min_interval" not in [r[0] for r in _why(conn, loop, T + 11 * SECOND)]


def test_min_interval_0_chains_the_next_iteration_at_once(conn: psycopg.Connection) -> None:
    loop = _spinning_loop(conn, min_interval_secs=0, policy={"kind": "iters", "spec": {"n": 3}})
    for _ in range(3):
        succeed(conn, live(conn, loop))
    assert [i["status"] for i in iterations(conn, loop)] == ["succeeded"] * 3
    assert loop_row(conn, loop)["stopped_reason"] == "completed"
    assert _held(conn, loop) == []
    assert conn.execute(
        "select paced_until from ceaseless.loop_status where id = %s", (loop,)
    ).fetchone() == (None,)


def test_a_new_loop_is_paced_at_one_second(conn: psycopg.Connection) -> None:
    row = conn.execute(
        "insert into ceaseless.loops (title, description, graph, task_template, triggers) "
        "values ('spin', '', %s, 'go', '{\"on_completion\": true}') returning id",
        (json.dumps(graph([node("A")])),),
    ).fetchone()
    assert row is not None
    loop = row[0]
    assert loop_row(conn, loop)["min_interval_secs"] == 1
    _run_loop(conn, loop, T)
    succeed(conn, live(conn, loop))
    assert [h["fire_at"] for h in _held(conn, loop)] == [T + SECOND]


def test_run_loop_is_not_paced(conn: psycopg.Connection) -> None:
    loop = make_loop(conn, min_interval_secs=60)
    succeed(conn, _run_loop(conn, loop, T))
    second = _run_loop(conn, loop, T + SECOND)
    assert [i["id"] for i in iterations(conn, loop)][1] == second
    assert _held(conn, loop) == []


def test_event_fires_inside_the_interval_wait_as_one_with_the_newest_event(
    conn: psycopg.Connection,
) -> None:
    loop = make_loop(conn, triggers={"event": {"pattern": "deploy"}}, min_interval_secs=10)
    # The loop's owner is the connection's role; events are that user's.
    owner = loop_row(conn, loop)["user_id"]
    _event(conn, "deploy 1", T, owner)
    succeed(conn, live(conn, loop))
    _event(conn, "deploy 2", T + 2 * SECOND, owner)
    _event(conn, "deploy 3", T + 3 * SECOND, owner)
    [held] = _held(conn, loop)
    assert (held["blocked_by"], held["fire_at"], held["collapsed"]) == (
        "min_interval",
        T + 10 * SECOND,
        2,
    )
    assert _fire_held(conn, T + 9 * SECOND) == []
    assert _fire_held(conn, T + 10 * SECOND) == [("running", None)]
    chain = iterations(conn, loop)
    assert len(chain) == 2 and "deploy 3" in chain[1]["task"]
    assert _skipped(conn, loop) == []


def test_a_buffered_fire_released_inside_the_interval_waits_for_its_end(
    conn: psycopg.Connection,
) -> None:
    loop = make_loop(
        conn,
        triggers={"event": {"pattern": "deploy"}},
        overlap_policy="buffer_one",
        min_interval_secs=10,
    )
    owner = loop_row(conn, loop)["user_id"]
    _event(conn, "deploy 1", T, owner)
    _event(conn, "deploy 2", T + SECOND, owner)
    assert [h["blocked_by"] for h in _held(conn, loop)] == ["live_iteration"]
    succeed(conn, live(conn, loop))
    # The iteration's end releases it, and the interval holds it again, as the same row.
    assert _fire_held(conn, T + 2 * SECOND) == [("buffered", "min_interval")]
    [held] = _held(conn, loop)
    assert (held["blocked_by"], held["fire_at"]) == ("min_interval", T + 10 * SECOND)
    assert _fire_held(conn, T + 10 * SECOND) == [("running", None)]
    assert len(iterations(conn, loop)) == 2
    assert _skipped(conn, loop) == []


def test_cancel_other_waits_for_the_interval_before_cancelling(conn: psycopg.Connection) -> None:
    loop = make_loop(
        conn,
        triggers={"event": {"pattern": "deploy"}},
        overlap_policy="cancel_other",
        min_interval_secs=10,
    )
    owner = loop_row(conn, loop)["user_id"]
    _event(conn, "deploy 1", T, owner)
    first = live(conn, loop)
    _event(conn, "deploy 2", T + SECOND, owner)
    # Still live: the newer fire waits rather than cancelling an iteration a second old.
    assert live(conn, loop) == first
    assert [(r[0], r[2]) for r in _why(conn, loop, T + SECOND)][-1] == (
        "min_interval",
        T + 10 * SECOND,
    )
    assert _fire_held(conn, T + 10 * SECOND) == [("running", None)]
    by_iteration = {i["iteration"]: i for i in iterations(conn, loop)}
    assert by_iteration[1]["status"] == "cancelled" and by_iteration[2]["status"] == "running"


def test_a_cron_fire_inside_the_interval_is_deferred(conn: psycopg.Connection) -> None:
    loop = make_loop(conn, triggers={"cron": "* * * * *"}, min_interval_secs=90)
    succeed(conn, _run_loop(conn, loop, T))
    conn.execute(
        "update ceaseless.loops set next_fire_at = %s where id = %s", (T + 60 * SECOND, loop)
    )
    fired = conn.execute(
        "select status, skip_reason from ceaseless.fire_cron(array['loop'], array[%s]::uuid[], "
        "array[%s]::timestamptz[], array[0], %s)",
        (loop, T + 120 * SECOND, T + 60 * SECOND),
    ).fetchall()
    assert fired == [("buffered", "min_interval")]
    assert [h["fire_at"] for h in _held(conn, loop)] == [T + 90 * SECOND]
    # The slot moved on: the deferral is the held fire's, not the schedule's.
    assert loop_row(conn, loop)["next_fire_at"] == T + 120 * SECOND
    assert _fire_held(conn, T + 90 * SECOND) == [("running", None)]


def test_buffer_all_queues_paced_fires_and_folds_past_its_bound(conn: psycopg.Connection) -> None:
    conn.execute("update ceaseless.settings set value = '2' where key = 'overlap_buffer_max'")
    loop = make_loop(
        conn,
        triggers={"event": {"pattern": "deploy"}},
        overlap_policy="buffer_all",
        min_interval_secs=10,
    )
    owner = loop_row(conn, loop)["user_id"]
    _event(conn, "deploy 1", T, owner)
    succeed(conn, live(conn, loop))
    for n in (2, 3, 4):
        _event(conn, f"deploy {n}", T + n * SECOND, owner)
    # Two wait in order; the third, past overlap_buffer_max, waits with the newest.
    held = _held(conn, loop)
    assert [(h["blocked_by"], h["collapsed"]) for h in held] == [
        ("min_interval", 1),
        ("min_interval", 2),
    ]
    assert "deploy 2" in held[0]["context"] and "deploy 4" in held[1]["context"]
    assert _fire_held(conn, T + 10 * SECOND) == [("running", None)]
    succeed(conn, live(conn, loop))
    # The next one waits for the interval after the iteration just fired.
    assert _fire_held(conn, T + 19 * SECOND) == [("buffered", "min_interval")]
    assert _fire_held(conn, T + 20 * SECOND) == [("running", None)]
    tasks = [i["task"] for i in iterations(conn, loop)]
    assert ["deploy 1" in tasks[0], "deploy 2" in tasks[1], "deploy 4" in tasks[2]] == [True] * 3
    assert _held(conn, loop) == [] and _skipped(conn, loop) == []


def test_re_enabling_a_chain_inside_the_interval_defers_its_next_iteration(
    conn: psycopg.Connection,
) -> None:
    loop = _spinning_loop(conn, min_interval_secs=3600, policy={"kind": "iters", "spec": {"n": 1}})
    succeed(conn, live(conn, loop))
    assert loop_row(conn, loop)["stopped_reason"] == "completed"
    conn.execute("update ceaseless.loops set enabled = true where id = %s", (loop,))
    [held] = _held(conn, loop)
    assert (held["trigger_detail"], held["fire_at"]) == ("re-enabled", T + 3600 * SECOND)
    assert len(iterations(conn, loop)) == 1 and _skipped(conn, loop) == []


# --- validation and who may set it ---------------------------------------------------------


@pytest.mark.parametrize("value", [-1, 86401, None])
def test_a_bad_min_interval_is_refused_naming_the_field(
    conn: psycopg.Connection, value: int | None
) -> None:
    with pytest.raises(psycopg.Error) as raised:
        make_loop(conn, min_interval_secs=value)
    assert raised.value.sqlstate == "CE422"
    message = str(raised.value)
    assert message.startswith("loops.min_interval_secs: must be a whole number of seconds")
    assert message.split("\n")[0].endswith(f"; got {'nothing' if value is None else value}")


def test_an_update_to_a_bad_min_interval_is_refused(conn: psycopg.Connection) -> None:
    loop = make_loop(conn, min_interval_secs=0)
    with pytest.raises(psycopg.Error) as raised:
        conn.execute("update ceaseless.loops set min_interval_secs = -5 where id = %s", (loop,))
    assert raised.value.sqlstate == "CE422"
    assert "loops.min_interval_secs" in str(raised.value) and "got -5" in str(raised.value)


@pytest.mark.parametrize("value", [0, 86400])
def test_the_bounds_are_allowed(conn: psycopg.Connection, value: int) -> None:
    assert loop_row(conn, make_loop(conn, min_interval_secs=value))["min_interval_secs"] == value


def test_a_user_paces_her_own_loop_and_sees_its_deferral(
    conn: psycopg.Connection, login_role: Callable[[str], psycopg.Connection]
) -> None:
    alice, bob = login_role("alice"), login_role("bob")
    loop = make_loop(alice, triggers={"on_completion": True}, min_interval_secs=30)
    alice.execute("update ceaseless.loops set min_interval_secs = 20 where id = %s", (loop,))
    assert (
        bob.execute(
            "update ceaseless.loops set min_interval_secs = 0 where id = %s", (loop,)
        ).rowcount
        == 0
    )
    _run_loop(alice, loop, T)
    succeed(conn, live(conn, loop))
    assert alice.execute(
        "select min_interval_secs, paced_until, held_fires from ceaseless.loop_status "
        "where id = %s",
        (loop,),
    ).fetchone() == (20, T + 20 * SECOND, 1)
    assert alice.execute(
        "select blocked_by, fire_at from ceaseless.held_fires where loop_id = %s", (loop,)
    ).fetchall() == [("min_interval", T + 20 * SECOND)]
    assert "min_interval" in [r[0] for r in _why(alice, loop, T + SECOND)]
    with pytest.raises(psycopg.Error) as raised:
        alice.execute("update ceaseless.loops set min_interval_secs = 86401 where id = %s", (loop,))
    assert raised.value.sqlstate == "CE422"
