"""Runs opened by claim_jobs(p_start) and ended by finish_runs: outcomes move jobs."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from uuid import UUID

import psycopg
import pytest

from tests.factories import claim_started, finish, job_state, make_agent, make_job

Running = tuple[psycopg.Connection, UUID, UUID]


@pytest.fixture
def running(conn: psycopg.Connection) -> tuple[psycopg.Connection, UUID, UUID]:
    """A job of a two-attempt lane, claimed and started by w1: (conn, job id, run id)."""
    make_agent(conn, max_attempts=2)
    job = make_job(conn)
    run = claim_started(conn)[job]
    return conn, job, run


def test_claim_with_start_opens_one_run_and_marks_the_job_running(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    job = make_job(conn)
    runs = claim_started(conn)
    assert list(runs) == [job]
    assert job_state(conn, job) == "running"
    row = conn.execute(
        "select agent, adapter, worker, attempt, finished_at from "
        "ceaseless.agent_run where job_id = %s",
        (job,),
    ).fetchone()
    assert row == ("noop", "noop", "w1", 1, None)


@pytest.mark.parametrize(
    ("outcome", "state"),
    [
        ("succeeded", "delivered"),
        ("budget_exhausted", "blocked"),
        ("output_budget_exhausted", "blocked"),
        ("cancelled", "cancelled"),
    ],
)
def test_outcome_moves_job_to_its_state(running: Running, outcome: str, state: str) -> None:
    conn, job, run = running
    assert finish(conn, run, outcome, exit_status=0, final_message="done") == state
    row = conn.execute(
        "select state, finished_at is not null from ceaseless.job where id = %s", (job,)
    ).fetchone()
    assert row == (state, True)
    run_row = conn.execute(
        "select outcome, exit_status, final_message, finished_at is not null "
        "from ceaseless.agent_run where id = %s",
        (run,),
    ).fetchone()
    assert run_row == (outcome, 0, "done", True)


def test_failure_retries_with_backoff_then_fails_after_max_attempts(running: Running) -> None:
    conn, job, run = running
    assert finish(conn, run, "failed", error="boom") == "pending"
    row = conn.execute(
        "select claimed_by, run_after > now() + interval '9 seconds', last_error "
        "from ceaseless.job where id = %s",
        (job,),
    ).fetchone()
    assert row == (None, True, "boom")
    later = datetime.now(UTC) + timedelta(hours=2)
    run2 = claim_started(conn, p_now=later)[job]
    assert finish(conn, run2, "timed_out") == "failed"


def test_rate_limit_with_reset_time_waits_pauses_the_lane_and_keeps_the_attempt(
    running: Running,
) -> None:
    conn, job, run = running
    reset = datetime.now(UTC) + timedelta(hours=1)
    assert finish(conn, run, "rate_limited", rate_limit_reset_at=reset.isoformat()) == "pending"
    row = conn.execute(
        "select run_after, attempts from ceaseless.job where id = %s", (job,)
    ).fetchone()
    assert row is not None
    assert abs((row[0] - reset).total_seconds()) < 0.01 and row[1] == 0
    paused = conn.execute("select agent, paused_until from ceaseless.lane_pauses").fetchone()
    assert paused is not None and paused[0] == "noop"
    assert abs((paused[1] - reset).total_seconds()) < 0.01


def test_finishing_twice_is_harmless(running: Running) -> None:
    conn, _, run = running
    assert finish(conn, run, "succeeded") == "delivered"
    assert finish(conn, run, "failed") == "delivered"
    outcome = conn.execute(
        "select outcome from ceaseless.agent_run where id = %s", (run,)
    ).fetchone()
    assert outcome == ("succeeded",)


def test_result_of_a_cancelled_run_is_kept_apart_and_never_rewrites_it(
    running: Running,
) -> None:
    conn, job, run = running
    conn.execute("select ceaseless.cancel_job(%s)", (job,))
    payload = json.dumps([{"run_id": str(run), "outcome": "cancelled", "exit_status": -15}])
    answer = conn.execute(
        "select job_state, recorded, refusal from ceaseless.finish_runs('w1', %s::jsonb)",
        (payload,),
    ).fetchone()
    assert answer == ("cancelled", False, "run already ended (cancelled, by cancel)")
    row = conn.execute(
        "select outcome, exit_status, ended_by from ceaseless.agent_run where id = %s", (run,)
    ).fetchone()
    assert row == ("cancelled", None, "cancel")
    kept = conn.execute(
        "select job_id, worker, result from ceaseless.late_results where run_id = %s", (run,)
    ).fetchall()
    assert kept == [(job, "w1", {"outcome": "cancelled", "exit_status": -15})]


def test_cancel_and_retry_report_unknown_and_wrong_state(conn: psycopg.Connection) -> None:
    make_agent(conn)
    job = make_job(conn)
    with pytest.raises(psycopg.Error) as unknown:
        conn.execute("select ceaseless.cancel_job(gen_random_uuid())")
    assert unknown.value.sqlstate == "CE404"
    with pytest.raises(psycopg.Error) as live:
        conn.execute("select ceaseless.retry_job(%s)", (job,))
    assert live.value.sqlstate == "CE409"
    conn.execute("select ceaseless.cancel_job(%s)", (job,))
    with pytest.raises(psycopg.Error) as again:
        conn.execute("select ceaseless.cancel_job(%s)", (job,))
    assert again.value.sqlstate == "CE409" and "already cancelled" in str(again.value)
    conn.execute("select ceaseless.retry_job(%s)", (job,))
    assert job_state(conn, job) == "pending"


def test_every_state_change_is_audited(running: Running) -> None:
    conn, job, run = running
    finish(conn, run, "succeeded")
    rows = conn.execute(
        "select old_state, new_state, actor, worker from ceaseless.audit_log "
        "where entity = 'job' and entity_id = %s order by id",
        (job,),
    ).fetchall()
    # The actor is the login role; the listener's worker id is recorded beside it.
    assert rows == [
        (None, "pending", "postgres", None),
        ("pending", "running", "postgres", "w1"),
        ("running", "delivered", "postgres", "w1"),
    ]
