"""A lane's window is read through agent_run_lane_window_idx, however long its history.

_lane_capacity runs its statement on PL/pgSQL's generic plan, where the window's start is a
parameter: the planner guesses a third of the lane's runs fall in the window and, on a large
agent_run, reads the whole table (bench/history.py: 4,000,000 runs, 65,574 buffers for
governor_usage and for every explain_job; the plan does not flip at sizes a test can load, so
the evidence for enable_seqscan = off on the function is that bench, docs/performance.md).
"""

from __future__ import annotations

from typing import Any

import psycopg

from tests.factories import make_agent
from tests.sql.plans import explained, nodes

RUNS = 60_000


def _history(conn: psycopg.Connection) -> None:
    make_agent(conn)
    with conn.transaction():
        conn.execute("set local session_replication_role = replica")
        conn.execute(
            "insert into ceaseless.agent_run (job_id, agent, adapter, worker, attempt, outcome, "
            "  started_at, finished_at) "
            "select gen_random_uuid(), 'noop', 'noop', 'old', 1, 'succeeded', "
            "  now() - interval '20 days', now() - interval '20 days' "
            "from generate_series(1, %s)",
            (RUNS,),
        )
    conn.execute("vacuum analyze ceaseless.agent_run")
    # The plan a long-lived listener or dashboard connection ends up with.
    conn.execute("set plan_cache_mode = force_generic_plan")


def _window_scans(conn: psycopg.Connection) -> list[dict[str, Any]]:
    with explained(conn) as plans:
        conn.execute("select * from ceaseless.governor_usage").fetchall()
    return [
        n for plan in plans for n in nodes(plan["Plan"]) if n.get("Relation Name") == "agent_run"
    ]


def test_the_window_is_an_index_range_on_a_long_history(conn: psycopg.Connection) -> None:
    _history(conn)
    scans = _window_scans(conn)
    assert scans and all(n["Node Type"] != "Seq Scan" for n in scans), scans
