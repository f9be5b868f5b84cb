"""`ceaseless job list|show` and `status` as an operator uses them to find the jobs that need a
person: blocked jobs listed by default, filters, `job show` with every attempt and the why, ids
by unique prefix, and tables that stay one row per job whatever the error text."""

from __future__ import annotations

import json

import psycopg

from tests.e2e.support import run_cli
from tests.factories import claim_started, finish, make_agent, make_job

ERROR = "Not logged in\nPlease run /login\n(the agent's CLI said so)"


def _blocked_job(conn: psycopg.Connection) -> str:
    """A job whose one attempt could not authenticate: blocked, with a three-line error."""
    job_id = make_job(conn, prompt="summarise the changelog")
    run_id = claim_started(conn)[job_id]
    assert finish(conn, run_id, "auth_failed", error=ERROR) == "blocked"
    return str(job_id)


def test_job_list_shows_blocked_jobs_one_line_each_and_filters(
    db_url: str, conn: psycopg.Connection
) -> None:
    make_agent(conn)
    make_agent(conn, "other")
    blocked = _blocked_job(conn)
    waiting = str(make_job(conn, "other", prompt="later"))

    listed = run_cli(db_url, "job", "list")
    assert listed.returncode == 0, listed.stderr
    assert blocked in listed.stdout and waiting in listed.stdout
    # A header, its rule, and one line per job: the error's three lines stay in one cell.
    assert len(listed.stdout.strip().splitlines()) == 4
    assert "Not logged in ⏎ Please run /login" in listed.stdout

    def ids(*options: str) -> list[str]:
        result = run_cli(db_url, "job", "list", *options, "-o", "json")
        assert result.returncode == 0, result.stderr
        return [row["id"] for row in json.loads(result.stdout)]

    assert ids("--state", "blocked") == [blocked]
    assert ids("--state", "pending", "--state", "blocked") == [waiting, blocked]
    assert ids("--agent", "other") == [waiting]
    assert ids("--owner", "nobody") == []
    assert ids("--since", "1h", "--limit", "1") == [waiting]
    assert ids("--since", "2999-01-01") == []
    refused = run_cli(db_url, "job", "list", "--since", "yesterday-ish")
    assert refused.returncode == 1 and "yesterday-ish" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_job_show_gives_every_attempt_what_it_said_and_why_it_waits(
    db_url: str, conn: psycopg.Connection
) -> None:
    make_agent(conn)
    blocked = _blocked_job(conn)

    shown = run_cli(db_url, "job", "show", blocked[:8])
    assert shown.returncode == 0, shown.stderr
    assert "summarise the changelog" in shown.stdout and "auth_failed" in shown.stdout
    assert "blocked" in shown.stdout

    document = json.loads(run_cli(db_url, "job", "show", blocked, "-o", "json").stdout)
    assert document["job"]["state"] == "blocked" and document["job"]["last_error"]
    (attempt,) = document["runs"]
    assert attempt["attempt"] == 1 and attempt["outcome"] == "auth_failed"
    assert attempt["message"] == ERROR and attempt["took"] is not None
    assert [row["reason"] for row in document["why"]] == ["finished"]


def test_a_job_is_named_by_any_unique_prefix_of_its_id(
    db_url: str, conn: psycopg.Connection
) -> None:
    make_agent(conn)
    first = "df611f23-0000-4000-8000-000000000001"
    second = "df611f23-0000-4000-9000-000000000002"
    make_job(conn, id=first)
    make_job(conn, id=second)

    why = run_cli(db_url, "job", "why", "DF611F23-0000-4000-8000-0000000000-01")
    assert why.returncode == 0, why.stderr
    ambiguous = run_cli(db_url, "job", "why", "df611f23")
    assert ambiguous.returncode == 1
    assert (
        ambiguous.stderr.strip()
        == "error: 'df611f23' starts more than one job's id: give more of it"
    )
    cancelled = run_cli(db_url, "job", "cancel", "df611f230000400080000000000000000")
    assert cancelled.returncode == 1  # 33 digits: no id starts so
    assert run_cli(db_url, "job", "cancel", "df611f23-0000-4000-9").returncode == 0
    state = conn.execute("select state from ceaseless.job where id = %s", (second,)).fetchone()
    assert state == ("cancelled",)
    for too_short in ("df6", "zzzz"):
        result = run_cli(db_url, "job", "show", too_short)
        assert result.returncode == 1 and f"no job with id {too_short!r}" in result.stderr


def test_status_names_the_next_step_for_blocked_jobs_and_speaks_json(
    db_url: str, conn: psycopg.Connection
) -> None:
    make_agent(conn)
    _blocked_job(conn)

    status = run_cli(db_url, "status")
    assert status.returncode == 0, status.stderr
    assert "1 blocked jobs wait for a person: `ceaseless job list --state blocked`" in status.stdout

    document = json.loads(run_cli(db_url, "status", "-o", "json").stdout)
    assert set(document) == {"jobs", "lanes", "listeners", "relay", "stuck_jobs"}
    assert {"state": "blocked", "jobs": 1} in document["jobs"]
    assert document["lanes"][0]["agent"] == "noop"
