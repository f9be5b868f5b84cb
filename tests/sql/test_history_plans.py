"""The operator views read live work, not history: plans with a large finished history.

A queue that runs for months holds far more finished jobs than live ones; a view over live work
must read the live jobs through the partial indexes that hold only them, whatever the history.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg

from tests.factories import make_agent, make_jobs
from tests.sql.plans import nodes

HISTORY = 50_000


def _history(conn: psycopg.Connection, jobs: int) -> None:
    """`jobs` delivered jobs, written as history is (their triggers are not what is measured)."""
    conn.execute(
        "insert into ceaseless.job (kind, state, agent, prompt, finished_at, attempts) "
        "select 'task', 'delivered', 'noop', 'done ' || g, now(), 1 "
        "from generate_series(1, %s) g",
        (jobs,),
    )


def _plan(conn: psycopg.Connection, query: str) -> dict[str, Any]:
    """The plan of `query` as a warm session runs it: the run reading the fewest buffers of
    three. A first run after VACUUM, or after a cache reset that other databases' DDL can
    cause on a busy server, plans the view's functions again, and their catalog reads count
    in the view's buffers."""
    plans = []
    for _ in range(3):
        row = conn.execute("explain (analyze, buffers, format json) " + query).fetchone()
        assert row is not None
        raw = row[0]
        plans.append((json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"])
    return min(plans, key=_buffers)


def _buffers(plan: dict[str, Any]) -> int:
    return int(plan["Shared Hit Blocks"] + plan.get("Shared Read Blocks", 0))


def test_job_queue_reads_the_live_jobs_by_their_partial_indexes_not_the_history(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, max_concurrent=100)
    _history(conn, HISTORY)
    make_jobs(conn, 200)
    conn.execute("select ceaseless.claim_jobs('w1', 20)")
    conn.execute("vacuum analyze ceaseless.job")
    plan = _plan(conn, "select * from ceaseless.job_queue")
    assert plan["Actual Rows"] == 200
    scans = [n for n in nodes(plan) if n["Node Type"] == "Seq Scan"]
    assert [n.get("Relation Name") for n in scans if n.get("Relation Name") == "job"] == []
    # The live jobs' pages and their index pages: a few dozen, where the table holds
    # HISTORY finished rows (hundreds of pages).
    assert _buffers(plan) < 100, _buffers(plan)


def test_notification_status_reads_the_undelivered_not_the_delivered_history(
    conn: psycopg.Connection,
) -> None:
    conn.execute(
        "insert into ceaseless.notifications (source_table, source_id, kind, subject) "
        "select 'job', gen_random_uuid(), 'failure', 's' from generate_series(1, 30)"
    )
    conn.execute("vacuum analyze ceaseless.notifications")
    without_history = _buffers(_plan(conn, "select * from ceaseless.notification_status"))
    conn.execute(
        "insert into ceaseless.notifications (source_table, source_id, kind, subject, status, "
        "  delivered_at) "
        "select 'job', gen_random_uuid(), 'failure', 's', 'delivered', now() "
        "from generate_series(1, %s)",
        (HISTORY,),
    )
    conn.execute("vacuum analyze ceaseless.notifications")
    plan = _plan(conn, "select * from ceaseless.notification_status")
    scans = [n for n in nodes(plan) if n.get("Relation Name") == "notifications"]
    assert scans and all(n["Node Type"] != "Seq Scan" for n in scans), scans
    # HISTORY delivered rows (hundreds of pages) cost the view nothing.
    assert _buffers(plan) <= without_history + 10, (_buffers(plan), without_history)
    rows = conn.execute(
        "select status, notifications from ceaseless.notification_status"
    ).fetchall()
    # The 30 pending; the delivered rows were written here, never counted by a delivery.
    assert rows == [("pending", 30)]
