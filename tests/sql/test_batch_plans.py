"""Finishing runs and extending leases stay linear in the batch.

A listener draining short jobs finishes them 2,000 at a time and heartbeats
thousands of leases at once, usually on tables young enough to have no
statistics, or whose statistics were taken before the burst. There the planner
cannot size the batch, and two plan shapes turn a batch quadratic (seconds
instead of milliseconds): a nested loop that rescans a CTE for every outer
row, and a scan that tests every row of the table against an array of ids.
These tests run the functions on such a table and look for either shape.
"""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

import psycopg

from tests.factories import make_agent, make_jobs
from tests.sql.plans import explained, nodes

BATCH = 1_000


def _quadratic_shapes(plans: list[dict[str, Any]]) -> list[str]:
    found = []
    for plan in plans:
        for node in nodes(plan["Plan"]):
            if node["Node Type"] == "CTE Scan" and node.get("Actual Loops", 1) > 1:
                found.append(f"CTE {node['CTE Name']} rescanned {node['Actual Loops']} times")
            if node.get("Rows Removed by Join Filter", 0) > BATCH:
                found.append(f"{node['Node Type']} discarded {node['Rows Removed by Join Filter']}")
            if (
                node["Node Type"] == "Seq Scan"
                and node["Relation Name"] in ("job", "agent_run")
                and "ANY" in node.get("Filter", "")
            ):
                found.append(f"scan of {node['Relation Name']} against an array")
            if node["Node Type"] == "Named Tuplestore Scan" and node.get("Actual Loops", 1) > 1:
                name = node.get("Tuplestore Name", "a transition table")
                found.append(f"{name} rescanned {node['Actual Loops']} times")
    return found


def _claim_and_start(conn: psycopg.Connection, worker: str) -> list[tuple[UUID, UUID]]:
    rows = conn.execute(
        "select id, run_id from ceaseless.claim_jobs(%s, %s, p_start => true)", (worker, BATCH)
    ).fetchall()
    assert len(rows) == BATCH
    return rows


def test_finishing_a_batch_on_a_young_table_is_linear(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=10 * BATCH)
    make_jobs(conn, 4 * BATCH)
    _claim_and_start(conn, "other")  # running jobs of another listener
    runs = _claim_and_start(conn, "w1")
    payload = json.dumps([{"run_id": str(run), "outcome": "succeeded"} for _, run in runs])

    with explained(conn) as plans:
        states = conn.execute(
            "select job_state from ceaseless.finish_runs('w1', %s::jsonb)", (payload,)
        ).fetchall()

    assert states == [("delivered",)] * BATCH
    assert _quadratic_shapes(plans) == []


def test_a_heartbeat_of_thousands_of_leases_is_linear(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=10 * BATCH)
    make_jobs(conn, 4 * BATCH)
    _claim_and_start(conn, "other")
    held = [job for job, _ in _claim_and_start(conn, "w1")]

    with explained(conn) as plans:
        answers = conn.execute(
            "select held, renewed from ceaseless.extend_leases("
            "'w1', %s, now() + interval '50 seconds', 60)",
            (held,),
        ).fetchall()

    assert answers == [(True, True)] * BATCH
    assert _quadratic_shapes(plans) == []
    renewed = conn.execute(
        "select count(*) from ceaseless.job "
        "where claimed_by = 'w1' and claim_expires_at > now() + interval '100 seconds'"
    ).fetchone()
    assert renewed == (BATCH,)


def test_a_heartbeat_leaves_fresh_leases_alone(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=BATCH)
    make_jobs(conn, 10)
    held = [job for (job,) in conn.execute("select id from ceaseless.claim_jobs('w1', 10)")]
    before = conn.execute("select sum(xmin::text::bigint) from ceaseless.job").fetchone()

    answers = conn.execute(
        "select held, renewed from ceaseless.extend_leases('w1', %s, now(), 60)", (held,)
    ).fetchall()

    # Nothing lost, and nothing rewritten: every lease still has more than
    # half its life, so it outlives the next heartbeat as it is.
    assert answers == [(True, False)] * 10
    assert conn.execute("select sum(xmin::text::bigint) from ceaseless.job").fetchone() == before


def test_triggers_stay_linear_after_a_session_of_one_row_statements(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, max_concurrent=10 * BATCH)
    make_jobs(conn, 2 * BATCH)
    # A listener's connection often starts with one-job claims and finishes;
    # PL/pgSQL plans the triggers' statements then and keeps those plans.
    for _ in range(10):
        ((_, run),) = conn.execute(
            "select id, run_id from ceaseless.claim_jobs('w1', 1, p_start => true)"
        ).fetchall()
        payload = json.dumps([{"run_id": str(run), "outcome": "succeeded"}])
        conn.execute("select ceaseless.finish_runs('w1', %s::jsonb)", (payload,))

    with explained(conn) as plans:
        runs = _claim_and_start(conn, "w1")
        payload = json.dumps([{"run_id": str(run), "outcome": "succeeded"} for _, run in runs])
        conn.execute("select ceaseless.finish_runs('w1', %s::jsonb)", (payload,))

    assert _quadratic_shapes(plans) == []
