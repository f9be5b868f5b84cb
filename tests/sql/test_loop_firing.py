"""Loop firing: the one path (manual here), skipped fires, chaining with prior context,
repeat policies applied in the transaction that ends an iteration, RLS, loop_status."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests.factories import make_agent
from tests.sql.loops import fail, iterations, live, loop_row, make_loop, run_loop, runs, succeed
from tests.sql.topology import graph, job_of, node


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn, max_attempts=1)


def _status(conn: psycopg.Connection, loop: Any) -> dict[str, Any]:
    cur = conn.execute("select * from ceaseless.loop_status where id = %s", (loop,))
    row = cur.fetchone()
    assert row is not None and cur.description is not None
    return {col.name: value for col, value in zip(cur.description, row, strict=True)}


def test_run_loop_starts_iteration_one(conn: psycopg.Connection) -> None:
    loop = make_loop(conn, task="write the report")
    run = run_loop(conn, loop)
    [row] = runs(conn, loop)
    assert row["id"] == run and row["iteration"] == 1 and row["parent_run_id"] is None
    assert row["status"] == "running" and row["trigger_type"] == "manual"
    assert row["task"] == "write the report"
    assert row["user_id"] == loop_row(conn, loop)["user_id"]
    assert loop_row(conn, loop)["last_run_id"] == run
    prompt = conn.execute(
        "select prompt from ceaseless.job where id = %s", (job_of(conn, run, "A"),)
    ).fetchone()
    assert prompt is not None and "write the report" in prompt[0]


def test_refused_fires_are_skipped_runs_with_their_reason(conn: psycopg.Connection) -> None:
    loop = make_loop(conn)
    first = run_loop(conn, loop)
    second = run_loop(conn, loop)
    conn.execute("update ceaseless.loops set enabled = false where id = %s", (loop,))
    third = run_loop(conn, loop)
    # A loop whose graph names a disabled agent (another lane).
    make_agent(conn, "other")
    idle = make_loop(conn, g=graph([node("A"), node("B", "other")], [("A", "B")]))
    conn.execute("update ceaseless.agents set enabled = false where name = 'other'")
    fourth = run_loop(conn, idle)
    by_id = {r["id"]: r for r in runs(conn, loop) + runs(conn, idle)}
    assert by_id[first]["status"] == "running"
    refused = ((second, "live_iteration"), (third, "disabled"), (fourth, "agent_disabled"))
    for run, reason in refused:
        row = by_id[run]
        assert (row["status"], row["skip_reason"], row["iteration"]) == ("skipped", reason, None)
        assert row["finished_at"] is not None
    # A skip never takes the loop's last_run_id, and never starts anything.
    assert loop_row(conn, loop)["last_run_id"] == first
    assert loop_row(conn, idle)["last_run_id"] is None
    assert conn.execute("select count(*) from ceaseless.job").fetchone() == (1,)
    status = _status(conn, loop)
    assert (status["skipped_fires"], status["last_skip_reason"]) == (2, "disabled")
    assert _status(conn, idle)["last_skip_reason"] == "agent_disabled"


def test_run_loop_of_an_unknown_loop_is_ce404(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.errors.Error) as info:
        run_loop(conn, uuid.uuid4())
    assert info.value.sqlstate == "CE404"


def test_iters_3_with_on_completion_runs_exactly_three_chained_iterations(
    conn: psycopg.Connection,
) -> None:
    loop = make_loop(
        conn, triggers={"on_completion": True}, policy={"kind": "iters", "spec": {"n": 3}}
    )
    run_loop(conn, loop)
    for n in (1, 2, 3):
        succeed(conn, live(conn, loop), f"final message of iteration {n}")
    chain = iterations(conn, loop)
    assert [r["iteration"] for r in chain] == [1, 2, 3]
    assert [r["status"] for r in chain] == ["succeeded"] * 3
    assert [r["parent_run_id"] for r in chain] == [None, chain[0]["id"], chain[1]["id"]]
    assert [r["trigger_type"] for r in chain] == ["manual", "on_completion", "on_completion"]
    # Iteration 2's job prompt carries iteration 1's final message.
    prompt = conn.execute(
        "select prompt from ceaseless.job where id = %s", (job_of(conn, chain[1]["id"], "A"),)
    ).fetchone()
    assert prompt is not None
    assert "## Prior iteration (1)\n\nfinal message of iteration 1" in prompt[0]
    row = loop_row(conn, loop)
    assert (row["enabled"], row["stopped_reason"], row["next_fire_at"]) == (
        False,
        "completed",
        None,
    )
    assert row["stopped_at"] is not None
    assert not [r for r in runs(conn, loop) if r["status"] == "skipped"]
    note = conn.execute(
        "select kind, subject, user_id from ceaseless.notifications where source_table = 'loops' "
        "and source_id = %s",
        (loop,),
    ).fetchall()
    assert note == [("stopped", "loop a loop stopped: completed", row["user_id"])]


def test_until_match_stops_on_the_first_matching_iteration(conn: psycopg.Connection) -> None:
    loop = make_loop(
        conn,
        triggers={"on_completion": True},
        policy={"kind": "until", "spec": {"match": "DONE", "within_iters": 5}},
    )
    run_loop(conn, loop)
    succeed(conn, live(conn, loop), "not yet")
    succeed(conn, live(conn, loop), "all DONE here")
    assert len(iterations(conn, loop)) == 2
    assert loop_row(conn, loop)["stopped_reason"] == "completed"


def test_until_match_without_a_match_is_exhausted_after_within_iters(
    conn: psycopg.Connection,
) -> None:
    loop = make_loop(
        conn,
        triggers={"on_completion": True},
        policy={"kind": "until", "spec": {"match": "DONE", "within_iters": 5}},
    )
    run_loop(conn, loop)
    for n in range(5):
        succeed(conn, live(conn, loop), f"still working ({n})")
    assert len(iterations(conn, loop)) == 5
    row = loop_row(conn, loop)
    assert (row["enabled"], row["stopped_reason"]) == (False, "exhausted")


def test_until_event_failed_completes_on_a_failure(conn: psycopg.Connection) -> None:
    loop = make_loop(
        conn,
        triggers={"on_completion": True},
        policy={"kind": "until", "spec": {"event": "failed", "within_iters": 3}},
    )
    run_loop(conn, loop)
    succeed(conn, live(conn, loop))
    fail(conn, live(conn, loop))
    assert [r["status"] for r in iterations(conn, loop)] == ["succeeded", "failed"]
    assert loop_row(conn, loop)["stopped_reason"] == "completed"


def test_until_event_succeeded_completes_on_the_first_success(conn: psycopg.Connection) -> None:
    loop = make_loop(
        conn,
        triggers={"on_completion": True},
        policy={"kind": "until", "spec": {"event": "ok", "within_iters": 3}},
    )
    succeed(conn, run_loop(conn, loop))
    assert loop_row(conn, loop)["stopped_reason"] == "completed"


def test_a_failed_iteration_stops_the_loop_as_failed(conn: psycopg.Connection) -> None:
    loop = make_loop(conn, triggers={"on_completion": True})
    fail(conn, run_loop(conn, loop))
    row = loop_row(conn, loop)
    assert (row["enabled"], row["stopped_reason"]) == (False, "failed")
    body = conn.execute(
        "select body from ceaseless.notifications where source_id = %s", (loop,)
    ).fetchone()
    assert body is not None and "Error: node A failed" in body[0]


def test_a_cancelled_iteration_stops_the_loop_as_cancelled(conn: psycopg.Connection) -> None:
    loop = make_loop(conn, triggers={"on_completion": True})
    conn.execute("select ceaseless.cancel_topology_run(%s)", (run_loop(conn, loop),))
    row = loop_row(conn, loop)
    assert (row["enabled"], row["stopped_reason"]) == (False, "cancelled")
    assert len(runs(conn, loop)) == 1


def test_infinite_goes_on_and_without_on_completion_nothing_chains(
    conn: psycopg.Connection,
) -> None:
    chained = make_loop(conn, triggers={"on_completion": True})
    run_loop(conn, chained)
    for _ in range(4):
        succeed(conn, live(conn, chained))
    assert len(iterations(conn, chained)) == 5
    assert loop_row(conn, chained)["enabled"] is True

    manual = make_loop(conn)
    succeed(conn, run_loop(conn, manual))
    assert [r["status"] for r in runs(conn, manual)] == ["succeeded"]
    assert loop_row(conn, manual)["enabled"] is True
    # The next manual fire chains to it all the same.
    second = run_loop(conn, manual)
    assert iterations(conn, manual)[1]["id"] == second
    assert iterations(conn, manual)[1]["parent_run_id"] == iterations(conn, manual)[0]["id"]


def test_prior_context_is_cut_to_the_setting_with_a_marker(conn: psycopg.Connection) -> None:
    conn.execute(
        "update ceaseless.settings set value = '10' where key = 'loop_prior_context_chars'"
    )
    loop = make_loop(conn, triggers={"on_completion": True}, task="T")
    succeed(conn, run_loop(conn, loop), "0123456789abcdefghij")
    task = iterations(conn, loop)[1]["task"]
    assert task == "T\n\n## Prior iteration (1)\n\n0123456789\n\n[… cut: 10 of 20 characters shown]"


def test_a_disabled_loop_does_not_chain_and_its_policy_still_stops_it(
    conn: psycopg.Connection,
) -> None:
    loop = make_loop(
        conn, triggers={"on_completion": True}, policy={"kind": "iters", "spec": {"n": 2}}
    )
    run = run_loop(conn, loop)
    conn.execute("update ceaseless.loops set enabled = false where id = %s", (loop,))
    succeed(conn, run)
    assert len(iterations(conn, loop)) == 1
    assert loop_row(conn, loop)["stopped_reason"] is None
    # Resuming continues where it was (re-enable fires the next iteration).
    conn.execute("update ceaseless.loops set enabled = true where id = %s", (loop,))
    assert iterations(conn, loop)[1]["trigger_detail"] == "re-enabled"
    succeed(conn, live(conn, loop))
    assert loop_row(conn, loop)["stopped_reason"] == "completed"


def test_loop_status_shows_the_loop_without_its_credential(conn: psycopg.Connection) -> None:
    loop = make_loop(
        conn,
        triggers={"cron": "0 9 * * *", "timezone": "Europe/Berlin", "webhook_enabled": True},
        policy={"kind": "iters", "spec": {"n": 5}},
    )
    succeed(conn, run_loop(conn, loop), "first")
    second = run_loop(conn, loop)
    run_loop(conn, loop)
    status = _status(conn, loop)
    token = loop_row(conn, loop)["webhook_token"]
    assert token not in str(status)
    assert status["cron"] == "0 9 * * *" and status["timezone"] == "Europe/Berlin"
    assert status["webhook"] is True and status["on_completion"] is False
    assert status["repeat_policy"] == {"kind": "iters", "spec": {"n": 5}}
    assert status["current_iteration"] == 2
    assert (status["live_run_id"], status["live_run_status"]) == (second, "running")
    assert status["last_run_status"] == "succeeded" and status["last_run_finished_at"]
    assert (status["skipped_fires"], status["last_skip_reason"]) == (1, "live_iteration")


def test_a_user_sees_and_runs_only_its_own_loops(
    conn: psycopg.Connection, login_role: Callable[[str], psycopg.Connection]
) -> None:
    alice, bob = login_role("alice"), login_role("bob")
    mine = make_loop(
        alice,
        triggers={"on_completion": True, "webhook_enabled": True},
        policy={"kind": "iters", "spec": {"n": 2}},
    )
    theirs = make_loop(bob)
    run = run_loop(alice, mine)
    # The chain runs with the owner's rights whoever ends the iteration.
    succeed(conn, run, "first")
    second = live(conn, mine)
    assert iterations(conn, mine)[1]["id"] == second
    assert iterations(conn, mine)[1]["user_id"] == loop_row(conn, mine)["user_id"]
    assert alice.execute("select count(*) from ceaseless.loops").fetchone() == (1,)
    assert alice.execute("select count(*) from ceaseless.topology_runs").fetchone() == (2,)
    assert alice.execute("select count(*) from ceaseless.loop_status").fetchone() == (1,)
    assert bob.execute("select count(*) from ceaseless.topology_runs").fetchone() == (0,)
    assert bob.execute("select id from ceaseless.loop_status").fetchall() == [(theirs,)]
    with pytest.raises(psycopg.errors.Error) as info:
        run_loop(bob, mine)
    assert info.value.sqlstate == "CE404"
    # Bob can neither change nor delete Alice's loop: it is not there for him.
    assert (
        bob.execute("update ceaseless.loops set enabled = false where id = %s", (mine,)).rowcount
        == 0
    )
    assert bob.execute("delete from ceaseless.loops where id = %s", (mine,)).rowcount == 0
    # Alice stops and re-enables her loop herself; re-enabling fires as her.
    alice.execute("select ceaseless.cancel_topology_run(%s)", (second,))
    assert loop_row(conn, mine)["stopped_reason"] == "cancelled"
    alice.execute("update ceaseless.loops set enabled = true where id = %s", (mine,))
    assert alice.execute(
        "select count(*) from ceaseless.topology_runs where status = 'running'"
    ).fetchone() == (1,)
    assert alice.execute("select user_id from ceaseless.loops").fetchone() == (
        loop_row(conn, mine)["user_id"],
    )
    # Alice cannot forge an iteration of her own loop either: a user role cannot even name
    # loop_id or iteration.
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.execute(
            "insert into ceaseless.topology_runs (graph, task, loop_id, iteration) "
            "select graph, 'x', id, 9 from ceaseless.loops"
        )


def test_disabling_an_agent_under_a_live_iteration_stops_the_loop_as_failed(
    conn: psycopg.Connection,
) -> None:
    loop = make_loop(conn, triggers={"on_completion": True})
    run = run_loop(conn, loop)
    conn.execute("update ceaseless.agents set enabled = false where name = 'noop'")
    assert runs(conn, loop)[0]["id"] == run and runs(conn, loop)[0]["status"] == "failed"
    row = loop_row(conn, loop)
    assert (row["enabled"], row["stopped_reason"]) == (False, "failed")
