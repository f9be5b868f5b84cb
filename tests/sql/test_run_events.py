"""run_events, run_snapshot, loop_events, loop_snapshot: what the SSE observer streams."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

import psycopg
import pytest

from tests.factories import make_agent
from tests.sql.loops import make_loop, run_loop, succeed
from tests.sql.topology import diamond, graph, node, run_node, start_run


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn)


def _events(conn: psycopg.Connection, fn: str, key: UUID, after: int = 0) -> list[tuple]:
    return conn.execute(
        f"select id, event, data, last from ceaseless.{fn}(%s, %s)", (key, after)
    ).fetchall()


def _snapshot(conn: psycopg.Connection, fn: str, key: UUID) -> Any:
    row = conn.execute(f"select ceaseless.{fn}(%s)", (key,)).fetchone()
    assert row is not None
    return row[0]


def test_run_events_list_every_transition_in_commit_order_ending_with_the_final_status(
    conn: psycopg.Connection,
) -> None:
    run = start_run(conn, diamond())
    for n in "ABCD":
        run_node(conn, run, n)
    events = _events(conn, "run_events", run)
    ids = [e[0] for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    runs = [e[2]["status"] for e in events if e[1] == "run"]
    assert runs == ["pending", "running", "succeeded"]
    d = [e[2]["status"] for e in events if e[1] == "node" and e[2]["node"] == "D"]
    assert d == ["queued", "running", "succeeded"]
    # D is queued only after B and C succeeded.
    order = [(e[2].get("node"), e[2]["status"]) for e in events if e[1] == "node"]
    assert order.index(("D", "queued")) > order.index(("B", "succeeded"))
    assert order.index(("D", "queued")) > order.index(("C", "succeeded"))
    assert [e[3] for e in events].count(True) == 1
    assert events[[e[3] for e in events].index(True)][2]["status"] == "succeeded"
    assert all(e[2]["run_id"] == str(run) and "at" in e[2] for e in events)


def test_run_events_after_an_id_return_exactly_the_rest(conn: psycopg.Connection) -> None:
    run = start_run(conn, diamond())
    run_node(conn, run, "A")
    first = _events(conn, "run_events", run)
    run_node(conn, run, "B")
    rest = _events(conn, "run_events", run, first[-1][0])
    assert rest and min(e[0] for e in rest) > first[-1][0]
    assert _events(conn, "run_events", run) == first + rest
    limited = conn.execute("select id from ceaseless.run_events(%s, 0, 2)", (run,)).fetchall()
    assert [r[0] for r in limited] == [e[0] for e in first[:2]]


def test_the_snapshot_shows_the_run_its_nodes_and_open_approvals_and_the_id_it_is_current_to(
    conn: psycopg.Connection,
) -> None:
    run = start_run(conn, diamond(D={"gate": "approval"}))
    for n in "ABC":
        run_node(conn, run, n)
    snap = _snapshot(conn, "run_snapshot", run)
    assert snap["run"]["status"] == "awaiting_approval" and snap["final"] is False
    assert [n["node"] for n in snap["nodes"]] == ["A", "B", "C", "D"]
    assert {n["node"]: n["status"] for n in snap["nodes"]}["D"] == "awaiting_approval"
    (approval,) = snap["approvals"]
    assert approval["node"] == "D" and approval["status"] == "pending"
    events = _events(conn, "run_events", run)
    assert snap["last_event_id"] == events[-1][0]
    assert events[-1][1] == "run" or any(e[1] == "approval" for e in events)
    conn.execute(
        "select ceaseless.decide_approval(%s, false, 'alice', 'not today')",
        (approval["approval_id"],),
    )
    after = _events(conn, "run_events", run, snap["last_event_id"])
    decided = [e[2] for e in after if e[1] == "approval"]
    assert decided == [
        {
            **decided[0],
            "status": "rejected",
            "old_status": "pending",
            "decided_by": "alice",
            "note": "not today",
        }
    ]
    assert after[-1][3] is False or after[-1][2]["status"] == "failed"
    assert [e[2]["status"] for e in after if e[3]] == ["failed"]
    final = _snapshot(conn, "run_snapshot", run)
    assert final["final"] is True and final["approvals"] == []


def test_no_run_no_snapshot(conn: psycopg.Connection) -> None:
    assert _snapshot(conn, "run_snapshot", UUID(int=1)) is None
    assert _snapshot(conn, "loop_snapshot", UUID(int=1)) is None
    assert _events(conn, "run_events", UUID(int=1)) == []


def test_loop_events_follow_every_iteration_and_the_loop_stopping(
    conn: psycopg.Connection,
) -> None:
    loop = make_loop(
        conn, triggers={"on_completion": True}, policy={"kind": "iters", "spec": {"n": 2}}
    )
    start = _snapshot(conn, "loop_snapshot", loop)
    assert start["loop"]["loop_id"] == str(loop) and start["run"] is None
    first = run_loop(conn, loop)
    succeed(conn, first, "one")
    second = conn.execute(
        "select id from ceaseless.topology_runs where loop_id = %s and iteration = 2", (loop,)
    ).fetchone()[0]
    succeed(conn, second, "two")
    events = _events(conn, "loop_events", loop, start["last_event_id"])
    runs = [(e[2]["run_id"], e[2]["status"]) for e in events if e[1] == "run"]
    assert runs[0] == (str(first), "pending") and (str(second), "succeeded") in runs
    assert {e[2]["run_id"] for e in events if e[1] == "node"} == {str(first), str(second)}
    stops = [e[2] for e in events if e[1] == "loop"]
    assert stops[-1]["status"] == "disabled" and stops[-1]["stopped_reason"] == "completed"
    # Resuming halfway gives the rest, nothing twice.
    half = events[len(events) // 2][0]
    assert _events(conn, "loop_events", loop, half) == [e for e in events if e[0] > half]
    snap = _snapshot(conn, "loop_snapshot", loop)
    assert snap["run"]["run"]["run_id"] == str(second)
    assert snap["loop"]["stopped_reason"] == "completed"
    assert snap["last_event_id"] == events[-1][0]
    assert "webhook_token" not in json.dumps(snap)


def test_loop_events_end_with_the_loop_deleted(conn: psycopg.Connection) -> None:
    loop = make_loop(conn)
    conn.execute("delete from ceaseless.loops where id = %s", (loop,))
    events = _events(conn, "loop_events", loop)
    assert events[-1][1] == "loop" and events[-1][2]["action"] == "delete" and events[-1][3]


def test_loop_events_find_run_rows_by_the_loop_index(conn: psycopg.Connection) -> None:
    loop = make_loop(conn)
    conn.execute("set enable_seqscan = off")
    plan = "\n".join(
        r[0]
        for r in conn.execute(
            "explain select * from ceaseless.audit_log a where a.entity = 'topology_run' "
            "and a.detail ->> 'loop_id' = %s and a.id > 0",
            (str(loop),),
        ).fetchall()
    )
    assert "audit_log_run_loop_idx" in plan


def test_a_one_node_graph_snapshot_orders_nodes_by_the_graph(conn: psycopg.Connection) -> None:
    run = start_run(conn, graph([node("Z"), node("A")]))
    snap = _snapshot(conn, "run_snapshot", run)
    assert [n["node"] for n in snap["nodes"]] == ["Z", "A"]


def test_a_user_role_cannot_read_the_streams(conn: psycopg.Connection) -> None:
    run = start_run(conn, diamond())
    conn.execute("set role ceaseless_user")
    for call in ("run_events(%s)", "run_snapshot(%s)", "loop_events(%s)", "loop_snapshot(%s)"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
            conn.execute(f"select * from ceaseless.{call}", (run,))
