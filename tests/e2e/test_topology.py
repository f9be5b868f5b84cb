"""Topology runs end to end: INSERT a run, node jobs, real listeners and agents, final message."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from uuid import UUID

import psycopg

from tests.e2e.support import FAKES, ListenerProcess, pid_alive, wait_until
from tests.factories import make_agent
from tests.sql.topology import diamond, graph, node, nodes, run_row, start_run

# Reads its prompt, and answers with the prompt's first line (the node's own
# prompt, "do <node>") and " done"; the sleep keeps siblings' runs long
# enough to be seen overlapping.
_FIRST_LINE = 'read first; cat > /dev/null; sleep {sleep}; printf "%s done" "$first"'


def _first_line_agent(conn: psycopg.Connection, sleep: float = 0) -> str:
    return make_agent(
        conn,
        "noop",
        "command",
        ["sh", "-c", _FIRST_LINE.format(sleep=sleep)],
        max_concurrent=50,
    )


def _wait_run(conn: psycopg.Connection, run: UUID, timeout: float = 30) -> dict:
    def ended() -> bool:
        return run_row(conn, run)["status"] in ("succeeded", "failed", "cancelled")

    wait_until(ended, timeout, lambda: f"the run never ended: {nodes(conn, run)}")
    return run_row(conn, run)


def _agent_runs(conn: psycopg.Connection, run: UUID) -> dict[str, list[tuple]]:
    """Each node's agent runs: (started_at, finished_at, outcome)."""
    rows = conn.execute(
        "select j.payload ->> 'node_id', r.started_at, r.finished_at, r.outcome "
        "from ceaseless.job j join ceaseless.agent_run r on r.job_id = j.id "
        "where j.topology_run_id = %s order by r.started_at",
        (run,),
    ).fetchall()
    out: dict[str, list[tuple]] = {}
    for name, started, finished, outcome in rows:
        out.setdefault(name, []).append((started, finished, outcome))
    return out


