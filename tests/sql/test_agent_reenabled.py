"""Re-enabling an agent starts what re-enabling the loop would have started.

An on_completion loop is fired only by its iterations' ends and by being
re-enabled: a fire refused because an agent of its graph was disabled left it
enabled with nothing live and nothing to fire it. Routines have no such gap:
their triggers come from outside (a cron slot, an event, a webhook, a person).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from tests.factories import make_agent, make_routine
from tests.sql.loops import LIVE, live, loop_row, make_loop, run_loop, runs, succeed
from tests.sql.topology import graph, node


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn, max_attempts=1)


def _set_agent(conn: psycopg.Connection, name: str, enabled: bool) -> None:
    conn.execute("update ceaseless.agents set enabled = %s where name = %s", (enabled, name))


def _live(conn: psycopg.Connection, loop: object) -> list[dict]:
    return [r for r in runs(conn, loop) if r["status"] in LIVE]


def test_re_enabling_the_agent_resumes_a_loop_re_enabled_while_it_was_disabled(
    conn: psycopg.Connection,
) -> None:
    loop = make_loop(conn, triggers={"on_completion": True})
    run_loop(conn, loop)
    # Disabling the agent fails the live iteration, which stops the loop.
    _set_agent(conn, "noop", False)
    conn.execute("update ceaseless.loops set enabled = true where id = %s", (loop,))
    assert [(r["status"], r["skip_reason"]) for r in runs(conn, loop)][-1] == (
        "skipped",
        "agent_disabled",
    )
    assert _live(conn, loop) == []

    _set_agent(conn, "noop", True)

    [resumed] = _live(conn, loop)
    assert (resumed["iteration"], resumed["trigger_type"]) == (2, "on_completion")
    assert resumed["trigger_detail"] == "agent noop enabled"
    assert loop_row(conn, loop)["last_run_id"] == resumed["id"]


def test_an_iteration_that_ends_while_the_agent_is_disabled_chains_once_it_is_enabled(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, "other")
    loop = make_loop(conn, triggers={"on_completion": True})
    first = run_loop(conn, loop)
    # The next iteration needs an agent the live one does not: disabled, its
    # fire at the live one's end is refused.
    conn.execute(
        "update ceaseless.loops set graph = %s where id = %s",
        (json.dumps(graph([node("A", "other")])), loop),
    )
    _set_agent(conn, "other", False)
    succeed(conn, first)
    assert runs(conn, loop)[-1]["skip_reason"] == "agent_disabled"
    assert loop_row(conn, loop)["enabled"] is True and _live(conn, loop) == []

    _set_agent(conn, "other", True)

    assert live(conn, loop) is not None
    assert [r["iteration"] for r in runs(conn, loop) if r["iteration"]] == [1, 2]


def test_re_enabling_an_agent_starts_no_loop_that_still_needs_another_disabled_one(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, "other")
    loop = make_loop(
        conn,
        triggers={"on_completion": True},
        g=graph([node("A"), node("B", "other")], [("A", "B")]),
    )
    _set_agent(conn, "noop", False)
    _set_agent(conn, "other", False)
    run_loop(conn, loop)
    before = len(runs(conn, loop))

    _set_agent(conn, "noop", True)
    assert len(runs(conn, loop)) == before

    _set_agent(conn, "other", True)
    assert len(_live(conn, loop)) == 1


def test_re_enabling_an_agent_leaves_alone_loops_it_did_not_stall(
    conn: psycopg.Connection,
) -> None:
    never_started = make_loop(conn, triggers={"on_completion": True})
    stopped = make_loop(conn, triggers={"on_completion": True})
    run_loop(conn, stopped)
    cron_only = make_loop(conn, triggers={"cron": "0 * * * *"})
    _set_agent(conn, "noop", False)
    run_loop(conn, cron_only)

    _set_agent(conn, "noop", True)

    assert runs(conn, never_started) == []
    # Failed when its agent was disabled: stopped, and re-enabling the agent
    # does not re-enable loops.
    assert loop_row(conn, stopped)["stopped_reason"] == "failed"
    assert _live(conn, stopped) == []
    # Its next cron slot fires it.
    assert _live(conn, cron_only) == []


def test_a_cron_routine_keeps_its_slots_while_its_agent_is_disabled(
    conn: psycopg.Connection,
) -> None:
    routine = make_routine(conn, "tick", "cron", {"schedule": "0 * * * *"})
    due = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    conn.execute("update ceaseless.routines set next_fire_at = %s where id = %s", (due, routine))
    _set_agent(conn, "noop", False)
    rows = conn.execute(
        "select status, skip_reason, next_fire_at from ceaseless.fire_cron("
        "array['routine'], array[%s::uuid], array[%s::timestamptz], array[0], %s)",
        (routine, due + timedelta(hours=1), due + timedelta(seconds=1)),
    ).fetchall()
    assert rows == [("skipped", "agent_disabled", due + timedelta(hours=1))]

    _set_agent(conn, "noop", True)

    # Nothing was stranded: the next slot is still there, and fires.
    rows = conn.execute(
        "select status, skip_reason from ceaseless.fire_cron("
        "array['routine'], array[%s::uuid], array[%s::timestamptz], array[0], %s)",
        (routine, due + timedelta(hours=2), due + timedelta(hours=1, seconds=1)),
    ).fetchall()
    assert rows == [("running", None)]
