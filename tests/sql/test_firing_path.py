"""The one firing path: its guardrails, its locks, and how outcomes flow back.

Each test here pins a defect the firing path once had: a cooldown of zero that
skipped, a run closed at the wrong time, retries that bypassed the guardrails,
runs stranded by a disabled agent, refusals recorded under the wrong reason,
and fires and finishes that waited for each other.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from uuid import UUID

import psycopg
import pytest

from tests.factories import claim_started, complete_job, finish, make_agent, make_routine, run_of
from tests.webhook_signing import sign


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=100)


def _manual(conn: psycopg.Connection, routine: UUID) -> dict[str, object]:
    row = conn.execute("select ceaseless.run_routine(%s)", (routine,)).fetchone()
    assert row is not None
    return run_of(conn, row[0])


def _set_cap(conn: psycopg.Connection, cap: int) -> None:
    conn.execute(
        "update ceaseless.settings set value = to_jsonb(%s::integer) "
        "where key = 'routine_max_running'",
        (cap,),
    )


def _running_count(conn: psycopg.Connection) -> tuple[int, int]:
    """(what the shards say, what routine_runs says): the two must always agree."""
    row = conn.execute(
        "select (select sum(running) from ceaseless.routine_run_shards), "
        "       (select count(*) from ceaseless.routine_runs where status = 'running')"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_a_zero_cooldown_never_skips_even_against_a_later_finish_clock(
    conn: psycopg.Connection,
) -> None:
    # The finishing transaction's now() can be later than the event's: with
    # cooldown_secs = 0 that must not count as "too soon".
    routine = make_routine(conn, "r", "event", {"pattern": "x"}, cooldown_secs=0, max_concurrent=9)
    conn.execute(
        "update ceaseless.routines set last_run_at = now() + interval '2 seconds' where id = %s",
        (routine,),
    )
    conn.execute("insert into ceaseless.events (user_id, content) values ('alice', 'x')")
    rows = conn.execute(
        "select status, skip_reason from ceaseless.routine_runs where routine_id = %s", (routine,)
    ).fetchall()
    assert rows == [("running", None)]


def test_a_run_ends_at_its_jobs_finish_time_not_the_wall_clock(conn: psycopg.Connection) -> None:
    routine = make_routine(conn)
    run = _manual(conn, routine)
    runs = claim_started(conn)
    finished_at = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    conn.execute(
        "select ceaseless.finish_runs('w1', %s::jsonb, %s)",
        (
            f'[{{"run_id": "{runs[run["job_id"]]}", "outcome": "succeeded", '
            f'"final_message": "ROUTINE_OK"}}]',
            finished_at,
        ),
    )
    closed = run_of(conn, run["id"])  # type: ignore[arg-type]
    assert (closed["status"], closed["completed_at"]) == ("ok", finished_at)
    row = conn.execute(
        "select last_run_at from ceaseless.routines where id = %s", (routine,)
    ).fetchone()
    assert row == (finished_at,)


def test_a_reply_of_routine_ok_with_a_trailing_newline_is_ok(conn: psycopg.Connection) -> None:
    run = _manual(conn, make_routine(conn))
    complete_job(conn, run["job_id"], "succeeded", "ROUTINE_OK\n")  # type: ignore[arg-type]
    assert run_of(conn, run["id"])["status"] == "ok"  # type: ignore[arg-type]


def test_a_reply_of_only_whitespace_is_an_empty_reply(conn: psycopg.Connection) -> None:
    run = _manual(conn, make_routine(conn))
    job = run["job_id"]
    runs = claim_started(conn)
    assert finish(conn, runs[job], "succeeded", final_message="\n\t\u00a0\u3000") == "pending"  # type: ignore[index]
    row = conn.execute("select last_error from ceaseless.job where id = %s", (job,)).fetchone()
    assert row == ("the agent's reply was empty",)


def test_retrying_a_routine_job_is_a_new_run_whose_result_flows_back(
    conn: psycopg.Connection,
) -> None:
    routine = make_routine(conn, notify_on_success=True)
    first = _manual(conn, routine)
    job = first["job_id"]
    conn.execute("select ceaseless.cancel_job(%s)", (job,))
    assert run_of(conn, first["id"])["status"] == "failed"  # type: ignore[arg-type]

    conn.execute("select ceaseless.retry_job(%s)", (job,))
    row = conn.execute(
        "select state, routine_run_id from ceaseless.job where id = %s", (job,)
    ).fetchone()
    assert row is not None and row[0] == "pending" and row[1] != first["id"]
    retry = run_of(conn, row[1])
    assert (retry["status"], retry["trigger_type"], retry["job_id"]) == ("running", "manual", job)
    assert retry["trigger_detail"] == f"retry of job {job}"

    complete_job(conn, job, "succeeded", "ROUTINE_OK")  # type: ignore[arg-type]
    assert run_of(conn, row[1])["status"] == "ok"
    assert run_of(conn, first["id"])["status"] == "failed"  # type: ignore[arg-type]
    counters = conn.execute(
        "select run_count, consecutive_failures from ceaseless.routines where id = %s", (routine,)
    ).fetchone()
    assert counters == (2, 0)
    notified = conn.execute(
        "select kind from ceaseless.notifications where source_id = %s", (row[1],)
    ).fetchall()
    assert notified == [("success",)]
    assert _running_count(conn) == (0, 0)


def test_retrying_a_routine_job_respects_max_concurrent(conn: psycopg.Connection) -> None:
    routine = make_routine(conn, max_concurrent=1)
    first = _manual(conn, routine)
    conn.execute("select ceaseless.cancel_job(%s)", (first["job_id"],))
    assert _manual(conn, routine)["status"] == "running"
    with pytest.raises(psycopg.Error) as refused:
        conn.execute("select ceaseless.retry_job(%s)", (first["job_id"],))
    assert refused.value.sqlstate == "CE412"
    state = conn.execute(
        "select state from ceaseless.job where id = %s", (first["job_id"],)
    ).fetchone()
    assert state == ("cancelled",)


def test_retrying_a_routine_job_respects_the_global_cap(conn: psycopg.Connection) -> None:
    first = _manual(conn, make_routine(conn, "a"))
    conn.execute("select ceaseless.cancel_job(%s)", (first["job_id"],))
    _set_cap(conn, 1)
    assert _manual(conn, make_routine(conn, "b"))["status"] == "running"
    with pytest.raises(psycopg.Error) as refused:
        conn.execute("select ceaseless.retry_job(%s)", (first["job_id"],))
    assert refused.value.sqlstate == "CE415"
    assert _running_count(conn) == (1, 1)


def test_disabling_an_agent_closes_its_pending_routine_runs(conn: psycopg.Connection) -> None:
    make_agent(conn, "slow", max_concurrent=5)
    routine = make_routine(conn, agent="slow", max_concurrent=1)
    run = _manual(conn, routine)
    conn.execute("update ceaseless.agents set enabled = false where name = 'slow'")

    closed = run_of(conn, run["id"])  # type: ignore[arg-type]
    assert closed["status"] == "failed"
    assert "agent slow was disabled" in closed["result_summary"]
    state = conn.execute(
        "select state from ceaseless.job where id = %s", (run["job_id"],)
    ).fetchone()
    assert state == ("cancelled",)
    # Its slots are free again, and the next fire says why it does not run.
    assert _running_count(conn) == (0, 0)
    refused = _manual(conn, routine)
    assert (refused["status"], refused["skip_reason"]) == ("skipped", "agent_disabled")


def test_missed_cron_slots_leave_a_skipped_row_with_their_count(
    conn: psycopg.Connection,
) -> None:
    routine = make_routine(conn, "c", "cron", {"schedule": "* * * * *"})
    now = datetime.now(UTC)
    conn.execute(
        "update ceaseless.routines set next_fire_at = %s where id = %s",
        (now - timedelta(minutes=5), routine),
    )
    conn.execute(
        "select * from ceaseless.fire_cron(array['routine'], %s, %s, %s, %s)",
        ([routine], [now + timedelta(minutes=1)], [4], now),
    )
    rows = conn.execute(
        "select status, skip_reason, missed_slots from ceaseless.routine_runs "
        "where routine_id = %s order by status",
        (routine,),
    ).fetchall()
    assert rows == [("running", None, 4), ("skipped", "missed_slots", 4)]


def _webhook(conn: psycopg.Connection, body: bytes) -> str | None:
    secret = "a-signing-secret-of-some-length"
    sent = datetime.now(UTC).replace(microsecond=0)
    row = conn.execute(
        "select refused_sqlstate from ceaseless._receive_webhook('hook', %s, %s, %s)",
        (body, sign(secret, int(sent.timestamp()), body), sent),
    ).fetchone()
    assert row is not None
    return row[0]


@pytest.mark.parametrize(
    ("refusal", "sqlstate", "reason"),
    [
        (
            "update ceaseless.settings set value = '0' where key = 'routine_max_running'",
            "CE415",
            "global_cap",
        ),
        (
            "update ceaseless.routines set max_concurrent = 1; "
            "select ceaseless.run_routine(id) from ceaseless.routines",
            "CE412",
            "concurrency",
        ),
        ("update ceaseless.routines set enabled = false", "CE410", "disabled"),
        ("update ceaseless.agents set enabled = false", "CE410", "agent_disabled"),
    ],
)
def test_a_refused_webhook_is_recorded_with_the_reason_it_was_refused_for(
    conn: psycopg.Connection, refusal: str, sqlstate: str, reason: str
) -> None:
    routine = make_routine(
        conn,
        "hook",
        "webhook",
        {"path": "hook", "secret": "a-signing-secret-of-some-length"},
        max_concurrent=10,
    )
    for statement in refusal.split("; "):
        conn.execute(statement)  # type: ignore[arg-type]
    assert _webhook(conn, b"payload") == sqlstate
    rows = conn.execute(
        "select skip_reason from ceaseless.routine_runs "
        "where routine_id = %s and trigger_type = 'webhook'",
        (routine,),
    ).fetchall()
    assert rows == [(reason,)]


def test_the_running_count_matches_the_runs_through_fires_finishes_and_deletes(
    conn: psycopg.Connection,
) -> None:
    routines = [make_routine(conn, f"r{i}", max_concurrent=10) for i in range(3)]
    runs = [_manual(conn, r) for r in routines for _ in range(3)]
    assert _running_count(conn) == (9, 9)
    complete_job(conn, runs[0]["job_id"], "succeeded", "ROUTINE_OK")  # type: ignore[arg-type]
    conn.execute("select ceaseless.cancel_job(%s)", (runs[1]["job_id"],))
    assert _running_count(conn) == (7, 7)
    # Its runs go with it (ON DELETE CASCADE), running ones too.
    conn.execute("delete from ceaseless.routines where id = %s", (routines[2],))
    assert _running_count(conn) == (4, 4)


def _in_thread(url: str, statement: str, args: tuple[object, ...]) -> threading.Thread:
    def work() -> None:
        with psycopg.connect(url, autocommit=True) as other:
            other.execute("set statement_timeout = '10s'")
            other.execute(statement, args)  # type: ignore[arg-type]

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def test_a_fire_does_not_wait_for_an_open_finish_of_the_same_routines(
    conn: psycopg.Connection, db_url: str
) -> None:
    # Once, an event locked routine A, then the one gauge row, then routine B,
    # and a finish holding B waited for the gauge: a deadlock. Now a fire
    # locks neither routines nor a shared row, so it goes through while a
    # finish of both routines is still open.
    a = make_routine(conn, "a", "event", {"pattern": "go"}, max_concurrent=10)
    b = make_routine(conn, "b", "event", {"pattern": "go"}, max_concurrent=10)
    jobs = [_manual(conn, r)["job_id"] for r in (a, b)]
    with psycopg.connect(db_url) as finishing:
        for job in reversed(jobs):
            finishing.execute("select ceaseless.cancel_job(%s)", (job,))
        fire = _in_thread(
            db_url, "insert into ceaseless.events (user_id, content) values ('alice', 'go')", ()
        )
        fire.join(timeout=5)
        assert not fire.is_alive(), "the event waited for an open finish"
        finishing.commit()
    assert _running_count(conn) == (2, 2)


def test_a_finish_does_not_wait_for_an_open_fire_of_the_same_routine(
    conn: psycopg.Connection, db_url: str
) -> None:
    routine = make_routine(conn, "a", "event", {"pattern": "go"}, max_concurrent=10)
    job = _manual(conn, routine)["job_id"]
    with psycopg.connect(db_url) as firing:
        firing.execute("insert into ceaseless.events (user_id, content) values ('alice', 'go')")
        cancel = _in_thread(db_url, "select ceaseless.cancel_job(%s)", (job,))
        cancel.join(timeout=5)
        assert not cancel.is_alive(), "the finish waited for an open fire"
        firing.commit()
    assert _running_count(conn) == (1, 1)
