"""expire_leases, extend_leases, release_jobs: a vanished listener loses nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from tests.factories import claim, claim_started, job_state, make_agent, make_job


def _later(seconds: int = 120) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


def test_expired_lease_returns_job_to_pending_and_finishes_its_run(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    job = make_job(conn)
    run = claim_started(conn)[job]
    assert conn.execute("select ceaseless.expire_leases(%s)", (_later(),)).fetchone() == (1,)
    row = conn.execute(
        "select state, claimed_by, claim_expires_at from ceaseless.job where id = %s", (job,)
    ).fetchone()
    assert row == ("pending", None, None)
    outcome = conn.execute(
        "select outcome, finished_at is not null from ceaseless.agent_run where id = %s", (run,)
    ).fetchone()
    assert outcome == ("lease_expired", True)


def test_expired_lease_abandons_job_after_max_attempts(conn: psycopg.Connection) -> None:
    make_agent(conn, max_attempts=1)
    job = make_job(conn)
    claim(conn)
    conn.execute("select ceaseless.expire_leases(%s)", (_later(),))
    assert job_state(conn, job) == "abandoned"


def test_live_lease_is_not_expired(conn: psycopg.Connection) -> None:
    make_agent(conn)
    job = make_job(conn)
    claim(conn)
    assert conn.execute("select ceaseless.expire_leases()").fetchone() == (0,)
    assert job_state(conn, job) == "claimed"


def test_extend_leases_reports_jobs_no_longer_held(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=5)
    kept, cancelled = make_job(conn), make_job(conn)
    claim(conn)
    conn.execute("select ceaseless.cancel_job(%s)", (cancelled,))
    answers = conn.execute(
        "select job_id, held from ceaseless.extend_leases('w1', %s, now(), 600)",
        ([kept, cancelled],),
    ).fetchall()
    assert sorted(answers) == sorted([(kept, True), (cancelled, False)])
    remaining = conn.execute(
        "select claim_expires_at - now() > interval '500 seconds' from ceaseless.job where id = %s",
        (kept,),
    ).fetchone()
    assert remaining == (True,)


def test_release_returns_jobs_with_their_attempt_refunded(conn: psycopg.Connection) -> None:
    make_agent(conn)
    job = make_job(conn)
    claim_started(conn)
    assert conn.execute("select ceaseless.release_jobs('w1', %s)", ([job],)).fetchone() == (1,)
    row = conn.execute(
        "select state, attempts, claimed_by from ceaseless.job where id = %s", (job,)
    ).fetchone()
    assert row == ("pending", 0, None)
    open_runs = conn.execute("select count(*) from ceaseless.agent_run where finished_at is null")
    assert open_runs.fetchone() == (0,)


def test_database_refuses_two_open_runs_of_one_job(conn: psycopg.Connection) -> None:
    make_agent(conn)
    job = make_job(conn)
    claim_started(conn)
    with pytest.raises(psycopg.errors.UniqueViolation) as error:
        conn.execute(
            "insert into ceaseless.agent_run (job_id, agent, adapter, worker, attempt) "
            "values (%s, 'noop', 'noop', 'w2', 1)",
            (job,),
        )
    assert "agent_run_one_open_idx" in str(error.value)
