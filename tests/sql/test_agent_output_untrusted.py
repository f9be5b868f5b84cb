"""What an agent prints is not trusted: reset times are clamped, session ids must be
resumable, and an agent that cannot log in blocks its job for a person.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest

from listener.database.migrate import migrate, sql_root
from tests.factories import claim_started, make_agent, make_job

# Claude Code prints UUIDs, opencode ses_ and 26 letters or digits.
CLAUDE_SESSION = "2e9efa04-03b0-4d19-8375-7bd5817c3e8b"
OPENCODE_SESSION = "ses_dcfda6cdfffephB54bHuC7SIsm"
YEAR_9999 = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)


def _finish_at(
    conn: psycopg.Connection, run: UUID, outcome: str, now: datetime, **fields: Any
) -> str:
    payload = json.dumps([{"run_id": str(run), "outcome": outcome, **fields}], default=str)
    row = conn.execute(
        "select job_state from ceaseless.finish_runs('w1', %s::jsonb, %s)", (payload, now)
    ).fetchone()
    assert row is not None
    return row[0]


def _started(conn: psycopg.Connection, **job: Any) -> tuple[UUID, UUID]:
    make_agent(conn)
    job_id = make_job(conn, **job)
    return job_id, claim_started(conn)[job_id]


def _pause(conn: psycopg.Connection) -> datetime | None:
    row = conn.execute(
        "select paused_until from ceaseless.lane_pauses where agent = 'noop'"
    ).fetchone()
    return None if row is None else row[0]


def _job(conn: psycopg.Connection, job: UUID) -> tuple[Any, ...]:
    row = conn.execute(
        "select state, attempts, run_after, last_error from ceaseless.job where id = %s", (job,)
    ).fetchone()
    assert row is not None
    return tuple(row)


# --- rate-limit resets are clamped ----------------------------------------------


def test_a_reset_in_the_year_9999_pauses_the_lane_for_one_day_at_most(
    conn: psycopg.Connection,
) -> None:
    job, run = _started(conn)
    now = datetime.now(UTC) + timedelta(seconds=1)

    state = _finish_at(conn, run, "rate_limited", now, rate_limit_reset_at=YEAR_9999.isoformat())

    assert state == "pending"
    assert _pause(conn) == now + timedelta(days=1)
    assert _job(conn, job)[:3] == ("pending", 0, now + timedelta(days=1))
    (stored,) = conn.execute(
        "select rate_limit_reset_at from ceaseless.agent_run where id = %s", (run,)
    ).fetchone() or (None,)
    assert stored == now + timedelta(days=1)


def test_the_ceiling_is_the_rate_limit_max_wait_secs_setting(conn: psycopg.Connection) -> None:
    conn.execute(
        "update ceaseless.settings set value = '600' where key = 'rate_limit_max_wait_secs'"
    )
    job, run = _started(conn)
    now = datetime.now(UTC) + timedelta(seconds=1)

    _finish_at(conn, run, "rate_limited", now, rate_limit_reset_at=YEAR_9999.isoformat())

    assert _pause(conn) == now + timedelta(minutes=10)
    assert _job(conn, job)[2] == now + timedelta(minutes=10)


def test_a_reset_within_the_ceiling_is_kept_as_reported(conn: psycopg.Connection) -> None:
    job, run = _started(conn)
    now = datetime.now(UTC) + timedelta(seconds=1)
    reset = now + timedelta(hours=5)

    _finish_at(conn, run, "rate_limited", now, rate_limit_reset_at=reset.isoformat())

    assert _pause(conn) == reset
    assert _job(conn, job)[2] == reset


# --- resume_session_id must be resumable ----------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        "--dangerously-skip-permissions",
        "-r",
        "sess-42",
        CLAUDE_SESSION + "x",
        "ses_short",
        OPENCODE_SESSION + " --fork",
        "2e9efa04 03b0 4d19 8375 7bd5817c3e8b",
    ],
)
def test_a_job_with_a_session_id_no_cli_can_resume_is_refused_naming_field_and_value(
    conn: psycopg.Connection, bad: str
) -> None:
    make_agent(conn)
    with pytest.raises(psycopg.Error) as error:
        make_job(conn, resume_session_id=bad)
    assert error.value.sqlstate == "CE422"
    message = str(error.value)
    assert message.startswith("job.resume_session_id: must be a Claude Code session id (a UUID)")
    assert json.dumps(bad) in message
    assert error.value.diag.column_name == "resume_session_id"
    assert conn.execute("select count(*) from ceaseless.job").fetchone() == (0,)


def test_the_bad_value_in_the_error_is_bounded(conn: psycopg.Connection) -> None:
    make_agent(conn)
    with pytest.raises(psycopg.Error) as error:
        make_job(conn, resume_session_id="a" * 10_000)
    assert error.value.sqlstate == "CE422"
    assert len(str(error.value)) < 400


def test_an_update_to_a_session_id_no_cli_can_resume_is_refused(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    job = make_job(conn, resume_session_id=CLAUDE_SESSION)
    with pytest.raises(psycopg.Error) as error:
        conn.execute(
            "update ceaseless.job set resume_session_id = '--fork-session' where id = %s", (job,)
        )
    assert error.value.sqlstate == "CE422"
    assert conn.execute(
        "select resume_session_id from ceaseless.job where id = %s", (job,)
    ).fetchone() == (CLAUDE_SESSION,)


@pytest.mark.parametrize("good", [CLAUDE_SESSION, CLAUDE_SESSION.upper(), OPENCODE_SESSION])
def test_claude_and_opencode_session_ids_are_accepted(conn: psycopg.Connection, good: str) -> None:
    make_agent(conn)
    job = make_job(conn, resume_session_id=good)
    assert conn.execute(
        "select resume_session_id from ceaseless.job where id = %s", (job,)
    ).fetchone() == (good,)


def test_the_check_constraint_holds_the_rule_where_the_trigger_is_skipped(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    with conn.transaction():
        # A replica-mode session skips ordinary triggers; the CHECK still holds.
        conn.execute("set local session_replication_role = replica")
        with pytest.raises(psycopg.errors.CheckViolation) as error, conn.transaction():
            make_job(conn, resume_session_id="--dangerously-skip-permissions")
        assert "resume_session_id_resumable" in str(error.value)


@pytest.mark.parametrize("outcome", ["lease_expired", "rate_limited"])
def test_a_reported_session_no_cli_can_resume_is_not_handed_to_the_job(
    conn: psycopg.Connection, outcome: str
) -> None:
    job, run = _started(conn, resume_session_id=CLAUDE_SESSION)
    # Plausible for agent_run (what the agent said), not resumable.
    conn.execute("select ceaseless.note_sessions('w1', %s, %s)", ([run], ["sess-1"]))

    state = _finish_at(conn, run, outcome, datetime.now(UTC), session_id="sess-2")

    assert state == "pending"
    assert conn.execute(
        "select resume_session_id from ceaseless.job where id = %s", (job,)
    ).fetchone() == (CLAUDE_SESSION,)
    assert conn.execute(
        "select session_id from ceaseless.agent_run where id = %s", (run,)
    ).fetchone() == ("sess-2",)


@pytest.mark.parametrize("how", ["expire", "release"])
def test_lease_sweeps_hand_over_only_resumable_sessions(conn: psycopg.Connection, how: str) -> None:
    job, run = _started(conn)
    conn.execute("select ceaseless.note_sessions('w1', %s, %s)", ([run], ["sess-1"]))
    if how == "expire":
        later = datetime.now(UTC) + timedelta(hours=1)
        assert conn.execute("select ceaseless.expire_leases(%s)", (later,)).fetchone() == (1,)
    else:
        assert conn.execute("select ceaseless.release_jobs('w1', %s)", ([job],)).fetchone() == (1,)
    assert conn.execute(
        "select state, resume_session_id from ceaseless.job where id = %s", (job,)
    ).fetchone() == ("pending", None)


# --- an agent that cannot log in blocks its job for a person ----------------------


def test_an_auth_failure_blocks_the_job_keeps_its_attempt_and_notifies(
    conn: psycopg.Connection,
) -> None:
    job, run = _started(conn)
    now = datetime.now(UTC) + timedelta(seconds=1)
    error = "success: Not logged in · Please run /login"

    state = _finish_at(conn, run, "auth_failed", now, error=error, exit_status=1)

    assert state == "blocked"
    blocked, attempts, _, last_error = _job(conn, job)
    assert (blocked, attempts, last_error) == ("blocked", 0, error)
    notes = conn.execute(
        "select source_table, source_id, kind, channel, subject, body, status "
        "from ceaseless.notifications"
    ).fetchall()
    assert len(notes) == 1
    source_table, source_id, kind, channel, subject, body, status = notes[0]
    assert (source_table, source_id, kind, channel, status) == (
        "job",
        job,
        "attention",
        None,
        "pending",
    )
    assert subject == f"job {job} blocked: agent noop could not authenticate"
    assert error in body and f"retry_job('{job}')" in body
    # Nothing retries it behind a person's back: no lane pause, no new claim.
    assert _pause(conn) is None
    assert claim_started(conn) == {}


def test_an_auth_failure_on_the_last_attempt_is_still_blocked_not_failed(
    conn: psycopg.Connection,
) -> None:
    job, run = _started(conn, max_attempts=1)
    assert _finish_at(conn, run, "auth_failed", datetime.now(UTC)) == "blocked"
    assert _job(conn, job)[:2] == ("blocked", 0)


def test_a_blocked_job_is_run_again_by_retry_job_after_the_login(
    conn: psycopg.Connection,
) -> None:
    job, run = _started(conn)
    _finish_at(conn, run, "auth_failed", datetime.now(UTC))
    conn.execute("select ceaseless.retry_job(%s)", (job,))
    assert job in claim_started(conn)


def test_other_failures_queue_no_job_notification(conn: psycopg.Connection) -> None:
    # A spent budget (budget_exhausted) does: a person must raise it or reply
    # (tests/sql/test_spend_ceilings.py).
    make_agent(conn, max_concurrent=5)
    jobs = [make_job(conn) for _ in range(2)]
    runs = claim_started(conn)
    now = datetime.now(UTC)
    for job, outcome in zip(jobs, ["failed", "succeeded"], strict=True):
        _finish_at(conn, runs[job], outcome, now)
    assert conn.execute("select count(*) from ceaseless.notifications").fetchone() == (0,)


# --- the migration --------------------------------------------------------------------


def test_migration_forgets_stored_sessions_no_cli_can_resume_and_keeps_the_rest(
    empty_db_url: str, tmp_path: Path
) -> None:
    (this,) = (sql_root() / "db").glob("*_agent_output_untrusted.sql")
    version = int(this.name[:4])
    shutil.copytree(sql_root() / "db", tmp_path / "db")
    (tmp_path / "functions").mkdir()
    later = [p for p in (tmp_path / "db").glob("*.sql") if int(p.name[:4]) >= version]
    for path in later:
        path.rename(path.with_suffix(".later"))
    migrate(empty_db_url, root=tmp_path)

    sessions = ["sess-42", CLAUDE_SESSION, OPENCODE_SESSION, None]
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute("insert into ceaseless.agents (name, adapter) values ('noop', 'noop')")
        for session in sessions:
            conn.execute(
                "insert into ceaseless.job (agent, kind, prompt, resume_session_id) "
                "values ('noop', 'task', 'p', %s)",
                (session,),
            )
    for path in later:
        path.with_suffix(".later").rename(path)
    shutil.rmtree(tmp_path / "functions")
    shutil.copytree(sql_root() / "functions", tmp_path / "functions")
    migrate(empty_db_url, root=tmp_path)

    with psycopg.connect(empty_db_url) as conn:
        kept = conn.execute(
            "select resume_session_id from ceaseless.job order by resume_session_id"
        ).fetchall()
        assert kept == [(CLAUDE_SESSION,), (OPENCODE_SESSION,), (None,), (None,)]
        assert conn.execute(
            "select value from ceaseless.settings where key = 'rate_limit_max_wait_secs'"
        ).fetchone() == (86400,)
