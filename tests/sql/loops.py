"""Loops for SQL tests: a loop with defaults, its iterations, and ending an iteration."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

import psycopg

from tests.sql.topology import graph, node, run_node

LIVE = ("pending", "running", "awaiting_approval")


def one_node() -> dict:
    return graph([node("A")])


def make_loop(
    conn: psycopg.Connection,
    *,
    triggers: dict | None = None,
    policy: dict | None = None,
    task: str = "improve the thing",
    g: dict | None = None,
    **columns: Any,
) -> UUID:
    """Insert a loop; unpaced (min_interval_secs 0) unless `min_interval_secs` is given.

    Tests chain iterations in the same instant; the pace between them has tests of its own
    (test_loop_pacing.py).
    """
    values: dict[str, Any] = {
        "title": "a loop",
        "min_interval_secs": 0,
        "description": "",
        "graph": json.dumps(g or one_node()),
        "task_template": task,
        "triggers": json.dumps(triggers or {}),
        "repeat_policy": json.dumps(policy or {"kind": "infinite"}),
        **columns,
    }
    names = ", ".join(values)
    marks = ", ".join(["%s"] * len(values))
    row = conn.execute(
        f"insert into ceaseless.loops ({names}) values ({marks}) returning id",
        list(values.values()),
    ).fetchone()
    assert row is not None
    return row[0]


def loop_row(conn: psycopg.Connection, loop_id: UUID) -> dict[str, Any]:
    cur = conn.execute("select * from ceaseless.loops where id = %s", (loop_id,))
    row = cur.fetchone()
    assert row is not None and cur.description is not None
    return {col.name: value for col, value in zip(cur.description, row, strict=True)}


def runs(conn: psycopg.Connection, loop_id: UUID) -> list[dict[str, Any]]:
    """Every run of the loop, skipped ones too, oldest first."""
    cur = conn.execute(
        "select * from ceaseless.topology_runs where loop_id = %s "
        "order by created_at, iteration nulls last",
        (loop_id,),
    )
    assert cur.description is not None
    names = [col.name for col in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def iterations(conn: psycopg.Connection, loop_id: UUID) -> list[dict[str, Any]]:
    return sorted(
        (r for r in runs(conn, loop_id) if r["iteration"] is not None),
        key=lambda r: r["iteration"],
    )


def live(conn: psycopg.Connection, loop_id: UUID) -> UUID:
    """The loop's one live iteration."""
    found = [r["id"] for r in runs(conn, loop_id) if r["status"] in LIVE]
    assert len(found) == 1, f"expected one live iteration, found {len(found)}"
    return found[0]


def run_loop(conn: psycopg.Connection, loop_id: UUID) -> UUID:
    row = conn.execute("select ceaseless.run_loop(%s)", (loop_id,)).fetchone()
    assert row is not None
    return row[0]


def succeed(conn: psycopg.Connection, run_id: UUID, message: str = "done") -> None:
    """End a one-node iteration as the engine does when its job delivers `message`."""
    run_node(conn, run_id, "A", "succeeded", message=message)


def fail(conn: psycopg.Connection, run_id: UUID) -> None:
    """End a one-node iteration as failed: its job is cancelled, which fails its node."""
    job = conn.execute(
        "select job_id from ceaseless.topology_nodes where topology_run_id = %s", (run_id,)
    ).fetchone()
    assert job is not None
    conn.execute("select ceaseless.cancel_job(%s)", (job[0],))
