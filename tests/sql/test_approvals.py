"""Gated approvals: request, approve, reject, decide twice, expire; RLS on runs and nodes."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from uuid import UUID

import psycopg
import pytest

from tests.factories import make_agent
from tests.sql.topology import (
    diamond,
    graph,
    job_of,
    node,
    nodes,
    run_node,
    run_row,
    start_run,
    states,
)


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn)


def _approval(conn: psycopg.Connection, run: UUID, node_id: str) -> dict:
    cur = conn.execute(
        "select * from ceaseless.approvals where topology_run_id = %s and node_id = %s",
        (run, node_id),
    )
    row = cur.fetchone()
    assert row is not None and cur.description is not None
    return {col.name: value for col, value in zip(cur.description, row, strict=True)}


def _decide(
    conn: psycopg.Connection,
    approval: UUID,
    approve: bool,
    who: str | None = "carol",
    note: str | None = None,
    now: datetime | None = None,
) -> None:
    if now is None:
        conn.execute(
            "select ceaseless.decide_approval(%s, %s, %s, %s)", (approval, approve, who, note)
        )
    else:
        conn.execute(
            "select ceaseless.decide_approval(%s, %s, %s, %s, %s)",
            (approval, approve, who, note, now),
        )


def _gated_run(conn: psycopg.Connection, **gate: object) -> UUID:
    run = start_run(conn, diamond(D={"gate": "approval", **gate}))
    for n in "ABC":
        run_node(conn, run, n)
    return run


def test_a_gated_node_waits_for_approval_and_its_owner_is_told(conn: psycopg.Connection) -> None:
    run = _gated_run(conn)
    assert states(conn, run)["D"] == "awaiting_approval"
    assert run_row(conn, run)["status"] == "awaiting_approval"
    approval = _approval(conn, run, "D")
    assert approval["decision"] is None and approval["expires_at"] is None
    assert nodes(conn, run)["D"]["approval_decision"] == "pending"
    note = conn.execute(
        "select kind, subject, body, user_id from ceaseless.notifications "
        "where source_table = 'approvals' and source_id = %s",
        (approval["id"],),
    ).fetchone()
    assert note is not None
    kind, subject, body, owner = note
    assert kind == "approval" and owner == run_row(conn, run)["user_id"]
    assert str(run) in subject and "node D" in subject
    assert f"select ceaseless.decide_approval('{approval['id']}', true, null, 'approved');" in body
    assert f"select ceaseless.decide_approval('{approval['id']}', false, null, 'rejected');" in body


def test_a_gated_source_puts_the_run_in_awaiting_approval_at_once(
    conn: psycopg.Connection,
) -> None:
    run = start_run(conn, graph([node("A", gate="approval")]))
    assert run_row(conn, run)["status"] == "awaiting_approval"
    assert states(conn, run) == {"A": "awaiting_approval"}


def test_approve_enqueues_the_node_and_the_run_runs_again(conn: psycopg.Connection) -> None:
    run = _gated_run(conn)
    approval = _approval(conn, run, "D")["id"]
    _decide(conn, approval, True, note="looks fine")
    decided = _approval(conn, run, "D")
    assert decided["decision"] == "approved" and decided["decided_by"] == "carol"
    assert decided["note"] == "looks fine"
    assert states(conn, run)["D"] == "queued"
    assert run_row(conn, run)["status"] == "running"
    run_node(conn, run, "D", message="shipped")
    row = run_row(conn, run)
    assert row["status"] == "succeeded" and row["final_message"] == "shipped"


def test_reject_fails_the_run_naming_the_node_and_who(conn: psycopg.Connection) -> None:
    run = start_run(conn, diamond(B={"gate": "approval"}))
    run_node(conn, run, "A")
    approval = _approval(conn, run, "B")["id"]
    assert run_row(conn, run)["status"] == "running"  # C is queued
    _decide(conn, approval, False, note="not today")
    row = run_row(conn, run)
    assert row["status"] == "failed"
    assert row["error"] == "node B failed: approval rejected by carol: not today"
    assert states(conn, run) == {
        "A": "succeeded",
        "B": "failed",
        "C": "cancelled",
        "D": "cancelled",
    }
    job_c = conn.execute(
        "select state from ceaseless.job where payload ->> 'node_id' = 'C'"
    ).fetchone()
    assert job_c == ("cancelled",)


def test_deciding_twice_names_the_first_decision(conn: psycopg.Connection) -> None:
    run = _gated_run(conn)
    approval = _approval(conn, run, "D")["id"]
    _decide(conn, approval, True, who=None)
    who = conn.execute("select session_user").fetchone()
    assert who is not None and _approval(conn, run, "D")["decided_by"] == who[0]
    with pytest.raises(psycopg.Error) as error:
        _decide(conn, approval, False)
    assert error.value.sqlstate == "CE409"
    assert f"was already approved by {who[0]} at" in str(error.value)


def test_unknown_approval_and_a_null_decision_are_refused(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as error:
        _decide(conn, uuid.uuid4(), True)
    assert error.value.sqlstate == "CE404"
    run = _gated_run(conn)
    with pytest.raises(psycopg.Error) as error:
        conn.execute(
            "select ceaseless.decide_approval(%s, null, null, null)",
            (_approval(conn, run, "D")["id"],),
        )
    assert error.value.sqlstate == "CE422"


def test_an_approval_of_a_cancelled_run_stays_undecided_and_dead(
    conn: psycopg.Connection,
) -> None:
    run = _gated_run(conn, approval_timeout_secs=60)
    conn.execute("select ceaseless.cancel_topology_run(%s)", (run,))
    approval = _approval(conn, run, "D")
    with pytest.raises(psycopg.Error, match="can no longer be decided") as error:
        _decide(conn, approval["id"], True)
    assert error.value.sqlstate == "CE409"
    later = datetime.now().astimezone() + timedelta(hours=1)
    assert conn.execute("select ceaseless.expire_approvals(%s)", (later,)).fetchone() == (0,)
    assert _approval(conn, run, "D")["decision"] is None
    assert run_row(conn, run)["status"] == "cancelled"


def test_an_expired_approval_fails_the_run(conn: psycopg.Connection) -> None:
    run = _gated_run(conn, approval_timeout_secs=60)
    approval = _approval(conn, run, "D")
    assert approval["expires_at"] - approval["requested_at"] == timedelta(seconds=60)
    before = approval["expires_at"] - timedelta(seconds=1)
    assert conn.execute("select ceaseless.expire_approvals(%s)", (before,)).fetchone() == (0,)
    assert run_row(conn, run)["status"] == "awaiting_approval"
    after = approval["expires_at"] + timedelta(seconds=1)
    assert conn.execute("select ceaseless.expire_approvals(%s)", (after,)).fetchone() == (1,)
    expired = _approval(conn, run, "D")
    assert expired["decision"] == "expired" and expired["decided_by"] == "ceaseless"
    row = run_row(conn, run)
    assert row["status"] == "failed" and "node D failed: approval" in row["error"]
    assert "expired undecided" in row["error"]
    assert conn.execute("select ceaseless.expire_approvals(%s)", (after,)).fetchone() == (0,)
    with pytest.raises(psycopg.Error, match="was already expired by ceaseless"):
        _decide(conn, expired["id"], True)


def _count(c: psycopg.Connection, relation: str) -> int:
    row = c.execute(f"select count(*) from ceaseless.{relation}").fetchone()
    assert row is not None
    return int(row[0])


def test_a_user_sees_and_decides_only_its_own_runs(
    conn: psycopg.Connection, login_role: Callable[..., psycopg.Connection]
) -> None:
    alice, bob = login_role("alice"), login_role("bob")
    runs = {}
    for user in (alice, bob):
        runs[user] = start_run(user, diamond(A={"gate": "approval"}))
    for user in (alice, bob):
        mine = runs[user]
        assert _count(user, "topology_runs") == 1
        assert _count(user, "topology_nodes") == 4
        assert _count(user, "approvals") == 1
        assert _count(user, "topology_node_status") == 4
        assert _count(user, "notifications") == 1
        row = user.execute("select distinct run_id from ceaseless.topology_node_status").fetchone()
        assert row == (mine,)
    alices = _approval(conn, runs[alice], "A")["id"]
    with pytest.raises(psycopg.Error) as error:
        _decide(bob, alices, True)
    assert error.value.sqlstate == "CE404"
    with pytest.raises(psycopg.Error) as error:
        bob.execute("select ceaseless.cancel_topology_run(%s)", (runs[alice],))
    assert error.value.sqlstate == "CE404"
    _decide(alice, alices, True, who=None)
    assert states(conn, runs[alice])["A"] == "queued"
    job = alice.execute(
        "select j.user_id from ceaseless.job j where j.topology_run_id = %s", (runs[alice],)
    ).fetchone()
    assert job is not None and job[0] == run_row(conn, runs[alice])["user_id"]
    assert _count(bob, "job") == 0
    # The audit row's actor is alice's role, whatever decided_by says.
    actor = conn.execute(
        "select actor from ceaseless.audit_log where entity = 'approval' and entity_id = %s "
        "and action = 'decide'",
        (alices,),
    ).fetchone()
    assert actor is not None and actor[0].startswith("alice_")
    alice.execute("select ceaseless.cancel_topology_run(%s)", (runs[alice],))
    assert run_row(conn, runs[alice])["status"] == "cancelled"
    # A user may not move a run by hand.
    with pytest.raises(psycopg.Error):
        alice.execute(
            "update ceaseless.topology_runs set status = 'succeeded' where id = %s",
            (runs[alice],),
        )


def test_an_approval_whose_node_says_approve_on_expiry_opens_the_gate_by_itself(
    conn: psycopg.Connection,
) -> None:
    run = _gated_run(conn, approval_timeout_secs=60, on_expiry="approve")
    approval = _approval(conn, run, "D")
    after = approval["expires_at"] + timedelta(seconds=1)

    assert conn.execute("select ceaseless.expire_approvals(%s)", (after,)).fetchone() == (1,)

    opened = _approval(conn, run, "D")
    assert (opened["decision"], opened["decided_by"]) == ("approved", "ceaseless")
    assert opened["note"] == "approved undecided at its expiry"
    assert states(conn, run)["D"] == "queued"
    assert run_row(conn, run)["status"] == "running"
    run_node(conn, run, "D")
    assert run_row(conn, run)["status"] == "succeeded"


def test_an_approval_whose_node_says_skip_on_expiry_skips_it_and_runs_what_follows(
    conn: psycopg.Connection,
) -> None:
    # A → B (gated, skip on expiry) → C: C runs without B's output, told plainly.
    run = start_run(
        conn,
        graph(
            [node("A"), node("B", gate="approval", approval_timeout_secs=60, on_expiry="skip"),
             node("C")],
            [("A", "B"), ("B", "C")],
        ),
    )  # fmt: skip
    run_node(conn, run, "A", message="from A")
    approval = _approval(conn, run, "B")
    request = conn.execute(
        "select body from ceaseless.notifications where source_id = %s", (approval["id"],)
    ).fetchone()
    assert request is not None and "undecided, it is skipped at" in request[0]

    after = approval["expires_at"] + timedelta(seconds=1)
    assert conn.execute("select ceaseless.expire_approvals(%s)", (after,)).fetchone() == (1,)

    skipped = _approval(conn, run, "B")
    assert (skipped["decision"], skipped["decided_by"]) == ("expired", "ceaseless")
    assert skipped["note"] == "skipped undecided at its expiry"
    assert states(conn, run) == {"A": "succeeded", "B": "skipped", "C": "queued"}
    assert nodes(conn, run)["B"]["finished_at"] == after
    (prompt,) = conn.execute(
        "select prompt from ceaseless.job where id = %s", (job_of(conn, run, "C"),)
    ).fetchone()  # type: ignore[misc]
    assert "## Output of B\n\n(skipped: its approval expired)" in prompt
    assert run_row(conn, run)["status"] == "running"
    run_node(conn, run, "C", message="done without B")
    assert run_row(conn, run)["status"] == "succeeded"
    assert run_row(conn, run)["final_message"] == "done without B"


def test_a_skipped_sink_says_so_in_the_run_s_final_message(conn: psycopg.Connection) -> None:
    run = _gated_run(conn, approval_timeout_secs=60, on_expiry="skip")
    approval = _approval(conn, run, "D")
    conn.execute(
        "select ceaseless.expire_approvals(%s)", (approval["expires_at"] + timedelta(seconds=1),)
    )
    assert states(conn, run)["D"] == "skipped"
    assert run_row(conn, run)["status"] == "succeeded"
    assert run_row(conn, run)["final_message"] == "(skipped: its approval expired)"


def test_a_retried_run_keeps_its_skipped_nodes_done(conn: psycopg.Connection) -> None:
    run = start_run(
        conn,
        graph(
            [node("A"), node("B", gate="approval", approval_timeout_secs=60, on_expiry="skip"),
             node("C")],
            [("A", "B"), ("B", "C")],
        ),
    )  # fmt: skip
    run_node(conn, run, "A")
    approval = _approval(conn, run, "B")
    conn.execute(
        "select ceaseless.expire_approvals(%s)", (approval["expires_at"] + timedelta(seconds=1),)
    )
    conn.execute("select ceaseless.cancel_topology_run(%s)", (run,))
    assert run_row(conn, run)["status"] == "cancelled"
    conn.execute("select ceaseless.retry_topology_run(%s)", (run,))
    assert states(conn, run) == {"A": "succeeded", "B": "skipped", "C": "queued"}


def test_a_user_s_skipped_node_shows_on_its_own_run_only(
    conn: psycopg.Connection, login_role: Callable[[str], psycopg.Connection]
) -> None:
    alice, bob = login_role("alice"), login_role("bob")
    run = start_run(
        alice, diamond(D={"gate": "approval", "approval_timeout_secs": 60, "on_expiry": "skip"})
    )
    for n in "ABC":
        run_node(conn, run, n)
    approval = _approval(conn, run, "D")
    # The maintenance sweep runs as a listener, not as the run's owner.
    conn.execute(
        "select ceaseless.expire_approvals(%s)", (approval["expires_at"] + timedelta(seconds=1),)
    )
    conn.commit()
    assert alice.execute(
        "select state from ceaseless.topology_nodes where topology_run_id = %s and node_id = 'D'",
        (run,),
    ).fetchone() == ("skipped",)
    assert alice.execute(
        "select status from ceaseless.topology_runs where id = %s", (run,)
    ).fetchone() == ("succeeded",)
    assert bob.execute(
        "select count(*) from ceaseless.topology_nodes where topology_run_id = %s", (run,)
    ).fetchone() == (0,)


def test_a_reminder_goes_once_before_the_expiry_with_the_run_s_dashboard_link(
    conn: psycopg.Connection,
) -> None:
    conn.execute(
        "insert into ceaseless.listener_reports (worker, host, pid, sandbox, db_auth, http) "
        "values ('w1', 'here', 1, 'none', 'scram-sha-256', '127.0.0.1:8787')"
    )
    run = _gated_run(conn, approval_timeout_secs=3600, remind_before_secs=600)
    approval = _approval(conn, run, "D")
    assert approval["remind_at"] == approval["expires_at"] - timedelta(seconds=600)

    def reminders() -> list[tuple[str, str]]:
        return conn.execute(
            "select subject, body from ceaseless.notifications "
            "where source_id = %s and subject like 'reminder:%%'",
            (approval["id"],),
        ).fetchall()

    conn.execute(
        "select ceaseless.expire_approvals(%s)", (approval["remind_at"] - timedelta(seconds=1),)
    )
    assert reminders() == []
    conn.execute("select ceaseless.expire_approvals(%s)", (approval["remind_at"],))
    conn.execute(
        "select ceaseless.expire_approvals(%s)", (approval["remind_at"] + timedelta(seconds=5),)
    )
    ((subject, body),) = reminders()
    assert subject.startswith(f"reminder: topology run {run}: node D awaits approval until ")
    assert f"select ceaseless.decide_approval('{approval['id']}', true" in body
    assert f"Dashboard: http://127.0.0.1:8787/runs/{run}" in body
    (request,) = conn.execute(
        "select body from ceaseless.notifications where source_id = %s and kind = 'approval' "
        "and subject not like 'reminder:%%'",
        (approval["id"],),
    ).fetchone()  # type: ignore[misc]
    assert f"Dashboard: http://127.0.0.1:8787/runs/{run}" in request
    assert "; undecided, it fails the run at" in request


@pytest.mark.parametrize(
    ("gate", "message"),
    [
        ({"on_expiry": "approve"}, "node \"D\": on_expiry needs approval_timeout_secs"),
        ({"approval_timeout_secs": 60, "on_expiry": "ask"},
         "node \"D\": on_expiry must be \"fail\", \"skip\" or \"approve\""),
        ({"approval_timeout_secs": 60, "remind_before_secs": 60},
         "node \"D\": remind_before_secs must be less than approval_timeout_secs"),
        ({"approval_timeout_secs": 60, "remind_before_secs": -1},
         "node \"D\": remind_before_secs must be a positive integer"),
    ],
)  # fmt: skip
def test_an_expiry_policy_that_cannot_work_is_refused_naming_the_node(
    conn: psycopg.Connection, gate: dict, message: str
) -> None:
    with pytest.raises(psycopg.Error) as refused:
        start_run(conn, diamond(D={"gate": "approval", **gate}))
    assert refused.value.diag.sqlstate == "CE422"
    assert message in str(refused.value.diag.message_primary)
