"""Topology runs: start, fan-out and fan-in by job triggers, final message, failure, cancel."""

from __future__ import annotations

import json
import threading
from uuid import UUID

import psycopg
import pytest

from tests.factories import finish, make_agent
from tests.sql.topology import (
    diamond,
    graph,
    job_of,
    node,
    nodes,
    run_node,
    run_row,
    start_job,
    start_run,
    states,
)


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn, max_attempts=2)


def _job(conn: psycopg.Connection, job_id: UUID) -> dict:
    cur = conn.execute("select * from ceaseless.job where id = %s", (job_id,))
    row = cur.fetchone()
    assert row is not None and cur.description is not None
    return {col.name: value for col, value in zip(cur.description, row, strict=True)}


def test_a_run_starts_its_sources_with_jobs_and_counts_upstreams(
    conn: psycopg.Connection,
) -> None:
    run = start_run(conn, diamond())
    view = nodes(conn, run)
    assert {n: r["upstream_left"] for n, r in view.items()} == {"A": 0, "B": 1, "C": 1, "D": 2}
    assert states(conn, run) == {"A": "queued", "B": "waiting", "C": "waiting", "D": "waiting"}
    row = run_row(conn, run)
    assert row["status"] == "running" and row["started_at"] is not None
    job = _job(conn, job_of(conn, run, "A"))
    assert job["kind"] == "loop_node" and job["topology_run_id"] == run
    assert job["payload"] == {"topology_run_id": str(run), "node_id": "A"}
    assert job["user_id"] == row["user_id"] and job["dedup_key"] == f"topology:{run}:A"
    assert job["prompt"] == "do A\n\n## Task\n\nthe task"


def test_a_node_follows_its_job_running_and_back_to_queued_on_a_retry(
    conn: psycopg.Connection,
) -> None:
    run = start_run(conn, diamond())
    agent_run = start_job(conn, job_of(conn, run, "A"))
    view = nodes(conn, run)["A"]
    assert view["state"] == "running" and view["started_at"] is not None
    assert finish(conn, agent_run, "failed", error="flaky") == "pending"
    assert states(conn, run)["A"] == "queued"
    assert run_row(conn, run)["status"] == "running"


def test_fan_in_starts_a_node_only_after_its_last_upstream(conn: psycopg.Connection) -> None:
    run = start_run(conn, diamond())
    run_node(conn, run, "A", message="alpha")
    assert states(conn, run) == {"A": "succeeded", "B": "queued", "C": "queued", "D": "waiting"}
    run_node(conn, run, "C", message="gamma")
    view = nodes(conn, run)
    assert view["D"]["state"] == "waiting" and view["D"]["upstream_left"] == 1
    run_node(conn, run, "B", message="beta")
    view = nodes(conn, run)
    assert view["D"]["state"] == "queued" and view["D"]["upstream_left"] == 0
    # B before C: graph order, whichever finished first.
    assert _job(conn, job_of(conn, run, "D"))["prompt"] == (
        "do D\n\n## Task\n\nthe task\n\n## Output of B\n\nbeta\n\n## Output of C\n\ngamma"
    )
    jobs = conn.execute(
        "select count(*) from ceaseless.job where topology_run_id = %s", (run,)
    ).fetchone()
    assert jobs == (4,)


def test_the_sink_output_is_the_runs_final_message(conn: psycopg.Connection) -> None:
    run = start_run(conn, diamond())
    for n in "ABCD":
        run_node(conn, run, n, message=f"out {n}")
    row = run_row(conn, run)
    assert row["status"] == "succeeded" and row["finished_at"] is not None
    assert row["final_message"] == "out D"
    view = nodes(conn, run)
    assert view["D"]["output_preview"] == "out D" and view["D"]["seconds"] is not None


def test_several_sinks_are_each_headed_in_graph_order(conn: psycopg.Connection) -> None:
    g = graph([node("root"), node("z"), node("y")], [("root", "z"), ("root", "y")])
    run = start_run(conn, g)
    run_node(conn, run, "root")
    run_node(conn, run, "y", message="why")
    assert run_row(conn, run)["status"] == "running"
    run_node(conn, run, "z", message="zed")
    assert run_row(conn, run)["final_message"] == "## z\n\nzed\n\n## y\n\nwhy"


def test_upstream_output_is_cut_to_the_setting_with_a_marker(conn: psycopg.Connection) -> None:
    conn.execute("update ceaseless.settings set value = '10' where key = 'topology_upstream_chars'")
    run = start_run(conn, graph([node("A"), node("B")], [("A", "B")]))
    run_node(conn, run, "A", message="0123456789abcdef")
    prompt = _job(conn, job_of(conn, run, "B"))["prompt"]
    assert prompt.endswith("## Output of A\n\n0123456789\n\n[… cut: 6 more characters not shown]")


