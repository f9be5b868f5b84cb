"""Every way a job stops without a verdict ends it the one way (_end_jobs): the job and its open
run together, with who ended it and why; and disabling an agent has one rule for every kind of
pending job."""

from __future__ import annotations

from uuid import UUID

import psycopg
from psycopg.rows import dict_row

from tests.e2e.support import ROOT
from tests.factories import claim_started, job_state, make_agent, make_job, make_routine, run_of
from tests.sql.topology import graph, job_of, node, run_row, start_run


def open_run(conn: psycopg.Connection, job_id: UUID) -> dict[str, object]:
    row = (
        conn.cursor(row_factory=dict_row)
        .execute(
            "select outcome, ended_by, error, finished_at is not null as finished "
            "from ceaseless.agent_run where job_id = %s order by started_at desc limit 1",
            (job_id,),
        )
        .fetchone()
    )
    assert row is not None
    return row


def test_cancel_release_and_topology_cancellation_each_finish_the_open_run_with_who_ended_it(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, max_concurrent=10)
    cancelled, released = make_job(conn), make_job(conn)
    topology = start_run(conn, graph([node("A")]))
    node_job = job_of(conn, topology, "A")
    runs = claim_started(conn, "w1")
    assert set(runs) == {cancelled, released, node_job}

    conn.execute("select ceaseless.cancel_job(%s)", (cancelled,))
    assert conn.execute("select ceaseless.release_jobs('w1', %s)", ([released],)).fetchone() == (1,)
    conn.execute("select ceaseless.cancel_topology_run(%s)", (topology,))

    assert open_run(conn, cancelled) == {
        "outcome": "cancelled",
        "ended_by": "cancel",
        "error": f"cancelled by {conn.info.user}",
        "finished": True,
    }
    assert open_run(conn, released) == {
        "outcome": "cancelled",
        "ended_by": "release",
        "error": "released: listener w1 shut down before the agent finished",
        "finished": True,
    }
    assert open_run(conn, node_job)["ended_by"] == "cancel"
    assert [job_state(conn, j) for j in (cancelled, released, node_job)] == [
        "cancelled",
        "pending",
        "cancelled",
    ]
    # Released: unclaimed, its attempt given back, due now.
    row = conn.execute(
        "select attempts, claimed_by, finished_at, run_after <= now() from ceaseless.job "
        "where id = %s",
        (released,),
    ).fetchone()
    assert row == (0, None, None, True)


def test_a_listener_releasing_a_job_another_took_over_leaves_it_alone(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    job = make_job(conn)
    claim_started(conn, "w1")
    # w1's lease ran out and w2 took the job over.
    conn.execute(
        "update ceaseless.job set claim_expires_at = now() - interval '1 second' where id = %s",
        (job,),
    )
    conn.execute("select ceaseless.expire_leases()")
    assert list(claim_started(conn, "w2")) == [job]

    assert conn.execute("select ceaseless.release_jobs('w1', %s)", ([job],)).fetchone() == (0,)
    assert conn.execute(
        "select state, claimed_by from ceaseless.job where id = %s", (job,)
    ).fetchone() == ("running", "w2")


def test_disabling_an_agent_ends_the_jobs_that_hold_a_run_and_the_rest_wait_for_it(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, "a", max_concurrent=10)
    routine = make_routine(conn, agent="a")
    (fired,) = conn.execute("select ceaseless.run_routine(%s)", (routine,)).fetchone()
    routine_job = run_of(conn, fired)["job_id"]
    topology = start_run(conn, graph([node("A", agent="a")]))
    node_job = job_of(conn, topology, "A")
    plain = make_job(conn, "a")
    forge = make_job(conn, "a", kind="plan", forge="github", owner="acme", repo="widgets", number=7)
    running = make_job(conn, "a")
    conn.execute(
        "update ceaseless.job set run_after = now() + interval '1 hour' "
        "where id <> %s and agent = 'a'",
        (running,),
    )
    claim_started(conn, "w1")

    conn.execute("update ceaseless.agents set enabled = false where name = 'a'")

    assert {j: job_state(conn, j) for j in (routine_job, node_job, plain, forge, running)} == {
        routine_job: "cancelled",
        node_job: "cancelled",
        plain: "pending",
        forge: "pending",
        running: "running",
    }
    assert run_of(conn, fired)["status"] == "failed"
    assert "agent a was disabled" in run_of(conn, fired)["result_summary"]
    assert "agent a was disabled" in run_row(conn, topology)["error"]

    # Enabled again, the jobs that waited are claimed.
    conn.execute("update ceaseless.agents set enabled = true where name = 'a'")
    conn.execute("update ceaseless.job set run_after = now() where state = 'pending'")
    assert set(claim_started(conn, "w1")) == {plain, forge}


def test_the_docs_example_disables_a_lane_and_enables_it_again(conn: psycopg.Connection) -> None:
    """docs/agents.md, "Disabling an agent", run as written."""
    text = (ROOT / "docs" / "agents.md").read_text()
    example = text.split("## Disabling an agent", 1)[1].split("```sql\n", 1)[1].split("```")[0]
    disabling, listing, enabling = (part for part in example.split(";") if part.strip())
    make_agent(conn, "claude", max_concurrent=10)
    routine = make_routine(conn, agent="claude")
    conn.execute("select ceaseless.run_routine(%s)", (routine,))
    make_job(conn, "claude", prompt="a plain job")

    conn.execute(disabling)  # type: ignore[call-overload]
    rows = conn.execute(listing).fetchall()  # type: ignore[call-overload]
    assert [(kind, state) for kind, state, _ in rows] == [
        ("routine", "cancelled"),
        ("task", "pending"),
    ]
    assert rows[0][2] == "agent claude was disabled"
    conn.execute(enabling)  # type: ignore[call-overload]
    assert len(claim_started(conn, "w1")) == 1
