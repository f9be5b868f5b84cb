"""retry_topology_run: a failed or cancelled run runs again from where it stopped, and a node's
job never runs again on its own."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from uuid import UUID

import psycopg
import pytest

from tests.factories import finish, make_agent
from tests.sql.loops import fail, iterations, loop_row, make_loop, run_loop, succeed
from tests.sql.topology import (
    diamond,
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
    make_agent(conn, max_attempts=1)


def _job_state(conn: psycopg.Connection, job: UUID) -> tuple:
    row = conn.execute(
        "select state, attempts, finished_at is null from ceaseless.job where id = %s", (job,)
    ).fetchone()
    assert row is not None
    return row


def _failed_diamond(conn: psycopg.Connection) -> UUID:
    """A → B, C → D with A succeeded, B failed for good, C cancelled with it, D never started."""
    run = start_run(conn, diamond())
    run_node(conn, run, "A", message="alpha")
    assert run_node(conn, run, "B", "failed", error="flaky") == "failed"
    assert run_row(conn, run)["status"] == "failed"
    assert states(conn, run) == {
        "A": "succeeded",
        "B": "failed",
        "C": "cancelled",
        "D": "cancelled",
    }
    return run


def test_a_failed_run_runs_again_from_its_failed_nodes_and_succeeds(
    conn: psycopg.Connection,
) -> None:
    run = _failed_diamond(conn)
    a_job, b_job, c_job = (job_of(conn, run, n) for n in "ABC")

    conn.execute("select ceaseless.retry_topology_run(%s)", (run,))

    row = run_row(conn, run)
    assert (row["status"], row["error"], row["finished_at"]) == ("running", None, None)
    view = nodes(conn, run)
    assert {n: v["state"] for n, v in view.items()} == {
        "A": "succeeded",
        "B": "queued",
        "C": "queued",
        "D": "waiting",
    }
    assert view["D"]["upstream_left"] == 2
    # The same jobs, pending again with their attempts given back; A is kept.
    assert _job_state(conn, b_job) == ("pending", 0, True)
    assert _job_state(conn, c_job) == ("pending", 0, True)
    assert _job_state(conn, a_job)[0] == "delivered"
    assert conn.execute(
        "select count(*) from ceaseless.job where topology_run_id = %s", (run,)
    ).fetchone() == (3,)

    run_node(conn, run, "B", message="beta")
    run_node(conn, run, "C", message="gamma")
    run_node(conn, run, "D", message="delta")
    row = run_row(conn, run)
    assert (row["status"], row["final_message"]) == ("succeeded", "delta")


def test_a_cancelled_run_runs_again_and_a_live_sibling_is_followed(
    conn: psycopg.Connection, db_url: str
) -> None:
    run = start_run(conn, diamond())
    run_node(conn, run, "A")
    c_job = job_of(conn, run, "C")
    c_run = start_job(conn, c_job)
    with psycopg.connect(db_url) as other:
        # A listener holds C's row as the run is cancelled: C stays running.
        other.execute("select 1 from ceaseless.job where id = %s for update", (c_job,))
        conn.execute("select ceaseless.cancel_topology_run(%s)", (run,))
        other.rollback()
    assert _job_state(conn, c_job)[0] == "running"
    assert states(conn, run)["C"] == "cancelled"

    conn.execute("select ceaseless.retry_topology_run(%s)", (run,))
    assert states(conn, run) == {"A": "succeeded", "B": "queued", "C": "running", "D": "waiting"}
    # C's live job finishing moves its node again, and the sweep leaves it alone.
    assert conn.execute("select ceaseless.cancel_orphaned_topology_jobs()").fetchone() == (0,)
    assert finish(conn, c_run, "succeeded", final_message="gamma") == "delivered"
    assert states(conn, run)["C"] == "succeeded"


def test_only_a_failed_or_cancelled_run_can_be_retried(conn: psycopg.Connection) -> None:
    run = start_run(conn, diamond())
    with pytest.raises(psycopg.Error) as live:
        conn.execute("select ceaseless.retry_topology_run(%s)", (run,))
    assert live.value.sqlstate == "CE409"
    assert f"run {run} is running; only a failed or cancelled run" in str(live.value)
    with pytest.raises(psycopg.Error) as unknown:
        conn.execute("select ceaseless.retry_topology_run(gen_random_uuid())")
    assert unknown.value.sqlstate == "CE404"


def test_a_node_whose_agent_is_disabled_is_refused_before_anything_moves(
    conn: psycopg.Connection,
) -> None:
    run = _failed_diamond(conn)
    conn.execute("update ceaseless.agents set enabled = false where name = 'noop'")
    with pytest.raises(psycopg.Error) as error:
        conn.execute("select ceaseless.retry_topology_run(%s)", (run,))
    assert error.value.sqlstate == "CE410"
    assert "runs on agent noop, which is disabled" in str(error.value)
    assert run_row(conn, run)["status"] == "failed"


def test_retry_job_on_a_node_of_an_ended_run_is_refused_naming_retry_topology_run(
    conn: psycopg.Connection,
) -> None:
    run = _failed_diamond(conn)
    b_job = job_of(conn, run, "B")
    with pytest.raises(psycopg.Error) as error:
        conn.execute("select ceaseless.retry_job(%s)", (b_job,))
    assert error.value.sqlstate == "CE409"
    assert f"node B of topology run {run}, which is failed" in str(error.value)
    assert error.value.diag.message_hint == (
        f"Run its failed and cancelled nodes again: select ceaseless.retry_topology_run('{run}');"
    )
    # Nothing half-done: the job stays failed, the run failed.
    assert _job_state(conn, b_job)[0] == "failed"
    assert run_row(conn, run)["status"] == "failed"


def test_a_gated_node_asks_for_approval_again(conn: psycopg.Connection) -> None:
    run = start_run(conn, diamond(B={"gate": "approval"}))
    run_node(conn, run, "A")
    (approval,) = conn.execute(
        "select id from ceaseless.approvals where topology_run_id = %s", (run,)
    ).fetchone() or (None,)
    conn.execute("select ceaseless.decide_approval(%s, false, 'ann', 'no')", (approval,))
    assert run_row(conn, run)["status"] == "failed"

    conn.execute("select ceaseless.retry_topology_run(%s)", (run,))
    assert states(conn, run)["B"] == "awaiting_approval"
    assert conn.execute(
        "select id, decision from ceaseless.approvals where topology_run_id = %s", (run,)
    ).fetchall() == [(approval, None)]
    conn.execute("select ceaseless.decide_approval(%s, true, 'ann', 'ok now')", (approval,))
    assert states(conn, run)["B"] == "queued"


def test_alice_retries_her_run_and_bob_gets_not_found(
    conn: psycopg.Connection, login_role: Callable[..., psycopg.Connection]
) -> None:
    alice = login_role("alice")
    bob = login_role("bob")
    alice_name = alice.execute("select current_user").fetchone()
    assert alice_name is not None
    run = start_run(conn, diamond(), user_id=alice_name[0])
    run_node(conn, run, "A")
    run_node(conn, run, "B", "failed")
    assert run_row(conn, run)["status"] == "failed"

    with pytest.raises(psycopg.Error) as error:
        bob.execute("select ceaseless.retry_topology_run(%s)", (run,))
    assert error.value.sqlstate == "CE404"
    assert run_row(conn, run)["status"] == "failed"

    alice.execute("select ceaseless.retry_topology_run(%s)", (run,))
    assert alice.execute(
        "select status from ceaseless.topology_runs where id = %s", (run,)
    ).fetchone() == ("running",)


def test_a_retried_iteration_reopens_its_loop_and_keeps_the_policy_count(
    conn: psycopg.Connection,
) -> None:
    # iters {n: 2}, chained on completion: iteration 2 fails and stops the loop.
    loop = make_loop(
        conn, triggers={"on_completion": True}, policy={"kind": "iters", "spec": {"n": 2}}
    )
    first = run_loop(conn, loop)
    succeed(conn, first)
    second = iterations(conn, loop)[-1]["id"]
    fail(conn, second)
    stopped = loop_row(conn, loop)
    assert (stopped["enabled"], stopped["stopped_reason"]) == (False, "failed")

    conn.execute("select ceaseless.retry_topology_run(%s)", (second,))
    reopened = loop_row(conn, loop)
    assert (reopened["enabled"], reopened["stopped_reason"], reopened["stopped_at"]) == (
        True,
        None,
        None,
    )
    assert reopened["policy_from_iteration"] == stopped["policy_from_iteration"]
    # Re-enabling fired nothing: the retried iteration is the loop's one live one.
    assert [(r["iteration"], r["status"]) for r in iterations(conn, loop)] == [
        (1, "succeeded"),
        (2, "running"),
    ]

    # Its success is judged as iteration 2's: the policy is met, no third fires.
    succeed(conn, second)
    done = loop_row(conn, loop)
    assert (done["enabled"], done["stopped_reason"]) == (False, "completed")
    assert len(iterations(conn, loop)) == 2


def test_an_iteration_other_than_the_latest_is_refused(conn: psycopg.Connection) -> None:
    loop = make_loop(conn, triggers={"on_completion": True})
    first = run_loop(conn, loop)
    fail(conn, first)
    conn.execute("update ceaseless.loops set enabled = true where id = %s", (loop,))
    second = iterations(conn, loop)[-1]["id"]
    assert second != first

    with pytest.raises(psycopg.Error) as error:
        conn.execute("select ceaseless.retry_topology_run(%s)", (first,))
    assert error.value.sqlstate == "CE409"
    assert "whose latest iteration is 2; only the latest iteration can be run again" in str(
        error.value
    )
    assert run_row(conn, first)["status"] == "failed"


def test_retries_race_finishes_fires_and_cancels_without_deadlock_or_two_live_iterations(
    conn: psycopg.Connection, db_url: str
) -> None:
    # Lock order: a retry takes the run, then its jobs without waiting (a
    # listener finishing one holds it and waits for the run), then the loop,
    # as an iteration's end does; a fire takes the loop first and waits for
    # nothing a retry holds. Each operation runs in a thread of its own, as
    # fast as it can, over one on_completion loop of two parallel nodes; a
    # documented refusal is an answer, anything else a failure.
    loop = make_loop(
        conn,
        triggers={"on_completion": True},
        g={"nodes": [node("A"), node("B")], "edges": []},
    )
    run_loop(conn, loop)
    stop = threading.Event()
    errors: list[BaseException] = []
    retried: list[UUID] = []

    def latest(c: psycopg.Connection, statuses: tuple[str, ...]) -> UUID | None:
        row = c.execute(
            "select id from ceaseless.topology_runs where loop_id = %s and status = any(%s) "
            "order by iteration desc nulls last limit 1",
            (loop, list(statuses)),
        ).fetchone()
        return row[0] if row else None

    def retry(c: psycopg.Connection, rng: random.Random) -> None:
        run = latest(c, ("failed", "cancelled"))
        if run is not None:
            c.execute("select ceaseless.retry_topology_run(%s)", (run,))
            retried.append(run)

    def finish_some(c: psycopg.Connection, rng: random.Random) -> None:
        claimed = c.execute(
            "select run_id from ceaseless.claim_jobs('racer', 2, p_start => true)"
        ).fetchall()
        outcomes = [
            {
                "run_id": str(r),
                "outcome": rng.choice(["succeeded", "succeeded", "failed", "cancelled"]),
            }
            for (r,) in claimed
        ]
        if outcomes:
            c.execute("select ceaseless.finish_runs('racer', %s::jsonb)", (json.dumps(outcomes),))

    def fire(c: psycopg.Connection, rng: random.Random) -> None:
        c.execute("select ceaseless.run_loop(%s)", (loop,))

    def cancel(c: psycopg.Connection, rng: random.Random) -> None:
        if rng.random() < 0.3:
            run = latest(c, ("running", "pending", "awaiting_approval"))
            if run is not None:
                c.execute("select ceaseless.cancel_topology_run(%s)", (run,))

    def worker(operation: Callable[[psycopg.Connection, random.Random], None], seed: int) -> None:
        rng = random.Random(seed)
        with psycopg.connect(db_url, autocommit=True) as c:
            while not stop.is_set():
                try:
                    operation(c, rng)
                except psycopg.Error as exc:
                    if exc.sqlstate not in ("CE409", "CE410"):
                        errors.append(exc)
                        return

    threads = [
        threading.Thread(target=worker, args=(op, seed))
        for seed, op in enumerate([retry, retry, finish_some, finish_some, fire, cancel])
    ]
    for t in threads:
        t.start()
    time.sleep(4)
    stop.set()
    for t in threads:
        t.join()
    assert errors == []
    assert retried, "no retry got through: the race tested nothing"

    live = [
        r
        for r in iterations(conn, loop)
        if r["status"] in ("pending", "running", "awaiting_approval")
    ]
    assert len(live) <= 1
    # Every live job belongs to a live run, once the sweep has had its turn.
    conn.execute("select ceaseless.cancel_orphaned_topology_jobs()")
    orphans = conn.execute(
        "select count(*) from ceaseless.job j join ceaseless.topology_runs r "
        "on r.id = j.topology_run_id where r.loop_id = %s "
        "and j.state in ('pending', 'claimed', 'running') "
        "and r.status not in ('pending', 'running', 'awaiting_approval')",
        (loop,),
    ).fetchone()
    assert orphans == (0,)
    # Every live run's unfinished nodes follow a live job or wait.
    stuck = conn.execute(
        "select count(*) from ceaseless.topology_nodes n join ceaseless.topology_runs r "
        "on r.id = n.topology_run_id left join ceaseless.job j on j.id = n.job_id "
        "where r.loop_id = %s and r.status = 'running' and n.state in ('queued', 'running') "
        "and j.state not in ('pending', 'claimed', 'running')",
        (loop,),
    ).fetchone()
    assert stuck == (0,)


def test_explaining_a_failed_node_job_names_retry_topology_run(conn: psycopg.Connection) -> None:
    run = _failed_diamond(conn)
    reasons = conn.execute(
        "select reason, detail from ceaseless.explain_job(%s)", (job_of(conn, run, "B"),)
    ).fetchall()
    assert [r for r, _ in reasons] == ["finished"]
    assert reasons[0][1].endswith(
        f"it runs again only by retry_topology_run('{run}'), with its topology run"
    )
