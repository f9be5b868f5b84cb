"""`ceaseless agent add`: the database owns the defaults, and registering again changes only
what was given."""

from __future__ import annotations

import json

import psycopg

from tests.cli.column_defaults import shift_column_defaults
from tests.e2e.support import run_cli

LIMITS = ["timeout_secs", "max_concurrent", "window_secs"]


def test_agent_added_without_limits_gets_the_column_defaults(
    db_url: str, conn: psycopg.Connection
) -> None:
    defaults = shift_column_defaults(conn, "agents", LIMITS)
    added = run_cli(db_url, "agent", "add", "noop", "--adapter", "noop")
    assert added.returncode == 0, added.stderr
    row = conn.execute(
        "select timeout_secs, max_concurrent, window_secs from ceaseless.agents where name = 'noop'"
    ).fetchone()
    assert row == tuple(defaults[column] for column in LIMITS)


def test_registering_again_changes_only_the_options_given(
    db_url: str, conn: psycopg.Connection
) -> None:
    first = run_cli(
        db_url,
        "agent",
        "add",
        "script",
        "--adapter",
        "command",
        "--model",
        "opus",
        "--timeout-secs",
        "600",
        "--max-concurrent",
        "2",
        "--window-secs",
        "60",
        "--window-budget",
        "5",
        "--env",
        "TOKEN=abc",
        "--",
        "my-agent",
        "-v",
    )
    assert first.returncode == 0, first.stderr
    # No argv either: the stored one must survive, although a command adapter needs one.
    again = run_cli(
        db_url, "agent", "add", "script", "--adapter", "command", "--max-concurrent", "3"
    )
    assert again.returncode == 0, again.stderr
    row = conn.execute(
        "select argv, model, timeout_secs, max_concurrent, window_secs, window_budget, env, "
        "updated_at > created_at from ceaseless.agents where name = 'script'"
    ).fetchone()
    assert row == (["my-agent", "-v"], "opus", 600, 3, 60, 5, {"TOKEN": "abc"}, True)


def test_env_without_an_equals_sign_says_what_to_type(db_url: str) -> None:
    result = run_cli(db_url, "agent", "add", "noop", "--adapter", "noop", "--env", "TOKEN")
    assert result.returncode == 1
    assert "KEY=VALUE" in result.stderr and "'TOKEN'" in result.stderr
    assert "Traceback" not in result.stderr


def test_egress_is_given_entry_by_entry_and_checked_by_the_database(
    db_url: str, conn: psycopg.Connection
) -> None:
    added = run_cli(db_url, "agent", "add", "noop", "--adapter", "noop")
    assert added.returncode == 0, added.stderr
    (default,) = conn.execute("select egress from ceaseless.agents where name = 'noop'").fetchone()
    assert "api.anthropic.com" in default
    given = ["--egress", "api.example.com", "--egress", "git.example.com:8443"]
    again = run_cli(db_url, "agent", "add", "noop", "--adapter", "noop", *given)
    assert again.returncode == 0, again.stderr
    row = conn.execute("select egress from ceaseless.agents where name = 'noop'").fetchone()
    assert row == (["api.example.com", "git.example.com:8443"],)
    bad = run_cli(
        db_url, "agent", "add", "noop", "--adapter", "noop", "--egress", "none", "--egress", "x.com"
    )
    assert bad.returncode != 0
    assert "agents.egress" in bad.stderr and "'none' stands alone" in bad.stderr


def test_agent_show_disable_enable_and_delete(db_url: str, conn: psycopg.Connection) -> None:
    added = run_cli(db_url, "agent", "add", "script", "--adapter", "command",
                    "--env", "API_KEY=s3cret", "--", "my-agent", "-v")  # fmt: skip
    assert added.returncode == 0, added.stderr

    shown = run_cli(db_url, "agent", "show", "script", "-o", "json")
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert document["agent"]["argv"] == ["my-agent", "-v"]
    assert document["agent"]["env_names"] == ["API_KEY"] and "s3cret" not in shown.stdout
    assert document["lane"]["free_slots"] == document["agent"]["max_concurrent"]
    listed = json.loads(run_cli(db_url, "agent", "list", "-o", "json").stdout)
    assert listed[0]["argv"] == ["my-agent", "-v"]

    assert run_cli(db_url, "agent", "disable", "script").stdout == "agent script disabled\n"
    enabled = "select enabled from ceaseless.agents where name = 'script'"
    assert conn.execute(enabled).fetchone() == (False,)
    assert run_cli(db_url, "agent", "enable", "script").returncode == 0
    assert conn.execute(enabled).fetchone() == (True,)

    conn.execute("insert into ceaseless.job (kind, agent, prompt) values ('task', 'script', 'x')")
    kept = run_cli(db_url, "agent", "delete", "script")
    assert kept.returncode == 1
    assert "named by 1 jobs and 0 routines" in kept.stderr and "agent disable script" in kept.stderr
    conn.execute("delete from ceaseless.job")
    assert run_cli(db_url, "agent", "delete", "script").returncode == 0
    assert conn.execute("select count(*) from ceaseless.agents").fetchone() == (0,)
    for verb in ("show", "disable", "delete"):
        missing = run_cli(db_url, "agent", verb, "ghost")
        assert missing.returncode == 1 and "no agent named 'ghost'" in missing.stderr
