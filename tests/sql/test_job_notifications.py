"""Who hears of a job that ends for good: its agent's notify_on_* flags and notify_channel
(_tg_job_ended), once per failure, with the retry that works."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import psycopg
import pytest

from tests.factories import claim_started, finish, make_agent, make_job, make_routine
from tests.sql.topology import diamond, job_of, run_node, start_run

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def _started(conn: psycopg.Connection, **job: Any) -> tuple[UUID, UUID]:
    job_id = make_job(conn, run_after=T0, **job)
    return job_id, claim_started(conn, p_now=T0)[job_id]


def _notifications(conn: psycopg.Connection) -> list[tuple[Any, ...]]:
    return conn.execute(
        "select source_table, source_id, kind, channel, subject, body, user_id "
        "from ceaseless.notifications order by created_at, subject"
    ).fetchall()


def test_a_plain_job_that_fails_for_good_tells_its_owner_with_the_retry(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, max_attempts=1)
    job, run = _started(conn, user_id="alice")
    assert finish(conn, run, "failed", error="exit 3: tests failed") == "failed"
    assert _notifications(conn) == [
        (
            "job",
            job,
            "failure",
            None,
            f"job {job} failed: agent noop",
            "exit 3: tests failed\n\nIt used up its attempts. Run it again: "
            f"select ceaseless.retry_job('{job}');",
            "alice",
        )
    ]


def test_a_failure_with_attempts_left_tells_nobody(conn: psycopg.Connection) -> None:
    make_agent(conn, max_attempts=2)
    _, run = _started(conn)
    assert finish(conn, run, "failed", error="flaky") == "pending"
    assert _notifications(conn) == []


def test_the_agents_flags_and_channel_choose_what_is_told_and_where(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, max_attempts=1)
    conn.execute(
        "update ceaseless.settings set value = "
        """'{"default": {"type": "log"}, "ops": {"type": "log"}}' """
        "where key = 'notification_sinks'"
    )
    conn.execute(
        "update ceaseless.agents set notify_channel = 'ops', notify_on_abandoned = true "
        "where name = 'noop'"
    )
    abandoned, run = _started(conn)
    assert finish(conn, run, "lease_expired") == "abandoned"
    conn.execute("update ceaseless.agents set notify_on_failed = false where name = 'noop'")
    _, run = _started(conn)
    assert finish(conn, run, "failed") == "failed"

    ((source, source_id, kind, channel, subject, body, _),) = _notifications(conn)
    assert (source, source_id, kind, channel) == ("job", abandoned, "failure", "ops")
    assert subject == f"job {abandoned} abandoned: agent noop"
    assert "lease expired" in body and f"retry_job('{abandoned}')" in body


def test_abandoned_jobs_are_quiet_by_default_and_blocked_ones_can_be_silenced(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, max_attempts=1)
    _, run = _started(conn)
    assert finish(conn, run, "lease_expired") == "abandoned"
    conn.execute("update ceaseless.agents set notify_on_blocked = false where name = 'noop'")
    _, run = _started(conn)
    assert finish(conn, run, "auth_failed", error="Not logged in") == "blocked"
    assert _notifications(conn) == []


def test_a_routine_job_that_fails_is_told_once_by_its_routine(conn: psycopg.Connection) -> None:
    make_agent(conn, max_attempts=1)
    routine = make_routine(conn)
    row = conn.execute("select ceaseless.run_routine(%s)", (routine,)).fetchone()
    assert row is not None
    job = conn.execute(
        "select id from ceaseless.job where routine_run_id = %s", (row[0],)
    ).fetchone()
    assert job is not None
    conn.execute("update ceaseless.job set max_attempts = 1 where id = %s", (job[0],))
    run = claim_started(conn)[job[0]]
    assert finish(conn, run, "failed", error="boom") == "failed"
    assert [(n[0], n[2]) for n in _notifications(conn)] == [("routine_runs", "failure")]


def test_a_loop_node_job_that_fails_is_told_by_its_run_not_as_a_job(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, max_attempts=1)
    run = start_run(conn, diamond())
    assert run_node(conn, run, "A", "failed", error="boom") == "failed"
    assert [n for n in _notifications(conn) if n[0] == "job"] == []


def test_a_blocked_loop_node_names_the_retry_that_works_in_its_live_run(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    run = start_run(conn, diamond())
    job = job_of(conn, run, "A")
    assert run_node(conn, run, "A", "auth_failed", error="Not logged in") == "blocked"
    ((_, source_id, kind, _, subject, body, _),) = _notifications(conn)
    assert (source_id, kind) == (job, "attention")
    assert subject == f"job {job} blocked: agent noop could not authenticate"
    assert body.endswith(f"then run the job again: select ceaseless.retry_job('{job}');")
    # The run waits with its node rather than failing ...
    assert conn.execute(
        "select r.status, n.state from ceaseless.topology_runs r "
        "join ceaseless.topology_nodes n on n.topology_run_id = r.id "
        "where r.id = %s and n.node_id = 'A'",
        (run,),
    ).fetchone() == ("running", "blocked")
    # ... so the advice works: the job is pending again, its node queued.
    conn.execute(f"select ceaseless.retry_job('{job}')")
    assert conn.execute(
        "select j.state, n.state from ceaseless.job j "
        "join ceaseless.topology_nodes n on n.job_id = j.id where j.id = %s",
        (job,),
    ).fetchone() == ("pending", "queued")


@pytest.mark.parametrize("channel", ["", None])
def test_an_empty_channel_name_is_refused(conn: psycopg.Connection, channel: str | None) -> None:
    make_agent(conn)
    if channel is None:
        conn.execute("update ceaseless.agents set notify_channel = null where name = 'noop'")
        return
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute(
            "update ceaseless.agents set notify_channel = %s where name = 'noop'", (channel,)
        )
