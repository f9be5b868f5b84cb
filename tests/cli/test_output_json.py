"""`--output json` on the list and show commands: one JSON document on stdout that a script
can read, the same data the tables show; errors stay one line on stderr with nothing on stdout."""

from __future__ import annotations

import json

import psycopg

from tests.e2e.support import run_cli


def _json(db_url: str, *args: str) -> object:
    result = run_cli(db_url, *args, "--output", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_lists_are_arrays_of_objects(db_url: str, conn: psycopg.Connection) -> None:
    conn.execute("insert into ceaseless.agents (name, adapter) values ('noop', 'noop')")
    (job_id,) = conn.execute(
        "insert into ceaseless.job (kind, agent, prompt) values ('task', 'noop', 'hi') returning id"
    ).fetchone()  # type: ignore[misc]
    jobs = _json(db_url, "job", "list")
    assert jobs == [
        {
            "id": str(job_id),
            "kind": "task",
            "agent": "noop",
            "state": "pending",
            "attempts": 0,
            "claimed_by": None,
            "last_error": None,
        }
    ]
    agents = _json(db_url, "agent", "list")
    assert isinstance(agents, list) and agents[0]["name"] == "noop"
    assert _json(db_url, "loop", "list") == []
    assert _json(db_url, "repo", "list") == []
    assert _json(db_url, "routine", "list") == []


def test_show_is_an_object_of_sections(db_url: str, conn: psycopg.Connection) -> None:
    conn.execute("insert into ceaseless.agents (name, adapter) values ('noop', 'noop')")
    conn.execute(
        "insert into ceaseless.routines (name, agent, trigger_type, trigger_config, action_type, "
        "action_config) values ('nightly', 'noop', 'cron', %s, 'lightweight', %s)",
        (
            json.dumps({"schedule": "0 3 * * *", "timezone": "UTC"}),
            json.dumps({"prompt": "check"}),
        ),
    )
    shown = _json(db_url, "routine", "show", "nightly", "-o", "json")
    assert isinstance(shown, dict) and set(shown) == {"routine", "runs", "next_slots"}
    assert shown["routine"]["trigger_config"] == {"schedule": "0 3 * * *", "timezone": "UTC"}
    assert shown["runs"] == [] and len(shown["next_slots"]) == 5
    assert all(slot["utc"].endswith("T03:00:00+00:00") for slot in shown["next_slots"])


def test_an_error_prints_nothing_on_stdout(db_url: str) -> None:
    result = run_cli(db_url, "routine", "show", "ghost", "--output", "json")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("error:") and len(result.stderr.strip().splitlines()) == 1


def test_an_unknown_format_is_refused_by_name(db_url: str) -> None:
    result = run_cli(db_url, "job", "list", "--output", "yaml")
    assert result.returncode == 2
    assert "Invalid value for '--output'" in result.stderr and "'yaml'" in result.stderr
