"""finish_runs is fenced by the claim: a late result is kept apart, never written onto a closed run.

And the sessions that make a rescued job resumable: note_sessions while the
agent runs, handed to the job when its run is cut short.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest

from tests.factories import claim_started, make_agent, make_job

LATER = datetime.now(UTC) + timedelta(hours=1)
# Session ids of the shape Claude Code prints: only these are handed to a job.
SESSION = "3b926aac-d113-4b86-9dc1-0c36b2013f93"


def _finish(
    conn: psycopg.Connection, worker: str, *results: dict[str, Any]
) -> list[tuple[Any, ...]]:
    payload = json.dumps(
        [{k: str(v) if isinstance(v, UUID) else v for k, v in r.items()} for r in results]
    )
    return conn.execute(
        "select run_id, job_state, recorded, refusal from ceaseless.finish_runs(%s, %s::jsonb)",
        (worker, payload),
    ).fetchall()


def _run(conn: psycopg.Connection, run: UUID) -> tuple[Any, ...]:
    row = conn.execute(
        "select outcome, ended_by, exit_status, final_message, session_id "
        "from ceaseless.agent_run where id = %s",
        (run,),
    ).fetchone()
    assert row is not None
    return row


@pytest.fixture
def started(conn: psycopg.Connection) -> tuple[UUID, UUID]:
    """One job of a three-attempt lane, claimed and started by w1: (job, run)."""
    make_agent(conn, max_attempts=3)
    job = make_job(conn)
    return job, claim_started(conn, "w1")[job]


def test_result_after_the_lease_expired_is_kept_apart_and_audited(
    conn: psycopg.Connection, started: tuple[UUID, UUID]
) -> None:
    job, run = started
    conn.execute("select ceaseless.expire_leases(%s)", (LATER,))
    rescued = claim_started(conn, "w2", p_now=LATER)[job]

    answer = _finish(
        conn,
        "w1",
        {"run_id": run, "outcome": "succeeded", "exit_status": 0, "final_message": "done, twice"},
    )

    assert answer == [(run, "running", False, "run already ended (lease_expired, by lease_expiry)")]
    # The closed run is exactly as the sweep left it; the rescuing run is untouched.
    assert _run(conn, run)[:4] == ("lease_expired", "lease_expiry", None, None)
    assert _run(conn, rescued)[:2] == (None, None)
    kept = conn.execute(
        "select job_id, worker, reason, result ->> 'final_message' from ceaseless.late_results"
    ).fetchall()
    assert kept == [
        (job, "w1", "run already ended (lease_expired, by lease_expiry)", "done, twice")
    ]
    audited = conn.execute(
        "select actor, worker, entity_id, detail ->> 'job_id' from ceaseless.audit_log "
        "where action = 'late_result'"
    ).fetchall()
    assert audited == [("postgres", "w1", run, str(job))]


def test_repeated_finish_after_a_lost_reply_is_answered_as_recorded(
    conn: psycopg.Connection, started: tuple[UUID, UUID]
) -> None:
    _, run = started
    result = {"run_id": run, "outcome": "succeeded", "final_message": "done"}
    assert _finish(conn, "w1", result) == [(run, "delivered", True, None)]
    assert _finish(conn, "w1", result) == [(run, "delivered", True, None)]
    assert conn.execute("select count(*) from ceaseless.late_results").fetchone() == (0,)


def test_another_listener_cannot_finish_a_run_it_does_not_hold(
    conn: psycopg.Connection, started: tuple[UUID, UUID]
) -> None:
    _, run = started
    answer = _finish(conn, "w2", {"run_id": run, "outcome": "failed"})
    assert answer == [(run, "running", False, "run belongs to listener w1")]
    assert _run(conn, run)[:2] == (None, None)


def test_one_unknown_run_never_blocks_the_rest_of_the_batch(
    conn: psycopg.Connection, started: tuple[UUID, UUID]
) -> None:
    _, run = started
    stranger = uuid4()
    answers = _finish(
        conn,
        "w1",
        {"run_id": stranger, "outcome": "succeeded"},
        {"run_id": run, "outcome": "succeeded", "session_id": "--dangerously-skip-permissions"},
    )
    assert sorted(answers, key=lambda a: a[2]) == [
        (stranger, None, False, "no such run"),
        (run, "delivered", True, None),
    ]
    # An implausible session id is dropped, not stored and not fatal.
    assert _run(conn, run)[4] is None


def test_a_fenced_run_returns_its_job_at_once_with_its_session(
    conn: psycopg.Connection, started: tuple[UUID, UUID]
) -> None:
    job, run = started
    conn.execute("select ceaseless.note_sessions('w1', %s, %s)", ([run], [SESSION]))
    assert _finish(conn, "w1", {"run_id": run, "outcome": "lease_expired"}) == [
        (run, "pending", True, None)
    ]
    row = conn.execute(
        "select claimed_by, run_after <= now(), attempts, resume_session_id "
        "from ceaseless.job where id = %s",
        (job,),
    ).fetchone()
    assert row == (None, True, 1, SESSION)


def test_note_sessions_stores_only_plausible_sessions_of_open_runs_of_the_caller(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, max_concurrent=5)
    jobs = [make_job(conn) for _ in range(4)]
    runs = claim_started(conn, "w1")
    ids = [runs[j] for j in jobs]
    _finish(conn, "w1", {"run_id": ids[3], "outcome": "succeeded"})
    stored = conn.execute(
        "select ceaseless.note_sessions('w1', %s, %s)",
        (ids, ["ok-1", "--resume-me", "has space", "closed-run"]),
    ).fetchone()
    assert stored == (1,)
    assert conn.execute(
        "select ceaseless.note_sessions('w2', %s, %s)", ([ids[1]], ["w2-session"])
    ).fetchone() == (0,)
    sessions = conn.execute(
        "select id, session_id from ceaseless.agent_run where id = any(%s)", (ids,)
    ).fetchall()
    assert dict(sessions) == {ids[0]: "ok-1", ids[1]: None, ids[2]: None, ids[3]: None}


@pytest.mark.parametrize("how", ["expire", "release"])
def test_an_interrupted_run_hands_its_session_to_the_next_attempt(
    conn: psycopg.Connection, started: tuple[UUID, UUID], how: str
) -> None:
    job, run = started
    conn.execute("select ceaseless.note_sessions('w1', %s, %s)", ([run], [SESSION]))
    if how == "expire":
        conn.execute("select ceaseless.expire_leases(%s)", (LATER,))
    else:
        conn.execute("select ceaseless.release_jobs('w1', %s)", ([job],))
    resumed = conn.execute(
        "select resume_session_id from ceaseless.claim_jobs('w2', 1, p_now => %s, p_start => true)",
        (LATER,),
    ).fetchone()
    assert resumed == (SESSION,)


def test_a_job_cannot_be_inserted_with_a_session_that_reads_as_a_flag(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    with pytest.raises(psycopg.Error) as error:
        make_job(conn, resume_session_id="--dangerously-skip-permissions")
    assert error.value.sqlstate == "CE422"
    assert "job.resume_session_id" in str(error.value)
    assert "--dangerously-skip-permissions" in str(error.value)


def test_listener_status_shows_what_each_listener_holds_and_its_refused_results(
    conn: psycopg.Connection, started: tuple[UUID, UUID]
) -> None:
    _, run = started
    row = conn.execute(
        "select held, running, next_lease_ends_in > interval '50 seconds', late_results_24h, "
        "listening from ceaseless.listener_status where worker = 'w1'"
    ).fetchone()
    assert row == (1, 1, True, 0, False)

    conn.execute("select ceaseless.expire_leases(%s)", (LATER,))
    _finish(conn, "w1", {"run_id": run, "outcome": "succeeded"})
    claim_started(conn, "w2", p_now=LATER)
    rows = conn.execute(
        "select worker, held, late_results_24h from ceaseless.listener_status order by worker"
    ).fetchall()
    assert rows == [("w1", 0, 1), ("w2", 1, 0)]
