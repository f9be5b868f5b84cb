"""What a run's end makes of its job (_job_state_after), and who hears of a blocked job.

One rule maps an outcome to the job's next state, for finish_runs and expire_leases alike. A job
blocked on what only a person can fix (a missing login, a forge run's question) is announced by
a trigger on the job's move into blocked (_tg_job_ended), whichever statement moved it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
import pytest

from tests.factories import claim_started, finish, make_agent, make_job

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("outcome", "attempts", "reset", "state"),
    [
        ("succeeded", 3, False, "delivered"),
        ("budget_exhausted", 1, False, "blocked"),
        ("output_budget_exhausted", 1, False, "blocked"),
        ("auth_failed", 3, False, "blocked"),
        ("needs_human", 1, False, "blocked"),
        ("cancelled", 1, False, "cancelled"),
        ("rate_limited", 3, True, "pending"),
        ("rate_limited", 1, False, "pending"),
        ("rate_limited", 3, False, "failed"),
        ("failed", 1, False, "pending"),
        ("failed", 3, False, "failed"),
        ("failed", 3, True, "failed"),
        ("timed_out", 2, False, "pending"),
        ("timed_out", 3, False, "failed"),
        ("lease_expired", 2, False, "pending"),
        ("lease_expired", 3, False, "abandoned"),
    ],
)
def test_an_outcome_sends_its_job_to_one_state(
    conn: psycopg.Connection, outcome: str, attempts: int, reset: bool, state: str
) -> None:
    row = conn.execute(
        "select ceaseless._job_state_after(%s, %s, 3, %s)",
        (outcome, attempts, T0 if reset else None),
    ).fetchone()
    assert row == (state,)


def _started(conn: psycopg.Connection, **job: Any) -> tuple[UUID, UUID]:
    job_id = make_job(conn, run_after=T0, **job)
    return job_id, claim_started(conn, p_now=T0)[job_id]


def _notifications(conn: psycopg.Connection) -> list[tuple[Any, ...]]:
    return conn.execute(
        "select source_table, source_id, kind, channel, recipient, subject, body, user_id "
        "from ceaseless.notifications order by created_at, subject"
    ).fetchall()


def test_a_failed_run_that_names_a_reset_on_its_last_attempt_ends_the_job(
    conn: psycopg.Connection,
) -> None:
    # Only a rate limit waits for its reset; a failure naming one is a
    # failure, and a failed job holds no lease and is finished.
    make_agent(conn, max_attempts=1)
    job, run = _started(conn)
    assert finish(conn, run, "failed", rate_limit_reset_at=T0 + timedelta(minutes=5)) == "failed"
    row = conn.execute(
        "select claimed_by, finished_at is not null from ceaseless.job where id = %s", (job,)
    ).fetchone()
    assert row == ("w1", True)


def test_a_missing_login_blocks_the_job_and_tells_its_owner_once(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, "claude")
    job, run = _started(conn, agent="claude", user_id="alice")

    assert finish(conn, run, "auth_failed", error="Not logged in · Please run /login") == "blocked"

    assert _notifications(conn) == [
        (
            "job",
            job,
            "attention",
            None,
            None,
            f"job {job} blocked: agent claude could not authenticate",
            "Not logged in · Please run /login\n\nLog the agent's CLI in (or fix its API key in "
            f"agents.env), then run the job again: select ceaseless.retry_job('{job}');",
            "alice",
        )
    ]
    # A blocked job written again (its forge labels, its error) is no new block.
    conn.execute(
        "update ceaseless.job set labels_synced_at = now(), last_error = 'x' where id = %s", (job,)
    )
    assert len(_notifications(conn)) == 1


def test_a_missing_login_without_a_word_says_so_and_a_long_error_is_cut(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    quiet, quiet_run = _started(conn)
    loud, loud_run = _started(conn)
    finish(conn, quiet_run, "auth_failed")
    # Cut at 2000 characters: the error carries the login advice (which OS
    # user, which HOME, which command), longer than a bare CLI message.
    finish(conn, loud_run, "auth_failed", error="e" * 2100)

    bodies = dict(conn.execute("select source_id, body from ceaseless.notifications").fetchall())
    assert bodies[quiet].startswith("no detail given\n\nLog the agent's CLI in")
    assert bodies[loud].startswith("e" * 2000 + "\n\n")


def test_a_run_asking_for_a_human_blocks_the_job_with_its_reason(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    job, run = _started(conn, user_id="bob")

    assert finish(conn, run, "needs_human", error="Which database?") == "blocked"

    assert _notifications(conn) == [
        (
            "job",
            job,
            "attention",
            None,
            None,
            f"job {job} blocked: the agent asks for a human",
            "Which database?\n\nReply, and the agent resumes its session with your reply as "
            f'its prompt:\n  ceaseless job reply {job} "your answer"\n'
            f"  select ceaseless.reply_job('{job}', 'your answer');",
            "bob",
        )
    ]


def test_a_spent_budget_blocks_with_a_notification_saying_how_to_raise_it(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    job, run = _started(conn)
    assert finish(conn, run, "budget_exhausted", error="error_max_turns") == "blocked"
    ((*_, subject, body, _owner),) = _notifications(conn)
    assert subject == f"job {job} blocked: agent noop spent its budget"
    assert body.startswith("error_max_turns\n\nRaise its ceiling and it resumes its session:")
    assert f"select ceaseless.raise_job_budget('{job}', <usd>);" in body
    assert f"select ceaseless.reply_job('{job}', 'your answer');" in body


def test_a_job_blocked_by_hand_after_a_missing_login_is_announced_by_its_run(
    conn: psycopg.Connection,
) -> None:
    # The trigger, not finish_runs, announces the block: a run closed and its
    # job blocked by any statement is told the same way.
    make_agent(conn)
    job, run = _started(conn)
    conn.execute(
        "update ceaseless.agent_run set outcome = 'auth_failed', finished_at = %s, "
        "error = 'token expired' where id = %s",
        (T0, run),
    )
    assert _notifications(conn) == []
    conn.execute(
        "update ceaseless.job set state = 'blocked', finished_at = %s where id = %s", (T0, job)
    )
    (notification,) = _notifications(conn)
    assert notification[5] == f"job {job} blocked: agent noop could not authenticate"
    assert notification[6].startswith("token expired\n\n")


def test_retrying_and_blocking_again_tells_again(conn: psycopg.Connection) -> None:
    make_agent(conn)
    job, run = _started(conn)
    finish(conn, run, "auth_failed", error="first")
    conn.execute("select ceaseless.retry_job(%s, %s)", (job, T0 + timedelta(minutes=1)))
    rerun = claim_started(conn, p_now=T0 + timedelta(minutes=1))[job]
    finish(conn, rerun, "auth_failed", error="second")

    bodies = [
        body.split("\n")[0]
        for (body,) in conn.execute(
            "select body from ceaseless.notifications order by created_at, body"
        )
    ]
    assert sorted(bodies) == ["first", "second"]
