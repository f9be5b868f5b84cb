"""`ceaseless job why`, `ceaseless routine why`, and `routine add` without --agent."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import psycopg

from tests.e2e.support import run_cli
from tests.factories import make_agent, make_job, make_routine, pause_lane


def test_job_why_lists_every_reason_with_when_it_clears(
    db_url: str, conn: psycopg.Connection
) -> None:
    make_agent(conn)
    until = datetime.now(UTC) + timedelta(hours=1)
    pause_lane(conn, "noop", until, reason="rate limit")
    job = make_job(conn, run_after=until + timedelta(hours=1))

    result = run_cli(db_url, "job", "why", str(job))

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["reason", "clears_at", "detail"]
    assert lines[2].startswith("not_due") and lines[3].startswith("lane_paused")
    assert str(until) in lines[3] and "(rate limit)" in lines[3]

    scripted = run_cli(db_url, "job", "why", str(job), "--output", "json")
    assert scripted.returncode == 0, scripted.stderr
    reasons = json.loads(scripted.stdout)
    assert [r["reason"] for r in reasons] == ["not_due", "lane_paused"]
    assert datetime.fromisoformat(reasons[1]["clears_at"]) == until


def test_job_why_for_an_unknown_job_is_one_line_naming_it(db_url: str) -> None:
    missing = "00000000-0000-0000-0000-000000000007"

    result = run_cli(db_url, "job", "why", missing)

    assert result.returncode == 1
    assert result.stderr.strip() == f"error: explain_job: no job with id {missing}"


def test_routine_why_by_name(db_url: str, conn: psycopg.Connection) -> None:
    make_agent(conn)
    make_routine(conn, name="nightly", enabled=False)

    result = run_cli(db_url, "routine", "why", "nightly")

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[2].startswith("disabled")
    assert "routine nightly is disabled" in result.stdout


def test_routine_add_without_agent_takes_the_default_or_names_the_field(
    db_url: str, conn: psycopg.Connection
) -> None:
    make_agent(conn)
    args = ("routine", "add", "inbox", "--prompt", "Anything new?")

    refused = run_cli(db_url, *args)
    assert refused.returncode == 1
    assert refused.stderr.startswith("error: routines.agent: must name a registered agent")
    assert "Traceback" not in refused.stderr

    conn.execute("update ceaseless.settings set value = '\"noop\"' where key = 'default_agent'")
    added = run_cli(db_url, *args)
    assert added.returncode == 0, added.stderr
    row = conn.execute(
        "select agent from ceaseless.routines where id = %s", (added.stdout.strip(),)
    ).fetchone()
    assert row == ("noop",)
