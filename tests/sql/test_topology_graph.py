"""Topology graphs are validated at INSERT/UPDATE of loops and runs; errors name the culprit."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

import psycopg
import pytest

from tests.factories import make_agent
from tests.sql.topology import diamond, graph, node, run_row, start_run


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn)


def _refused(conn: psycopg.Connection, g: Any) -> str:
    with pytest.raises(psycopg.Error) as error:
        start_run(conn, g)
    assert error.value.sqlstate == "CE422", str(error.value)
    assert _count(conn, "topology_runs") == 0
    return str(error.value)


def _count(conn: psycopg.Connection, table: str) -> int:
    row = conn.execute(f"select count(*) from ceaseless.{table}").fetchone()
    assert row is not None
    return int(row[0])


def _loop(conn: psycopg.Connection, g: Any) -> UUID:
    row = conn.execute(
        "with u as (insert into ceaseless.users (handle) values ('h') "
        "           on conflict (handle) do update set handle = excluded.handle returning id) "
        "insert into ceaseless.loops (workspace_id, title, description, graph, task_template, "
        "created_by) select ceaseless._default_workspace(), 't', 'd', %s, 'task', u.id from u "
        "returning id",
        (json.dumps(g),),
    ).fetchone()
    assert row is not None
    return row[0]


def test_a_valid_diamond_is_stored_and_its_workspace_filled(conn: psycopg.Connection) -> None:
    run = run_row(conn, start_run(conn, diamond()))
    assert run["status"] == "running"
    default = conn.execute("select ceaseless._default_workspace()").fetchone()
    assert default is not None and run["workspace_id"] == default[0]


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        ([1, 2], "must be an object"),
        ({"nodes": [node("A")], "extra": 1}, 'unknown key "extra"'),
        ({"nodes": []}, "graph.nodes: must be a non-empty array"),
        ({"edges": []}, "graph.nodes: must be a non-empty array"),
        ({"nodes": ["A"]}, "node 1 must be an object"),
        ({"nodes": [node("A"), {"agent": "noop", "prompt": "p"}]}, "node 2: id must be"),
        ({"nodes": [node("a b")]}, '"a b"'),
        ({"nodes": [node("x" * 65)]}, "node 1: id must be 1-64"),
        ({"nodes": [node("A"), node("B"), node("A")]}, 'node id "A" appears twice'),
        ({"nodes": [node("A", colour="red")]}, 'node "A": unknown key "colour"'),
        ({"nodes": [node("A", agent="ghost")]}, 'node "A": agent must name a registered agent'),
        ({"nodes": [{"id": "A", "agent": "noop"}]}, 'node "A": prompt must be a string'),
        ({"nodes": [node("A", prompt=" \t\u00a0")]}, 'node "A": prompt must be'),
        ({"nodes": [node("A", gate="vote")]}, 'node "A": gate must be "approval"'),
        ({"nodes": [node("A", approval_timeout_secs=60)]}, 'node "A": approval_timeout_secs needs'),
        (
            {"nodes": [node("A", gate="approval", approval_timeout_secs=0)]},
            'node "A": approval_timeout_secs must be a positive integer',
        ),
        (
            {"nodes": [node("A", gate="approval", approval_timeout_secs="60")]},
            "approval_timeout_secs must be a positive integer",
        ),
        ({"nodes": [node("A")], "edges": {"from": "A"}}, "graph.edges: must be an array"),
        ({"nodes": [node("A")], "edges": ["A"]}, "each edge must be an object"),
        ({"nodes": [node("A"), node("B")], "edges": [{"from": "A", "to": "B", "w": 1}]}, '"w"'),
        (graph([node("A")], [("A", "Z")]), "edge A→Z: to must name a node"),
        (graph([node("A")], [("Z", "A")]), "edge Z→A: from must name a node"),
        (graph([node("A")], [("A", "A")]), "edge A→A: a node cannot be its own upstream"),
        (graph([node("A"), node("B")], [("A", "B"), ("A", "B")]), "edge A→B appears twice"),
        (
            graph([node(n) for n in "ABCDE"], [("A", "B"), ("B", "C"), ("C", "D"), ("D", "B")]),
            "must not form a cycle; these nodes form one: B, C, D",
        ),
    ],
)
def test_a_bad_graph_is_refused_naming_the_culprit(
    conn: psycopg.Connection, bad: Any, named: str
) -> None:
    assert named in _refused(conn, bad)


def test_a_long_prompt_is_refused_showing_only_its_start(conn: psycopg.Connection) -> None:
    message = _refused(conn, {"nodes": [node("A", prompt="p" * 100_001)]})
    assert "topology_runs.graph.nodes[A].prompt: must be at most 100000 characters" in message
    assert len(message) < 1000


def test_graph_size_is_bounded(conn: psycopg.Connection) -> None:
    many = [node(f"n{i}") for i in range(201)]
    assert "at most 200 nodes, this graph has 201" in _refused(conn, {"nodes": many})
    edges = [(f"n{a}", f"n{b}") for a in range(100) for b in range(a + 1, 100)][:2001]
    assert "at most 2000 edges, this graph has 2001" in _refused(conn, graph(many[:100], edges))


def test_the_largest_graph_allowed_is_accepted(conn: psycopg.Connection) -> None:
    ids = [f"n{i}" for i in range(200)]
    edges = [(ids[a], ids[b]) for a in range(200) for b in range(a + 1, 200)][:2000]
    run = start_run(conn, graph([node(i) for i in ids], edges))
    assert run_row(conn, run)["status"] == "running"


def test_a_long_cycle_is_named_by_its_first_nodes_and_its_size(conn: psycopg.Connection) -> None:
    ids = [f"n{i}" for i in range(50)]
    ring = [(ids[i], ids[(i + 1) % 50]) for i in range(50)]
    message = _refused(conn, graph([node(i) for i in ids], ring))
    assert "these nodes form one: n0, n1, n2" in message and "(50 nodes)" in message
    assert "n49" not in message


def test_loops_are_validated_on_insert_and_on_graph_update(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error, match=r"loops\.graph\.nodes: node \"A\": agent must name"):
        _loop(conn, {"nodes": [node("A", agent="ghost")]})
    loop = _loop(conn, diamond())
    with pytest.raises(psycopg.Error, match=r"loops\.graph\.edges: must not form a cycle"):
        conn.execute(
            "update ceaseless.loops set graph = %s where id = %s",
            (json.dumps(graph([node("A"), node("B")], [("A", "B"), ("B", "A")])), loop),
        )


def test_a_runs_graph_cannot_change(conn: psycopg.Connection) -> None:
    run = start_run(conn, diamond())
    with pytest.raises(psycopg.Error, match="keeps the graph it was created with") as error:
        conn.execute(
            "update ceaseless.topology_runs set graph = %s where id = %s",
            (json.dumps(graph([node("A")])), run),
        )
    assert error.value.sqlstate == "CE422"


def test_a_run_is_inserted_pending_or_skipped_only(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error, match="inserted pending") as error:
        start_run(conn, diamond(), status="succeeded", finished_at="now")
    assert error.value.sqlstate == "CE422"
    with pytest.raises(psycopg.Error, match="the engine's to set"):
        start_run(conn, diamond(), final_message="made up")


def test_a_skipped_run_is_recorded_without_starting(conn: psycopg.Connection) -> None:
    run = start_run(
        conn, diamond(), status="skipped", skip_reason="live_iteration", finished_at="now"
    )
    assert run_row(conn, run)["status"] == "skipped"
    assert _count(conn, "topology_nodes") == 0 and _count(conn, "job") == 0
