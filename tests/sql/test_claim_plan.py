"""The claim is O(due work): its plan walks job_claimable_idx and its buffers stay flat.

The claim runs inside a PL/pgSQL function, so the plan is read with auto_explain
(tests/sql/plans.py): the real statement as the listener runs it.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg

from tests.factories import make_agent, make_jobs
from tests.sql.plans import explained, nodes, statement


def _claim_plan(conn: psycopg.Connection) -> dict[str, Any]:
    with explained(conn) as plans, conn.transaction(force_rollback=True):
        claimed = conn.execute("select count(*) from ceaseless.claim_jobs('w1', 10)").fetchone()
        assert claimed == (10,)
    return statement(plans, "with lane")


def _picked(plan: dict[str, Any]) -> dict[str, Any]:
    return next(n for n in nodes(plan) if n.get("Subplan Name") == "CTE picked")


def _buffers(plan: dict[str, Any]) -> int:
    return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])


def test_claim_uses_the_partial_index_and_its_buffers_do_not_grow_with_the_backlog(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, max_concurrent=100)
    make_jobs(conn, 1_000)
    conn.execute("analyze ceaseless.job")
    small = _claim_plan(conn)
    make_jobs(conn, 99_000)
    conn.execute("analyze ceaseless.job")
    large = _claim_plan(conn)

    for plan in (small, large):
        index_scans = [n for n in nodes(plan) if n.get("Index Name") == "job_claimable_idx"]
        assert index_scans, json.dumps(plan)[:2000]
    # With a large backlog no step may scan the job table. (With a small one
    # the planner may rightly prefer reading its few pages to ten index probes.)
    seq = [
        n for n in nodes(large) if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "job"
    ]
    assert not seq, json.dumps(large, indent=1)
    # Finding the work (the `picked` CTE) must cost the same at any backlog.
    # Updating the ten claimed rows touches every index of job once per row,
    # so a hundred times the backlog may add a btree level to each of those
    # descents (logarithmic), never a scan of the backlog (linear: thousands).
    picked_small, picked_large = _buffers(_picked(small)), _buffers(_picked(large))
    assert picked_large <= picked_small + 2, (picked_small, picked_large)
    assert _buffers(large) <= _buffers(small) * 1.5, (_buffers(small), _buffers(large))
