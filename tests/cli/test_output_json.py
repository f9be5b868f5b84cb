"""`--output json` on the list and show commands: one JSON document on stdout that a script
can read, the same data the tables show; errors stay one line on stderr with nothing on stdout."""

from __future__ import annotations

import json
import re
from pathlib import Path

import psycopg

from tests.e2e.support import run_cli


def _json(db_url: str, *args: str) -> object:
    result = run_cli(db_url, *args, "--output", "json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    _assert_snake_case_keys(document, " ".join(args))
    return document


def _assert_snake_case_keys(document: object, command: str) -> None:
    """A script reads fields by name: a list's rows, a show's section names and each section's
    rows or record have snake_case identifiers for keys (values that are JSON data are not
    looked into)."""
    sections = document if isinstance(document, dict) else {"": document}
    for name, section in sections.items():
        rows = section if isinstance(section, list) else [section]
        keys = [name] if name else []
        keys += [key for row in rows if isinstance(row, dict) for key in row]
        for key in keys:
            assert re.fullmatch(r"[a-z][a-z0-9_]*", key), f"`{command}`: key {key!r}"


def test_lists_are_arrays_of_objects(db_url: str, conn: psycopg.Connection) -> None:
    conn.execute("insert into ceaseless.agents (name, adapter) values ('noop', 'noop')")
    (job_id, owner, created_at) = conn.execute(
        "insert into ceaseless.job (kind, agent, prompt) values ('task', 'noop', 'hi') "
        "returning id, user_id, created_at"
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
            "owner": owner,
            "created_at": created_at.isoformat(),
            "took": None,
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


def _keys(rows: object) -> list[str]:
    assert isinstance(rows, list) and rows, rows
    return list(rows[0])


def test_every_list_and_show_names_its_columns_as_its_table_does(
    db_url: str, conn: psycopg.Connection, tmp_path: Path
) -> None:
    """The key of each column, in order: what scripts read, whichever statement answers it."""
    conn.execute("insert into ceaseless.agents (name, adapter) values ('noop', 'noop')")
    graph = tmp_path / "graph.json"
    graph.write_text(json.dumps({"nodes": [{"id": "A", "agent": "noop", "prompt": "p"}]}))
    repo = ["repo", "add", "octo/hello", "--clone-url", "https://x.test/o/h.git"]
    for args in (
        ["routine", "add", "nightly", "--agent", "noop", "--prompt", "check"],
        ["loop", "add", "--title", "refine", "--task", "t", "--graph", str(graph)],
        [*repo, "--branch", "main", "--interval", "300"],
    ):
        assert run_cli(db_url, *args).returncode == 0
    assert run_cli(db_url, "routine", "run", "nightly").returncode == 0
    run_id = run_cli(db_url, "loop", "run", "refine").stdout.split()[0]
    run_cli(db_url, "loop", "run", "refine")  # skipped: an iteration is live

    assert _keys(_json(db_url, "agent", "list")) == [
        "name", "adapter", "argv", "model", "timeout", "max", "budget", "enabled"
    ]  # fmt: skip
    assert _keys(_json(db_url, "routine", "list")) == [
        "name", "user", "enabled", "trigger", "schedule", "next_fire_at", "last", "failures",
        "runs_24h", "skips_24h", "held",
    ]  # fmt: skip
    routine = _json(db_url, "routine", "show", "nightly")
    assert isinstance(routine, dict) and list(routine["routine"]) == [
        "name", "user", "enabled", "agent", "trigger", "trigger_config", "action",
        "action_config", "cooldown_secs", "max_concurrent", "dedup_window_secs", "overlap_policy",
        "debounce_secs", "debounce_max_secs", "next_fire_at", "last_run_at", "run_count",
        "consecutive_failures", "last_error",
    ]  # fmt: skip
    assert _keys(routine["runs"]) == [
        "started_at",
        "trigger",
        "status",
        "skip",
        "missed",
        "summary",
    ]
    assert _keys(_json(db_url, "loop", "list")) == [
        "id", "title", "owner", "enabled", "triggers", "policy", "iteration", "live", "last",
        "next_fire_at", "stopped", "skipped", "held",
    ]  # fmt: skip
    loop = _json(db_url, "loop", "show", "refine")
    assert isinstance(loop, dict) and list(loop["loop"]) == [
        "id", "title", "owner", "enabled", "cron", "timezone", "on_completion", "webhook",
        "repeat_policy", "policy_from_iteration", "current_iteration", "live_run_id",
        "live_run_status", "last_run_id", "last_run_status", "next_fire_at", "stopped_reason",
        "stopped_at", "skipped_fires", "last_error", "overlap_policy", "debounce_secs",
        "debounce_max_secs", "held_fires", "held_next_at", "min_interval_secs", "paced_until",
    ]  # fmt: skip
    assert _keys(loop["iterations"]) == [
        "iteration", "run", "status", "trigger", "parent", "started_at", "finished_at", "message"
    ]  # fmt: skip
    assert _keys(loop["skipped"]) == ["at", "trigger", "reason", "detail"]
    run = _json(db_url, "run", "show", run_id)
    assert isinstance(run, dict) and list(run["run"]) == [
        "id", "status", "loop_id", "iteration", "trigger", "skip_reason", "created_at",
        "started_at", "finished_at", "task", "final_message", "error",
    ]  # fmt: skip
    assert _keys(run["nodes"]) == [
        "node", "agent", "gate", "state", "upstream", "job", "attempts", "seconds", "approval",
        "decision", "output_or_error",
    ]  # fmt: skip
    assert _keys(_json(db_url, "repo", "list")) == [
        "id", "forge", "repo", "enabled", "quiet_now", "interval", "last_poll", "next_poll",
        "live_jobs", "last_error",
    ]  # fmt: skip
    repo = _json(db_url, "repo", "show", "octo/hello")
    assert isinstance(repo, dict) and list(repo["repo"]) == [
        "id", "forge", "owner", "repo", "api_url", "owner_role", "clone_url", "default_branch",
        "tokens_allowed", "enabled", "discover_label", "plan_label", "implement_label",
        "allowed_authors", "tracking_issue", "quiet_window", "quiet_now", "interval_asked_secs",
        "interval_used_secs", "last_polled_at", "next_poll_at", "last_error", "last_error_at",
        "live_jobs",
    ]  # fmt: skip
    job = run_cli(db_url, "job", "add", "noop", "hi").stdout.strip()
    for what in (["job", "why", job], ["routine", "why", "nightly"], ["loop", "why", "refine"]):
        assert _keys(_json(db_url, *what)) == ["reason", "clears_at", "detail"]