def test_a_failed_node_fails_the_run_and_cancels_the_rest(conn: psycopg.Connection) -> None:
    run = start_run(conn, diamond())
    run_node(conn, run, "A")
    c_run = start_job(conn, job_of(conn, run, "C"))
    # B fails on both attempts (max_attempts 2): only then does the node fail.
    assert run_node(conn, run, "B", "failed", error="boom 1") == "pending"
    assert run_row(conn, run)["status"] == "running"
    assert run_node(conn, run, "B", "failed", error="boom 2") == "failed"
    row = run_row(conn, run)
    assert row["status"] == "failed" and row["finished_at"] is not None
    assert row["error"].startswith("node B failed: job ") and "boom 2" in row["error"]
    assert states(conn, run) == {
        "A": "succeeded",
        "B": "failed",
        "C": "cancelled",
        "D": "cancelled",
    }
    # C was running: its job is cancelled as cancel_job does, its agent run too.
    assert _job(conn, job_of(conn, run, "C"))["state"] == "cancelled"
    ended = conn.execute(
        "select outcome, ended_by from ceaseless.agent_run where id = %s", (c_run,)
    ).fetchone()
    assert ended == ("cancelled", "cancel")
    audit = conn.execute(
        "select count(*) from ceaseless.audit_log where entity = 'topology_node' "
        "and entity_id = %s and new_state = 'cancelled'",
        (run,),
    ).fetchone()
    assert audit == (2,)


def test_a_job_cancelled_by_an_operator_fails_its_node(conn: psycopg.Connection) -> None:
    run = start_run(conn, diamond())
    conn.execute("select ceaseless.cancel_job(%s)", (job_of(conn, run, "A"),))
    assert states(conn, run)["A"] == "failed"
    assert run_row(conn, run)["status"] == "failed"


def test_cancel_topology_run_cancels_nodes_and_live_jobs(conn: psycopg.Connection) -> None:
    run = start_run(conn, diamond())
    run_node(conn, run, "A")
    b_run = start_job(conn, job_of(conn, run, "B"))
    conn.execute("select ceaseless.cancel_topology_run(%s)", (run,))
    row = run_row(conn, run)
    assert row["status"] == "cancelled" and row["error"].startswith("cancelled by ")
    assert states(conn, run) == {
        "A": "succeeded",
        "B": "cancelled",
        "C": "cancelled",
        "D": "cancelled",
    }
    for n in "BC":
        assert _job(conn, job_of(conn, run, n))["state"] == "cancelled"
    assert conn.execute(
        "select outcome from ceaseless.agent_run where id = %s", (b_run,)
    ).fetchone() == ("cancelled",)
    with pytest.raises(psycopg.Error, match="is already cancelled") as error:
        conn.execute("select ceaseless.cancel_topology_run(%s)", (run,))
    assert error.value.sqlstate == "CE409"
    with pytest.raises(psycopg.Error) as error:
        conn.execute("select ceaseless.cancel_topology_run(gen_random_uuid())")
    assert error.value.sqlstate == "CE404"


def test_a_sibling_held_during_the_failure_is_swept_and_never_revives_the_run(
    conn: psycopg.Connection, db_url: str
) -> None:
    run = start_run(conn, diamond())
    run_node(conn, run, "A")
    b_run = start_job(conn, job_of(conn, run, "B"))
    c_job = job_of(conn, run, "C")
    with psycopg.connect(db_url) as other:
        # Another listener holds C's row (as finishing it would).
        other.execute("select 1 from ceaseless.job where id = %s for update", (c_job,))
        assert finish(conn, b_run, "cancelled") == "cancelled"
        assert run_row(conn, run)["status"] == "failed"
        assert _job(conn, c_job)["state"] == "pending"
        other.rollback()
    assert states(conn, run)["C"] == "cancelled"
    # C's job, left live, runs and succeeds: the run stays failed.
    run_c = start_job(conn, c_job)
    assert finish(conn, run_c, "succeeded", final_message="late") == "delivered"
    assert run_row(conn, run)["status"] == "failed"
    assert states(conn, run)["C"] == "cancelled"
    # Its job alone cannot be run again: only its run can (retry_topology_run).
    with pytest.raises(psycopg.Error) as refused:
        conn.execute("select ceaseless.retry_job(%s)", (c_job,))
    assert refused.value.sqlstate == "CE409" and "retry_topology_run" in str(
        refused.value.diag.message_hint
    )
    assert _job(conn, c_job)["state"] == "delivered"
    assert conn.execute("select ceaseless.cancel_orphaned_topology_jobs()").fetchone() == (0,)


