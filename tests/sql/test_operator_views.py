"""The operator views (functions/90_views.sql): what each row says, and why it is listed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg

from tests.factories import claim, claim_started, finish, make_agent, make_job, make_routine


def _row(conn: psycopg.Connection, query: str, params: Any = None) -> dict[str, Any]:
    cur = conn.execute(query, params)
    row = cur.fetchone()
    assert row is not None and cur.description is not None
    return {col.name: value for col, value in zip(cur.description, row, strict=True)}


def _stuck(conn: psycopg.Connection) -> dict[UUID, str]:
    rows = conn.execute("select id, reason from ceaseless.stuck_jobs").fetchall()
    return dict(rows)


def _governor(conn: psycopg.Connection, agent: str = "noop") -> dict[str, Any]:
    return _row(conn, "select * from ceaseless.governor_usage where agent = %s", (agent,))


# routine_status -------------------------------------------------------------


def test_routine_status_counts_a_run_that_has_been_running_for_over_a_day(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    routine = make_routine(conn)
    conn.execute(
        "insert into ceaseless.routine_runs (routine_id, trigger_type, status, started_at) "
        "values (%s, 'manual', 'running', now() - interval '25 hours'), "
        "       (%s, 'manual', 'running', now() - interval '1 hour')",
        (routine, routine),
    )
    status = _row(
        conn,
        "select running, runs_24h from ceaseless.routine_status where id = %s",
        (routine,),
    )
    # Both are running; only the younger one started within the last day.
    assert status == {"running": 2, "runs_24h": 1}


def test_routine_status_running_probes_the_partial_index_of_running_runs(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    routine = make_routine(conn)
    conn.execute(
        "insert into ceaseless.routine_runs (routine_id, trigger_type, status, started_at, "
        "completed_at) "
        "select %s, 'manual', 'ok', now() - g * interval '1 minute', now() "
        "from generate_series(1, 2000) g",
        (routine,),
    )
    conn.execute("analyze ceaseless.routine_runs")
    plan = conn.execute(
        "explain (format json) select running from ceaseless.routine_status"
    ).fetchone()
    assert plan is not None
    assert "idx_routine_runs_running" in str(plan[0])


# stuck_jobs -----------------------------------------------------------------


def test_an_old_job_claimed_just_now_is_not_stuck(conn: psycopg.Connection) -> None:
    make_agent(conn)
    hour_ago = datetime.now(UTC) - timedelta(hours=1)
    job = make_job(conn, created_at=hour_ago, run_after=hour_ago)
    assert claim(conn, p_lease_secs=3600) == [job]
    assert _stuck(conn) == {}


def test_a_job_claimed_over_five_minutes_ago_and_never_started_is_stuck(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    now = datetime.now(UTC)
    job = make_job(conn, run_after=now - timedelta(minutes=10))
    # Claimed six minutes ago with a long lease: the lease is fine, the start never came.
    assert claim(conn, p_now=now - timedelta(minutes=6), p_lease_secs=3600) == [job]
    assert _stuck(conn) == {job: "claimed but never started"}


def test_a_claim_records_when_it_was_taken(conn: psycopg.Connection) -> None:
    make_agent(conn)
    job = make_job(conn, run_after=datetime.now(UTC) - timedelta(minutes=1))
    at = datetime.now(UTC) - timedelta(seconds=30)
    assert claim(conn, p_now=at) == [job]
    row = conn.execute(
        "select claimed_at from ceaseless.job_queue where id = %s", (job,)
    ).fetchone()
    assert row == (at,)


# governor_usage -------------------------------------------------------------


def test_a_disabled_lane_has_no_free_slots(conn: psycopg.Connection) -> None:
    make_agent(conn, enabled=False)
    assert _governor(conn)["free_slots"] == 0


def test_a_paused_lane_has_no_free_slots_and_says_until_when(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=4)
    job = make_job(conn)
    run = claim_started(conn)[job]
    reset = datetime.now(UTC) + timedelta(hours=1)
    assert finish(conn, run, "rate_limited", rate_limit_reset_at=reset.isoformat()) == "pending"
    usage = _governor(conn)
    assert (usage["live"], usage["free_slots"]) == (0, 0)
    assert usage["paused_until"] == reset
    assert usage["pause_reason"] == "rate limit"


def test_a_lane_whose_pause_has_passed_has_its_slots_back(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=3)
    conn.execute(
        "insert into ceaseless.lane_pauses (agent, paused_until, reason) "
        "values ('noop', now() - interval '1 second', 'rate limit')"
    )
    usage = _governor(conn)
    assert (usage["free_slots"], usage["paused_until"], usage["pause_reason"]) == (3, None, None)