def test_a_diamond_runs_b_and_c_in_parallel_and_d_after_both(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    _first_line_agent(conn, sleep=1)
    start_listener("--poll-interval", "60")
    run = start_run(conn, diamond(), task="build the thing")
    row = _wait_run(conn, run)
    assert row["status"] == "succeeded", row["error"]
    runs = _agent_runs(conn, run)
    assert {n: len(r) for n, r in runs.items()} == {"A": 1, "B": 1, "C": 1, "D": 1}
    (a,), (b,), (c,), (d,) = runs["A"], runs["B"], runs["C"], runs["D"]
    # B and C after A, overlapping each other; D after both.
    assert b[0] >= a[1] and c[0] >= a[1]
    assert b[0] < c[1] and c[0] < b[1]
    assert d[0] >= max(b[1], c[1])
    prompt = conn.execute(
        "select prompt from ceaseless.job where topology_run_id = %s "
        "and payload ->> 'node_id' = 'D'",
        (run,),
    ).fetchone()
    assert prompt is not None
    assert "## Task\n\nbuild the thing" in prompt[0]
    assert "## Output of B\n\ndo B done" in prompt[0]
    assert "## Output of C\n\ndo C done" in prompt[0]
    assert row["final_message"] == "do D done"


def test_fifty_nodes_with_two_listeners_run_each_node_exactly_once(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    _first_line_agent(conn)
    middle = [f"m{i}" for i in range(48)]
    g = graph(
        [node("root"), *(node(m) for m in middle), node("sink")],
        [("root", m) for m in middle] + [(m, "sink") for m in middle],
    )
    start_listener("--poll-interval", "60", "--concurrency", "8")
    start_listener("--poll-interval", "60", "--concurrency", "8")
    run = start_run(conn, g)
    row = _wait_run(conn, run, timeout=120)
    assert row["status"] == "succeeded", row["error"]
    assert row["final_message"] == "do sink done"
    runs = _agent_runs(conn, run)
    assert len(runs) == 50
    assert all(len(r) == 1 and r[0][2] == "succeeded" for r in runs.values())
    jobs = conn.execute(
        "select count(*), count(distinct payload ->> 'node_id'), "
        "count(distinct claimed_by) from ceaseless.job where topology_run_id = %s",
        (run,),
    ).fetchone()
    assert jobs is not None and jobs[:2] == (50, 50)
    assert jobs[2] == 2, "both listeners should have taken part"
    sink_prompt = conn.execute(
        "select prompt from ceaseless.job where payload ->> 'node_id' = 'sink'"
    ).fetchone()
    assert sink_prompt is not None
    assert all(f"## Output of {m}\n\ndo {m} done" in sink_prompt[0] for m in middle)


def _approval_of(conn: psycopg.Connection, run: UUID, node_id: str) -> UUID:
    wait_until(
        lambda: run_row(conn, run)["status"] == "awaiting_approval",
        30,
        lambda: f"the run never awaited approval: {nodes(conn, run)}",
    )
    row = conn.execute(
        "select id from ceaseless.approvals where topology_run_id = %s and node_id = %s",
        (run, node_id),
    ).fetchone()
    assert row is not None
    return row[0]


def test_a_gated_node_waits_until_approved(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    _first_line_agent(conn)
    start_listener("--poll-interval", "60")
    run = start_run(conn, diamond(D={"gate": "approval"}))
    approval = _approval_of(conn, run, "D")
    time.sleep(0.5)
    assert run_row(conn, run)["status"] == "awaiting_approval"
    assert nodes(conn, run)["D"]["job_id"] is None
    conn.execute("select ceaseless.decide_approval(%s, true, 'carol', 'go')", (approval,))
    row = _wait_run(conn, run)
    assert row["status"] == "succeeded" and row["final_message"] == "do D done"


def test_a_rejected_gate_fails_the_run(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    _first_line_agent(conn)
    start_listener("--poll-interval", "60")
    run = start_run(conn, diamond(D={"gate": "approval"}))
    approval = _approval_of(conn, run, "D")
    conn.execute("select ceaseless.decide_approval(%s, false, 'carol', 'no')", (approval,))
    row = _wait_run(conn, run)
    assert row["status"] == "failed"
    assert row["error"] == "node D failed: approval rejected by carol: no"


def test_an_expired_gate_fails_the_run_on_the_listeners_tick(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    _first_line_agent(conn)
    listener = start_listener("--poll-interval", "60")
    run = start_run(
        conn, graph([node("A"), node("B", gate="approval", approval_timeout_secs=1)], [("A", "B")])
    )
    _approval_of(conn, run, "B")
    row = _wait_run(conn, run, timeout=30)
    assert row["status"] == "failed" and "expired undecided" in row["error"]
    listener.wait_for_event("approval.expired")


def test_an_expired_gate_that_skips_lets_the_rest_run_and_the_run_succeed(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    _first_line_agent(conn)
    listener = start_listener("--poll-interval", "60")
    run = start_run(
        conn,
        graph(
            [node("A"), node("B", gate="approval", approval_timeout_secs=1, on_expiry="skip"),
             node("C")],
            [("A", "B"), ("B", "C")],
        ),
    )  # fmt: skip
    _approval_of(conn, run, "B")
    row = _wait_run(conn, run, timeout=30)
    assert row["status"] == "succeeded", row
    assert {n: v["state"] for n, v in nodes(conn, run).items()} == {
        "A": "succeeded",
        "B": "skipped",
        "C": "succeeded",
    }
    (prompt,) = conn.execute(
        "select prompt from ceaseless.job where topology_run_id = %s "
        "and payload ->> 'node_id' = 'C'",
        (run,),
    ).fetchone()  # type: ignore[misc]
    assert "## Output of B\n\n(skipped: its approval expired)" in prompt
    assert row["final_message"] == nodes(conn, run)["C"]["output_preview"]
    listener.wait_for_event("approval.expired")


def test_cancelling_a_run_stops_its_running_agent(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess], tmp_path: Path
) -> None:
    pid_file = tmp_path / "agent.pids"
    make_agent(
        conn,
        "sleeper",
        "command",
        [str(FAKES / "fake_agent")],
        env={"FAKE_AGENT_MODE": "sleep", "FAKE_AGENT_PID_FILE": str(pid_file)},
    )
    start_listener("--poll-interval", "60")
    run = start_run(
        conn, graph([node("A", agent="sleeper"), node("B", agent="sleeper")], [("A", "B")])
    )
    wait_until(pid_file.exists, 15, "the agent never started")
    agent_pid = int(pid_file.read_text().split()[0])
    conn.execute("select ceaseless.cancel_topology_run(%s)", (run,))
    wait_until(lambda: not pid_alive(agent_pid), 10, "the cancelled run's agent kept running")
    assert run_row(conn, run)["status"] == "cancelled"
    assert {n: r["state"] for n, r in nodes(conn, run).items()} == {
        "A": "cancelled",
        "B": "cancelled",
    }
    outcome = conn.execute(
        "select r.outcome from ceaseless.agent_run r join ceaseless.job j on j.id = r.job_id "
        "where j.topology_run_id = %s",
        (run,),
    ).fetchall()
    assert outcome == [("cancelled",)]