def test_concurrent_finishes_of_siblings_start_the_fan_in_node_once(
    conn: psycopg.Connection, db_url: str
) -> None:
    run = start_run(conn, diamond())
    run_node(conn, run, "A")
    runs = {n: start_job(conn, job_of(conn, run, n)) for n in "BC"}
    assert _finish_together(db_url, {runs["B"]: "succeeded", runs["C"]: "succeeded"}) == []
    view = nodes(conn, run)
    assert view["D"]["state"] == "queued" and view["D"]["upstream_left"] == 0
    count = conn.execute(
        "select count(*) from ceaseless.job where payload ->> 'node_id' = 'D'"
    ).fetchone()
    assert count == (1,)


def _finish_together(db_url: str, outcomes: dict[UUID, str]) -> list[BaseException]:
    """Finish these agent runs at once, each from its own connection: the errors raised."""
    barrier = threading.Barrier(len(outcomes))
    errors: list[BaseException] = []

    def finish_one(agent_run: UUID, outcome: str) -> None:
        try:
            with psycopg.connect(db_url, autocommit=True) as c:
                barrier.wait()
                finish(c, agent_run, outcome, final_message="done")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=finish_one, args=item) for item in outcomes.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_concurrent_failure_and_success_of_siblings_do_not_deadlock(
    conn: psycopg.Connection, db_url: str
) -> None:
    for _ in range(5):
        run = start_run(conn, graph([node("A"), node("B"), node("C")]))
        runs = {n: start_job(conn, job_of(conn, run, n)) for n in "ABC"}
        outcomes = {runs["A"]: "cancelled", runs["B"]: "succeeded", runs["C"]: "cancelled"}
        assert _finish_together(db_url, outcomes) == []
        assert run_row(conn, run)["status"] == "failed"
        conn.execute("select ceaseless.cancel_orphaned_topology_jobs()")
        live = conn.execute(
            "select count(*) from ceaseless.job where topology_run_id = %s "
            "and state in ('pending', 'claimed', 'running')",
            (run,),
        ).fetchone()
        assert live == (0,)


def test_disabling_an_agent_fails_the_runs_waiting_for_it(conn: psycopg.Connection) -> None:
    make_agent(conn, "other")
    waiting = start_run(conn, diamond())
    later = start_run(conn, graph([node("A"), node("B", agent="other")], [("A", "B")]))
    conn.execute("update ceaseless.agents set enabled = false where name = 'other'")
    run_node(conn, later, "A")
    row = run_row(conn, later)
    assert row["status"] == "failed" and row["error"] == "node B failed: agent other is disabled"
    assert run_row(conn, waiting)["status"] == "running"
    conn.execute("update ceaseless.agents set enabled = false where name = 'noop'")
    row = run_row(conn, waiting)
    assert row["status"] == "failed" and "agent noop was disabled" in row["error"]
    assert states(conn, waiting) == {
        "A": "failed",
        "B": "cancelled",
        "C": "cancelled",
        "D": "cancelled",
    }


def test_subscribers_hear_every_run_and_node_transition_in_order(
    conn: psycopg.Connection, db_url: str
) -> None:
    with psycopg.connect(db_url, autocommit=True) as listening:
        listening.execute("listen ceaseless_run")
        run = start_run(conn, graph([node("A"), node("B")], [("A", "B")]))
        run_node(conn, run, "A")
        run_node(conn, run, "B", message="the end")
        heard = [
            json.loads(n.payload)
            for n in listening.notifies(timeout=1, stop_after=20)
            if json.loads(n.payload)["table"] in ("topology_runs", "topology_nodes")
        ]
    moves = [(h["table"], h.get("node"), h["status"]) for h in heard]
    assert moves == [
        ("topology_runs", None, "pending"),
        ("topology_runs", None, "running"),
        ("topology_nodes", "A", "queued"),
        ("topology_nodes", "A", "running"),
        ("topology_nodes", "A", "succeeded"),
        ("topology_nodes", "B", "queued"),
        ("topology_nodes", "B", "running"),
        ("topology_nodes", "B", "succeeded"),
        ("topology_runs", None, "succeeded"),
    ]
    assert all(h["id"] == str(run) for h in heard)


def test_a_plain_job_update_does_not_touch_topology_runs(conn: psycopg.Connection) -> None:
    run = start_run(conn, diamond())
    conn.execute(
        "insert into ceaseless.job (kind, agent, prompt, topology_run_id, payload) "
        "values ('loop_node', 'noop', 'forged', %s, %s)",
        (run, json.dumps({"topology_run_id": str(run), "node_id": "B"})),
    )
    conn.execute(
        "update ceaseless.job set state = 'cancelled', finished_at = now() where prompt = 'forged'"
    )
    assert run_row(conn, run)["status"] == "running"
    assert states(conn, run)["B"] == "waiting"
