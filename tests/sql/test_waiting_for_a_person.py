"""A blocked job of a routine or a loop waits for a person with its run, rather than ending it.

Its agent asked for a human, spent its ceiling or could not log in: the routine run stays
running and the topology node stays blocked, its run live, until a reply (reply_job), a raised
ceiling (raise_job_budget) or retry_job sends the job on in the same run, or cancel_job ends it.
The routine counts the run once, when it is done.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from uuid import UUID

import psycopg
import pytest

from tests.factories import claim_started, finish, make_agent, make_routine, run_of
from tests.sql.topology import diamond, job_of, run_node, start_run, states

SESSION = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
ASKING = 'Stuck.\n\n```ceaseless\n{"needs_human": "Which database?"}\n```'


def _run_status(conn: psycopg.Connection, run: UUID) -> str:
    row = conn.execute(
        "select status from ceaseless.topology_runs where id = %s", (run,)
    ).fetchone()
    assert row is not None
    return row[0]


def _job(conn: psycopg.Connection, job: UUID) -> dict[str, Any]:
    cur = conn.execute(
        "select state, reply, resume_session_id, routine_run_id from ceaseless.job where id = %s",
        (job,),
    )
    row = cur.fetchone()
    assert row is not None and cur.description is not None
    return {c.name: v for c, v in zip(cur.description, row, strict=True)}


def _ask(conn: psycopg.Connection, run: UUID, node: str) -> UUID:
    """Node `node`'s agent asks for a human: its job is blocked. The job's id."""
    job = job_of(conn, run, node)
    state = run_node(conn, run, node, message=ASKING, session_id=SESSION)
    assert state == "blocked"
    return job


# -- loop nodes ---------------------------------------------------------------------------------


def test_a_node_that_asks_for_a_human_waits_blocked_and_its_run_stays_live(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    run = start_run(conn, diamond())
    _ask(conn, run, "A")
    assert states(conn, run) == {"A": "blocked", "B": "waiting", "C": "waiting", "D": "waiting"}
    assert _run_status(conn, run) == "running"


def test_a_reply_to_a_node_resumes_its_session_and_the_run_goes_on_to_success(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    run = start_run(conn, diamond())
    job = _ask(conn, run, "A")
    conn.execute("select ceaseless.reply_job(%s, 'The staging one.')", (job,))
    assert _job(conn, job)["state"] == "pending"
    assert states(conn, run)["A"] == "queued"

    claimed = conn.execute(
        "select id, prompt, resume_session_id, reply from ceaseless.claim_jobs('w1', 10)"
    ).fetchall()
    assert [(r[0], r[2], r[3]) for r in claimed] == [(job, SESSION, "The staging one.")]
    conn.execute(
        "update ceaseless.job set state = 'pending', claimed_by = null, "
        "claimed_at = null, claim_expires_at = null where id = %s",
        (job,),
    )
    for node in ("A", "B", "C", "D"):
        assert run_node(conn, run, node) == "delivered"
    assert _run_status(conn, run) == "succeeded"
    assert set(states(conn, run).values()) == {"succeeded"}


def test_a_raised_ceiling_sends_a_node_spent_out_on(conn: psycopg.Connection) -> None:
    make_agent(conn)
    run = start_run(conn, diamond(A={"max_cost_usd": 1}))
    job = job_of(conn, run, "A")
    assert run_node(conn, run, "A", message="half way", session_id=SESSION, cost_usd=1.5) == (
        "blocked"
    )
    assert states(conn, run)["A"] == "blocked"
    conn.execute("select ceaseless.raise_job_budget(%s, 5)", (job,))
    assert (_job(conn, job)["state"], states(conn, run)["A"]) == ("pending", "queued")
    assert run_node(conn, run, "A") == "delivered"
    assert states(conn, run)["A"] == "succeeded"


def test_cancelling_a_blocked_node_s_job_fails_its_run(conn: psycopg.Connection) -> None:
    make_agent(conn)
    run = start_run(conn, diamond())
    job = _ask(conn, run, "A")
    conn.execute("select ceaseless.cancel_job(%s)", (job,))
    assert _job(conn, job)["state"] == "cancelled"
    assert _run_status(conn, run) == "failed"
    assert states(conn, run)["A"] == "failed"


def test_cancelling_the_run_cancels_the_job_waiting_for_a_person(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    run = start_run(conn, diamond())
    job = _ask(conn, run, "A")
    conn.execute("select ceaseless.cancel_topology_run(%s)", (run,))
    assert _run_status(conn, run) == "cancelled"
    assert states(conn, run)["A"] == "cancelled"
    assert _job(conn, job)["state"] == "cancelled"
    # Nothing is left to answer: a reply now says so.
    with pytest.raises(psycopg.Error, match="is cancelled") as refused:
        conn.execute("select ceaseless.reply_job(%s, 'too late')", (job,))
    assert refused.value.sqlstate == "CE409"


# -- routines -----------------------------------------------------------------------------------


def _fired(conn: psycopg.Connection, routine: UUID) -> tuple[UUID, UUID]:
    row = conn.execute("select ceaseless.run_routine(%s)", (routine,)).fetchone()
    assert row is not None
    run = row[0]
    return run, run_of(conn, run)["job_id"]


def _routine(conn: psycopg.Connection, routine: UUID) -> tuple[int, int]:
    row = conn.execute(
        "select run_count, consecutive_failures from ceaseless.routines where id = %s",
        (routine,),
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def _blocked_routine_run(conn: psycopg.Connection, **columns: Any) -> tuple[UUID, UUID, UUID]:
    make_agent(conn, max_concurrent=10)
    routine = make_routine(conn, notify_on_failure=True, **columns)
    run, job = _fired(conn, routine)
    agent_run = claim_started(conn)[job]
    assert finish(conn, agent_run, "succeeded", final_message=ASKING, session_id=SESSION) == (
        "blocked"
    )
    return routine, run, job


def test_a_routine_run_waits_while_its_job_asks_and_closes_once_when_answered(
    conn: psycopg.Connection,
) -> None:
    routine, run, job = _blocked_routine_run(conn)
    assert run_of(conn, run)["status"] == "running"
    assert _routine(conn, routine) == (0, 0)
    # The job's question is told; the routine tells no failure.
    assert conn.execute(
        "select source_table, kind from ceaseless.notifications order by created_at"
    ).fetchall() == [("job", "attention")]

    conn.execute("select ceaseless.reply_job(%s, 'The staging one.')", (job,))
    assert (_job(conn, job)["state"], _job(conn, job)["routine_run_id"]) == ("pending", run)
    agent_run = claim_started(conn)[job]
    assert finish(conn, agent_run, "succeeded", final_message="ROUTINE_OK") == "delivered"
    assert run_of(conn, run)["status"] == "ok"
    assert _routine(conn, routine) == (1, 0)
    assert conn.execute("select count(*) from ceaseless.routine_runs").fetchone() == (1,)


def test_a_blocked_routine_run_holds_its_place_under_max_concurrent(
    conn: psycopg.Connection,
) -> None:
    routine, _, _ = _blocked_routine_run(conn, max_concurrent=1)
    second = conn.execute("select ceaseless.run_routine(%s)", (routine,)).fetchone()
    assert second is not None
    assert (run_of(conn, second[0])["status"], run_of(conn, second[0])["skip_reason"]) == (
        "skipped",
        "concurrency",
    )


def test_cancelling_a_routine_s_blocked_job_closes_its_run_as_failed(
    conn: psycopg.Connection,
) -> None:
    routine, run, job = _blocked_routine_run(conn)
    conn.execute("select ceaseless.cancel_job(%s)", (job,))
    closed = run_of(conn, run)
    assert closed["status"] == "failed"
    assert closed["result_summary"].startswith("job cancelled: cancelled by ")
    assert _routine(conn, routine) == (1, 1)


def test_retrying_a_routine_s_blocked_job_goes_on_in_its_open_run(
    conn: psycopg.Connection,
) -> None:
    routine, run, job = _blocked_routine_run(conn)
    conn.execute("select ceaseless.retry_job(%s)", (job,))
    assert (_job(conn, job)["state"], _job(conn, job)["routine_run_id"]) == ("pending", run)
    assert conn.execute("select count(*) from ceaseless.routine_runs").fetchone() == (1,)
    agent_run = claim_started(conn)[job]
    assert finish(conn, agent_run, "succeeded", final_message="ROUTINE_OK") == "delivered"
    assert run_of(conn, run)["status"] == "ok"
    assert _routine(conn, routine) == (1, 0)


def test_a_finished_job_still_cannot_be_cancelled(conn: psycopg.Connection) -> None:
    _, _, job = _blocked_routine_run(conn)
    conn.execute("select ceaseless.cancel_job(%s)", (job,))
    with pytest.raises(psycopg.Error, match="already cancelled") as refused:
        conn.execute("select ceaseless.cancel_job(%s)", (job,))
    assert refused.value.sqlstate == "CE409"


def test_explain_job_of_a_blocked_node_names_the_reply_not_the_run_s_retry(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    run = start_run(conn, diamond())
    job = _ask(conn, run, "A")
    (detail,) = conn.execute("select detail from ceaseless.explain_job(%s)", (job,)).fetchone()  # type: ignore[misc]
    assert f"reply_job('{job}', '…')" in detail
    assert "retry_topology_run" not in detail


def test_a_user_replies_to_her_own_loop_node_and_no_one_else_s(
    conn: psycopg.Connection, login_role: Callable[..., psycopg.Connection]
) -> None:
    make_agent(conn)
    conn.commit()
    alice, bob = login_role("alice"), login_role("bob")
    run = alice.execute(
        "insert into ceaseless.topology_runs (graph, task) values (%s, 'the task') returning id",
        (json.dumps(diamond()),),
    ).fetchone()[0]  # type: ignore[index]
    job = _ask(conn, run, "A")
    conn.commit()
    with pytest.raises(psycopg.Error) as refused:
        bob.execute("select ceaseless.reply_job(%s, 'from bob')", (job,))
    assert refused.value.sqlstate == "CE404"
    alice.execute("select ceaseless.reply_job(%s, 'The staging one.')", (job,))
    assert alice.execute(
        "select state from ceaseless.topology_nodes where job_id = %s", (job,)
    ).fetchone() == ("queued",)


def test_a_reply_that_loses_to_the_run_s_cancel_is_refused_and_the_sweep_ends_its_job(
    conn: psycopg.Connection, db_url: str
) -> None:
    make_agent(conn)
    run = start_run(conn, diamond())
    job = _ask(conn, run, "A")
    conn.commit()
    with psycopg.connect(db_url) as replier:
        # The reply has taken the job when the run is cancelled: the cancel
        # does not wait for it (SKIP LOCKED) and ends the run without it.
        replier.execute("select from ceaseless.job where id = %s for update", (job,))
        with psycopg.connect(db_url, autocommit=True) as canceller:
            canceller.execute("select ceaseless.cancel_topology_run(%s)", (run,))
        with pytest.raises(psycopg.Error, match="which is cancelled") as refused:
            replier.execute("select ceaseless.reply_job(%s, 'too late')", (job,))
        assert refused.value.sqlstate == "CE409"
    assert _job(conn, job)["state"] == "blocked"
    assert conn.execute("select ceaseless.cancel_orphaned_topology_jobs()").fetchone() == (1,)
    assert _job(conn, job)["state"] == "cancelled"
