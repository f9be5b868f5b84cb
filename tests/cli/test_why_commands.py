"""`ceaseless job why`, `ceaseless routine why`, `ceaseless loop why`, and `routine add` without
--agent."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import psycopg
from psycopg.conninfo import make_conninfo

from tests.conftest import PASSWORD
from tests.e2e.support import run_cli
from tests.factories import claim_started, finish, make_agent, make_job, make_routine, pause_lane
from tests.sql.topology import graph, node


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


def test_loop_why_as_a_user_lists_its_reasons_and_someone_elses_loop_is_unknown(
    db_url: str, conn: psycopg.Connection, login_role: Callable[..., psycopg.Connection]
) -> None:
    make_agent(conn)
    alice = login_role("alice")
    bob = login_role("bob")
    row = alice.execute(
        "insert into ceaseless.loops (title, description, graph, task_template, triggers, "
        "enabled) values ('nightly notes', '', %s, 'write them', '{\"cron\": \"0 9 * * *\"}', "
        "false) returning id",
        (json.dumps(graph([node("A")])),),
    ).fetchone()
    assert row is not None

    def as_role(role: psycopg.Connection) -> str:
        return make_conninfo(db_url, user=role.info.user, password=PASSWORD)

    result = run_cli(as_role(alice), "loop", "why", "nightly notes")

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["reason", "clears_at", "detail"]
    assert lines[2].startswith("disabled") and "loop nightly notes is disabled" in lines[2]

    alice.execute("update ceaseless.loops set enabled = true where id = %s", (row[0],))
    scripted = run_cli(as_role(alice), "loop", "why", str(row[0]), "--output", "json")
    assert scripted.returncode == 0, scripted.stderr
    assert [r["reason"] for r in json.loads(scripted.stdout)] == ["not_scheduled"]

    # Bob cannot see it at all: by id, it is no loop of his.
    refused = run_cli(as_role(bob), "loop", "why", str(row[0]))
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        f"error: no loop with the id or title '{row[0]}' (see: ceaseless loop list)"
    )


def test_routine_why_shows_the_error_of_the_job_that_holds_it(
    db_url: str, conn: psycopg.Connection
) -> None:
    make_agent(conn)
    routine = make_routine(conn, name="nightly", max_concurrent=1)
    conn.execute("select ceaseless.run_routine(%s)", (routine,))
    (run_id,) = claim_started(conn).values()
    finish(conn, run_id, "failed", error="executable 'claude' not found")

    result = run_cli(db_url, "routine", "why", "nightly", "--user", "alice")

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[2].startswith("concurrency") and lines[3].startswith("not_due")
    assert "executable 'claude' not found" in lines[3]
