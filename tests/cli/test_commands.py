"""`ceaseless agent|job|status|migrate` against a real database, as a user types them."""

from __future__ import annotations

import json
import re

import psycopg

from tests.e2e.support import run_cli


def test_agent_add_and_list(db_url: str) -> None:
    added = run_cli(
        db_url, "agent", "add", "script", "--adapter", "command", "--", "my-agent", "-v"
    )
    assert added.returncode == 0, added.stderr
    listed = run_cli(db_url, "agent", "list")
    assert "script" in listed.stdout and "my-agent -v" in listed.stdout


def test_job_add_list_cancel_retry(db_url: str, conn: psycopg.Connection) -> None:
    run_cli(db_url, "agent", "add", "noop", "--adapter", "noop")
    added = run_cli(db_url, "job", "add", "noop", "hello")
    assert added.returncode == 0, added.stderr
    job_id = added.stdout.strip()
    assert job_id in run_cli(db_url, "job", "list").stdout
    assert run_cli(db_url, "job", "cancel", job_id).returncode == 0
    row = conn.execute("select state from ceaseless.job where id = %s", (job_id,)).fetchone()
    assert row == ("cancelled",)
    assert run_cli(db_url, "job", "retry", job_id).returncode == 0
    row = conn.execute("select state from ceaseless.job where id = %s", (job_id,)).fetchone()
    assert row == ("pending",)


def test_database_errors_are_shown_without_a_traceback(db_url: str) -> None:
    result = run_cli(db_url, "job", "add", "ghost", "hello")
    assert result.returncode == 1
    assert "error:" in result.stderr and "ghost" in result.stderr
    assert "Traceback" not in result.stderr
    cancelled = run_cli(db_url, "job", "cancel", "00000000-0000-0000-0000-000000000000")
    assert cancelled.returncode == 1 and "no job with id" in cancelled.stderr


def test_status_summarises_states_and_lanes(db_url: str) -> None:
    run_cli(db_url, "agent", "add", "noop", "--adapter", "noop", "--max-concurrent", "3")
    run_cli(db_url, "job", "add", "noop", "one")
    status = run_cli(db_url, "status")
    assert status.returncode == 0, status.stderr
    assert "pending" in status.stdout and "noop" in status.stdout


def test_status_says_when_relayed_announcements_wait_with_no_listener_to_send_them(
    db_url: str,
) -> None:
    run_cli(db_url, "agent", "add", "noop", "--adapter", "noop")
    with psycopg.connect(db_url, autocommit=True, options="-c ceaseless.notify=relay") as writer:
        writer.execute(
            "insert into ceaseless.job (kind, agent, prompt) values ('task', 'noop', 'x')"
        )
    quiet = run_cli(db_url, "status")
    assert quiet.returncode == 0, quiet.stderr
    assert "relayed announcements wait" not in quiet.stdout  # a listener has a moment yet
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("update ceaseless.announcements set created_at = now() - interval '90 s'")

    status = run_cli(db_url, "status")
    said = re.search(
        r"1 relayed announcements wait, the oldest for (\d+) s: no listener", status.stdout
    )
    assert said is not None, status.stdout
    assert 90 <= int(said.group(1)) < 150
    document = json.loads(run_cli(db_url, "status", "-o", "json").stdout)
    [relay] = document["relay"]
    assert relay["waiting"] == 1 and 90 <= relay["oldest_waited_s"] < 150


def test_migrate_dry_run_on_a_migrated_database_lists_nothing(db_url: str) -> None:
    result = run_cli(db_url, "migrate", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "no migrations to apply" in result.stdout
    assert "functions/ unchanged: not re-applied" in result.stdout
