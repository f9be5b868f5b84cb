"""Topology runs for SQL tests: graphs, runs, and driving a node's job as a listener would."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

import psycopg

from tests.factories import finish


def node(node_id: str, agent: str = "noop", prompt: str | None = None, **extra: Any) -> dict:
    return {"id": node_id, "agent": agent, "prompt": prompt or f"do {node_id}", **extra}


def graph(nodes: list[dict], edges: list[tuple[str, str]] | None = None) -> dict:
    return {"nodes": nodes, "edges": [{"from": a, "to": b} for a, b in edges or []]}


def diamond(**gated: Any) -> dict:
    """A → B, A → C, B + C → D; keyword arguments add keys to the node of that name."""
    return graph(
        [node(n, **gated.get(n, {})) for n in "ABCD"],
        [("A", "B"), ("A", "C"), ("B", "D"), ("C", "D")],
    )


def start_run(conn: psycopg.Connection, g: dict, task: str = "the task", **columns: Any) -> UUID:
    values: dict[str, Any] = {"graph": json.dumps(g), "task": task, **columns}
    names = ", ".join(values)
    marks = ", ".join(["%s"] * len(values))
    row = conn.execute(
        f"insert into ceaseless.topology_runs ({names}) values ({marks}) returning id",
        list(values.values()),
    ).fetchone()
    assert row is not None
    return row[0]


def run_row(conn: psycopg.Connection, run_id: UUID) -> dict[str, Any]:
    cur = conn.execute("select * from ceaseless.topology_runs where id = %s", (run_id,))
    row = cur.fetchone()
    assert row is not None and cur.description is not None
    return {col.name: value for col, value in zip(cur.description, row, strict=True)}


def nodes(conn: psycopg.Connection, run_id: UUID) -> dict[str, dict[str, Any]]:
    """The run's rows of topology_node_status, by node."""
    cur = conn.execute(
        "select * from ceaseless.topology_node_status where run_id = %s order by node", (run_id,)
    )
    assert cur.description is not None
    names = [col.name for col in cur.description]
    return {row[3]: dict(zip(names, row, strict=True)) for row in cur.fetchall()}


def states(conn: psycopg.Connection, run_id: UUID) -> dict[str, str]:
    return {n: r["state"] for n, r in nodes(conn, run_id).items()}


def job_of(conn: psycopg.Connection, run_id: UUID, node_id: str) -> UUID:
    row = conn.execute(
        "select job_id from ceaseless.topology_nodes where topology_run_id = %s and node_id = %s",
        (run_id, node_id),
    ).fetchone()
    assert row is not None and row[0] is not None, f"node {node_id} has no job"
    return row[0]


def start_job(conn: psycopg.Connection, job_id: UUID, worker: str = "w1") -> UUID:
    """Claim and start one job as claim_jobs(p_start) does, whatever else is due: its run id."""
    conn.execute(
        "update ceaseless.job set state = 'running', claimed_by = %s, claimed_at = now(), "
        "claim_expires_at = now() + interval '1 hour', attempts = attempts + 1, "
        "updated_at = now() where id = %s and state = 'pending'",
        (worker, job_id),
    )
    row = conn.execute(
        "insert into ceaseless.agent_run (job_id, agent, adapter, worker, attempt) "
        "select id, agent, 'noop', %s, attempts from ceaseless.job where id = %s returning id",
        (worker, job_id),
    ).fetchone()
    assert row is not None
    return row[0]


def run_node(
    conn: psycopg.Connection,
    run_id: UUID,
    node_id: str,
    outcome: str = "succeeded",
    message: str | None = None,
    **fields: Any,
) -> str:
    """Start the node's job and finish its agent run through finish_runs: the job's new state."""
    agent_run = start_job(conn, job_of(conn, run_id, node_id))
    return finish(
        conn,
        agent_run,
        outcome,
        final_message=message if message is not None else f"output of {node_id}",
        **fields,
    )
