"""The dashboard's queue page reads a bounded slice of the job table, however large it is."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from listener.queries.dashboard import JOBS_SQL, PAGE_ROWS
from tests.factories import make_agent, make_jobs
from tests.sql.plans import nodes


def _plan(conn: psycopg.Connection, **filters: str | None) -> dict[str, Any]:
    params = {"state": None, "lane": None, "kind": None, "limit": PAGE_ROWS, **filters}
    row = conn.execute("explain (analyze, buffers, format json) " + JOBS_SQL, params).fetchone()
    assert row is not None
    raw = row[0]
    return (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]


def test_the_queue_page_walks_the_newest_jobs_by_index_and_stops_at_its_limit(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, "noop")
    make_agent(conn, "other")
    make_jobs(conn, 20_000, "noop")
    make_jobs(conn, 300, "other")
    conn.execute("analyze ceaseless.job")
    for filters in ({}, {"lane": "other"}, {"state": "pending", "kind": "task"}):
        plan = _plan(conn, **filters)
        scans = [n for n in nodes(plan) if "Scan" in n["Node Type"]]
        assert [n.get("Index Name") for n in scans] == ["job_created_idx"], (filters, scans)
        assert not [n for n in nodes(plan) if n["Node Type"] == "Sort"], filters
        assert plan["Actual Rows"] == PAGE_ROWS
    # Unfiltered: the newest PAGE_ROWS rows and their index pages, not the table.
    plan = _plan(conn)
    assert plan["Shared Hit Blocks"] + plan.get("Shared Read Blocks", 0) < PAGE_ROWS * 2
