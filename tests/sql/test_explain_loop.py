"""explain_loop: each reason that holds a loop, created and read back.

Where a reason is the firing path's own rule (_fire_loop), the test also fires
the loop (run_loop) and checks the skip it records agrees: explain mirrors it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from uuid import UUID

import psycopg
import pytest

from tests.factories import make_agent, pause_lane
from tests.sql.loops import live, make_loop, run_loop, runs, succeed
from tests.sql.topology import graph, node

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)

Why = list[tuple[str, str, datetime | None]]


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn)


def _why(conn: psycopg.Connection, loop: UUID, now: datetime | None = None) -> Why:
    return conn.execute(
        "select * from ceaseless.explain_loop(%s, coalesce(%s, now()))", (loop, now)
    ).fetchall()


def _reasons(rows: Why) -> list[str]:
    return [row[0] for row in rows]


def _one(rows: Why, reason: str) -> tuple[str, datetime | None]:
    found = [(detail, clears) for r, detail, clears in rows if r == reason]
    assert len(found) == 1, rows
    return found[0]


def _skip_of_a_fire_now(conn: psycopg.Connection, loop: UUID) -> str | None:
    run = run_loop(conn, loop)
    return next(r["skip_reason"] for r in runs(conn, loop) if r["id"] == run)


def test_a_loop_nothing_holds_is_ready_and_says_what_fires_it(conn: psycopg.Connection) -> None:
    loop = make_loop(conn, triggers={"on_completion": True, "webhook_enabled": True})

    detail, clears = _one(_why(conn, loop), "ready")

    assert detail == (
        "fires on a signed POST to its webhook, run_loop (ceaseless loop run); "
        "then each iteration's end fires the next"
    )
    assert clears is None
    assert _skip_of_a_fire_now(conn, loop) is None


def test_a_stopped_loop_says_why_when_and_how_to_continue(conn: psycopg.Connection) -> None:
    loop = make_loop(
        conn, triggers={"on_completion": True}, policy={"kind": "iters", "spec": {"n": 1}}
    )
    succeed(conn, run_loop(conn, loop))

    detail, clears = _one(_why(conn, loop), "stopped")

    assert "stopped at" in detail and "its repeat policy is met" in detail
    assert f"update ceaseless.loops set enabled = true where id = '{loop}';" in detail
    assert clears is None
    assert _skip_of_a_fire_now(conn, loop) == "disabled"


def test_a_loop_disabled_by_the_engine_gives_its_last_error(conn: psycopg.Connection) -> None:
    loop = make_loop(conn, triggers={"cron": "0 9 * * *"})
    conn.execute("select ceaseless.disable_schedule('loop', %s, 'croniter refused it')", (loop,))

    detail, clears = _one(_why(conn, loop), "disabled")

    assert "is disabled (last error: croniter refused it)" in detail and clears is None
    # Disabled, it has no slot to wait for.
    assert _reasons(_why(conn, loop)) == ["disabled"]


def test_each_node_whose_agent_is_disabled_or_gone_is_named(conn: psycopg.Connection) -> None:
    make_agent(conn, "other")
    make_agent(conn, "gone")
    loop = make_loop(
        conn,
        g=graph([node("A"), node("B", "other"), node("C", "gone")], [("A", "B"), ("B", "C")]),
    )
    conn.execute("update ceaseless.agents set enabled = false where name = 'other'")
    conn.execute("delete from ceaseless.agents where name = 'gone'")

    rows = _why(conn, loop)

    assert _reasons(rows) == ["agent_disabled", "agent_disabled"]
    assert "node B runs on agent other, which is disabled" in rows[0][1]
    assert "node C runs on agent gone, which is not registered" in rows[1][1]
    assert _skip_of_a_fire_now(conn, loop) == "agent_disabled"


def test_an_on_completion_loop_waiting_for_its_agent_says_enabling_it_resumes(
    conn: psycopg.Connection,
) -> None:
    loop = make_loop(conn, triggers={"on_completion": True})
    conn.execute("update ceaseless.agents set enabled = false where name = 'noop'")

    detail, _ = _one(_why(conn, loop), "agent_disabled")

    assert detail.endswith("enabling it starts the next iteration")


def test_a_live_iteration_holds_the_next_and_its_own_holds_follow(
    conn: psycopg.Connection,
) -> None:
    loop = make_loop(conn, triggers={"on_completion": True})
    until = datetime.now(UTC) + timedelta(hours=1)
    pause_lane(conn, "noop", until)
    run = run_loop(conn, loop)

    rows = _why(conn, loop)

    assert _reasons(rows) == ["live_iteration", "lane_paused"]
    assert rows[0][1].startswith(f"iteration 1 (run {run}) is running since")
    assert rows[0][1].endswith("its end starts the next (on_completion)")
    assert rows[1][1].startswith("iteration 1: node A: lane noop is paused until")
    assert rows[1][2] == until
    assert _skip_of_a_fire_now(conn, loop) == "live_iteration"


def test_an_iteration_awaiting_approval_says_until_when(conn: psycopg.Connection) -> None:
    loop = make_loop(
        conn,
        g=graph([node("A"), node("B", gate="approval", approval_timeout_secs=600)], [("A", "B")]),
    )
    run = run_loop(conn, loop)
    succeed(conn, run)
    approval, expires = conn.execute(
        "select id, expires_at from ceaseless.approvals where topology_run_id = %s", (run,)
    ).fetchone() or (None, None)

    rows = _why(conn, loop)

    assert _reasons(rows) == ["live_iteration", "awaiting_approval"]
    assert "is awaiting_approval since" in rows[0][1]
    assert rows[1][1].startswith(f"iteration 1: node B awaits approval {approval}")
    assert rows[1][2] == expires and expires is not None


def test_a_cron_loop_is_not_scheduled_then_not_due_until_its_slot(
    conn: psycopg.Connection,
) -> None:
    loop = make_loop(conn, triggers={"cron": "0 9 * * *", "timezone": "Europe/Berlin"})

    assert _reasons(_why(conn, loop, T0)) == ["not_scheduled"]
    slot = T0 + timedelta(hours=20)
    conn.execute(
        "select ceaseless.set_next_fires(array['loop'], array[%s::uuid], array['0 9 * * *'], "
        "array['Europe/Berlin'], array[%s::timestamptz])",
        (loop, slot),
    )

    detail, clears = _one(_why(conn, loop, T0), "not_due")

    assert detail == "next slot of 0 9 * * * (Europe/Berlin)" and clears == slot
    detail, _ = _one(_why(conn, loop, slot), "ready")
    assert detail.startswith(f"fires on its cron slot {slot.astimezone(UTC):%Y-%m-%d}")


def test_reasons_are_listed_together_in_the_firing_order(conn: psycopg.Connection) -> None:
    make_agent(conn, "other")
    loop = make_loop(
        conn,
        triggers={"on_completion": True},
        g=graph([node("A"), node("B", "other")], [("A", "B")]),
    )
    run_loop(conn, loop)
    conn.execute("update ceaseless.loops set enabled = false where id = %s", (loop,))
    conn.execute(
        "update ceaseless.loops set graph = %s where id = %s",
        (json.dumps(graph([node("A", "other")])), loop),
    )
    conn.execute("update ceaseless.agents set enabled = false where name = 'other'")

    assert _reasons(_why(conn, loop)) == ["disabled", "agent_disabled", "live_iteration"]
    assert live(conn, loop) is not None


def test_an_unknown_loop_is_ce404(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as raised:
        _why(conn, UUID(int=7))
    assert raised.value.sqlstate == "CE404"
    assert "explain_loop: no loop with id" in str(raised.value)


def test_a_user_explains_its_own_loop_and_someone_elses_is_unknown(
    conn: psycopg.Connection, login_role: Callable[..., psycopg.Connection]
) -> None:
    alice = login_role("alice")
    bob = login_role("bob")
    row = alice.execute(
        "insert into ceaseless.loops (title, description, graph, task_template) "
        "values ('mine', '', %s, 'do it') returning id",
        (json.dumps(graph([node("A")])),),
    ).fetchone()
    assert row is not None
    # Its live iteration's holds too: explain_topology_run, as alice.
    pause_lane(conn, "noop", datetime.now(UTC) + timedelta(hours=1))
    alice.execute("select ceaseless.run_loop(%s)", (row[0],))

    assert _reasons(_why(alice, row[0])) == ["live_iteration", "lane_paused"]
    with pytest.raises(psycopg.Error) as raised:
        _why(bob, row[0])
    assert raised.value.sqlstate == "CE404"
