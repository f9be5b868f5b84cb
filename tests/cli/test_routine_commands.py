"""`ceaseless routine …` against a real database."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg

from tests.cli.column_defaults import shift_column_defaults
from tests.e2e.support import run_cli


def test_routine_lifecycle_from_the_command_line(db_url: str, conn: psycopg.Connection) -> None:
    assert run_cli(db_url, "agent", "add", "noop", "--adapter", "noop").returncode == 0
    added = run_cli(
        db_url,
        "routine",
        "add",
        "nightly",
        "--agent",
        "noop",
        "--user",
        "alice",
        "--cron",
        "0 3 * * *",
        "--timezone",
        "Europe/Berlin",
        "--prompt",
        "Check the backups.",
    )
    assert added.returncode == 0, added.stderr
    routine_id = added.stdout.strip()

    listed = run_cli(db_url, "routine", "list")
    assert "nightly" in listed.stdout and "0 3 * * *" in listed.stdout

    ran = run_cli(db_url, "routine", "run", "nightly")
    assert ran.returncode == 0 and "running" in ran.stdout
    shown = run_cli(db_url, "routine", "show", "nightly")
    assert "Check the backups." in shown.stdout and "manual" in shown.stdout

    assert run_cli(db_url, "routine", "disable", "nightly").returncode == 0
    enabled = conn.execute(
        "select enabled from ceaseless.routines where id = %s", (routine_id,)
    ).fetchone()
    assert enabled == (False,)
    assert run_cli(db_url, "routine", "enable", routine_id).returncode == 0
    assert run_cli(db_url, "routine", "delete", "nightly").returncode == 0
    assert conn.execute("select count(*) from ceaseless.routines").fetchone() == (0,)


def test_bad_routine_is_refused_with_the_field_named(db_url: str) -> None:
    run_cli(db_url, "agent", "add", "noop", "--adapter", "noop")
    result = run_cli(
        db_url, "routine", "add", "bad", "--agent", "noop", "--cron", "61 * * * *", "--prompt", "p"
    )
    assert result.returncode == 1
    assert "trigger_config.schedule" in result.stderr and "61" in result.stderr
    assert "Traceback" not in result.stderr


def test_two_triggers_at_once_are_refused(db_url: str) -> None:
    result = run_cli(
        db_url,
        "routine",
        "add",
        "x",
        "--agent",
        "noop",
        "--cron",
        "* * * * *",
        "--event",
        "x",
        "--prompt",
        "p",
    )
    assert result.returncode == 1 and "choose one trigger" in result.stderr


def test_webhook_routine_from_the_command_line_keeps_its_secret_out_of_show(
    db_url: str,
) -> None:
    run_cli(db_url, "agent", "add", "noop", "--adapter", "noop")
    added = run_cli(
        db_url,
        "routine",
        "add",
        "hook",
        "--agent",
        "noop",
        "--webhook",
        "deploys",
        "--secret",
        "a-secret-of-enough-length",
        "--title",
        "t",
        "--description",
        "d",
    )
    assert added.returncode == 0, added.stderr
    shown = run_cli(db_url, "routine", "show", "hook")
    assert "deploys" in shown.stdout and "a-secret-of-enough-length" not in shown.stdout


def test_routine_added_without_guardrails_gets_the_column_defaults(
    db_url: str, conn: psycopg.Connection
) -> None:
    defaults = shift_column_defaults(conn, "routines", ["cooldown_secs", "max_concurrent"])
    run_cli(db_url, "agent", "add", "noop", "--adapter", "noop")
    added = run_cli(db_url, "routine", "add", "plain", "--agent", "noop", "--prompt", "p")
    assert added.returncode == 0, added.stderr
    row = conn.execute(
        "select cooldown_secs, max_concurrent from ceaseless.routines where name = 'plain'"
    ).fetchone()
    assert row == (defaults["cooldown_secs"], defaults["max_concurrent"])


def test_routine_guardrails_given_are_stored(db_url: str, conn: psycopg.Connection) -> None:
    run_cli(db_url, "agent", "add", "noop", "--adapter", "noop")
    added = run_cli(
        db_url,
        "routine",
        "add",
        "tight",
        "--agent",
        "noop",
        "--prompt",
        "p",
        "--cooldown",
        "0",
        "--max-concurrent",
        "7",
        "--dedup-window",
        "60",
    )
    assert added.returncode == 0, added.stderr
    row = conn.execute(
        "select cooldown_secs, max_concurrent, dedup_window_secs from ceaseless.routines "
        "where name = 'tight'"
    ).fetchone()
    assert row == (0, 7, 60)


def test_a_refused_run_is_printed_with_its_reason_and_exits_non_zero(
    db_url: str, conn: psycopg.Connection
) -> None:
    run_cli(db_url, "agent", "add", "noop", "--adapter", "noop")
    run_cli(db_url, "routine", "add", "nightly", "--agent", "noop", "--prompt", "p")
    run_cli(db_url, "routine", "disable", "nightly")

    refused = run_cli(db_url, "routine", "run", "nightly")

    assert refused.returncode == 1 and "skipped (disabled)" in refused.stdout
    skipped = conn.execute("select status, skip_reason from ceaseless.routine_runs").fetchall()
    assert skipped == [("skipped", "disabled")]


def test_a_bad_value_or_unknown_agent_is_one_line_naming_the_value(db_url: str) -> None:
    run_cli(db_url, "agent", "add", "noop", "--adapter", "noop")

    negative = run_cli(db_url, "routine", "add", "r", "--agent", "noop", "--prompt", "p",
                       "--cooldown", "-5")  # fmt: skip
    assert negative.returncode == 1
    assert negative.stderr.strip() == (
        'error: new row for relation "routines" violates check constraint '
        '"cooldown_secs_not_negative"; got cooldown_secs = -5'
    )
    for command in (
        ["routine", "add", "r", "--agent", "ghost", "--prompt", "p"],
        ["job", "add", "ghost", "hello"],
    ):
        refused = run_cli(db_url, *command)
        assert refused.returncode == 1
        assert "no agent named 'ghost' is registered" in refused.stderr
        assert "foreign key" not in refused.stderr and len(refused.stderr.splitlines()) == 1


def test_routine_add_takes_the_webhook_scheme(db_url: str, conn: psycopg.Connection) -> None:
    run_cli(db_url, "agent", "add", "noop", "--adapter", "noop")

    added = run_cli(db_url, "routine", "add", "on-push", "--agent", "noop", "--prompt", "p",
                    "--webhook", "gh-push", "--secret", "a-long-random-signing-secret",
                    "--scheme", "github")  # fmt: skip

    assert added.returncode == 0, added.stderr
    stored = conn.execute("select trigger_config ->> 'scheme' from ceaseless.routines").fetchone()
    assert stored == ("github",)
    refused = run_cli(db_url, "routine", "add", "other", "--agent", "noop", "--prompt", "p",
                      "--webhook", "other", "--secret", "s" * 32, "--scheme", "gitlab")  # fmt: skip
    assert refused.returncode == 1 and "must be one of ceaseless, github" in refused.stderr


def test_routine_add_takes_the_overlap_policy_and_debounce(
    db_url: str, conn: psycopg.Connection
) -> None:
    run_cli(db_url, "agent", "add", "noop", "--adapter", "noop")

    added = run_cli(db_url, "routine", "add", "on-push", "--agent", "noop", "--prompt", "p",
                    "--webhook", "gh-push", "--secret", "a-long-random-signing-secret",
                    "--overlap", "buffer_one", "--debounce", "30",
                    "--debounce-max", "300")  # fmt: skip

    assert added.returncode == 0, added.stderr
    stored = conn.execute(
        "select overlap_policy, debounce_secs, debounce_max_secs from ceaseless.routines"
    ).fetchone()
    assert stored == ("buffer_one", 30, 300)
    refused = run_cli(db_url, "routine", "add", "other", "--agent", "noop", "--prompt", "p",
                      "--debounce", "30", "--debounce-max", "10")  # fmt: skip
    assert refused.returncode == 1
    assert "routines.debounce_max_secs: must be at least debounce_secs (30)" in refused.stderr
    assert "10" in refused.stderr


def test_routine_and_loop_backfill_fire_the_slots_that_never_fired(
    db_url: str, conn: psycopg.Connection, tmp_path: Path
) -> None:
    run_cli(db_url, "agent", "add", "noop", "--adapter", "noop")
    run_cli(db_url, "routine", "add", "hourly", "--agent", "noop", "--prompt", "p",
            "--cron", "0 * * * *", "--max-concurrent", "10")  # fmt: skip
    window = ("--from", "2026-01-05T00:00", "--to", "2026-01-05T04:00")

    first = run_cli(db_url, "routine", "backfill", "hourly", *window, "--max", "3")
    assert first.returncode == 0, first.stderr
    assert "4 slots: 3 fired, 0 refused, 0 already fired, 1 over max" in first.stdout
    again = run_cli(db_url, "routine", "backfill", "hourly", *window, "-o", "json")
    assert again.returncode == 0, again.stderr
    outcomes = [row["outcome"] for row in json.loads(again.stdout)]
    assert outcomes == ["already_fired"] * 3 + ["fired"]
    assert conn.execute(
        "select count(*) from ceaseless.routine_runs where trigger_type = 'backfill'"
    ).fetchone() == (4,)

    future = run_cli(db_url, "routine", "backfill", "hourly", "--from", "2026-01-05",
                     "--to", "2999-01-01")  # fmt: skip
    assert future.returncode == 1
    assert "backfill_routine.p_to: must not be after now" in future.stderr

    graph = tmp_path / "graph.json"
    graph.write_text(json.dumps({"nodes": [{"id": "A", "agent": "noop", "prompt": "p"}]}))
    added = run_cli(db_url, "loop", "add", "--title", "hourly loop", "--graph", str(graph),
                    "--task", "t", "--cron", "0 * * * *")  # fmt: skip
    assert added.returncode == 0, added.stderr
    looped = run_cli(db_url, "loop", "backfill", "hourly loop", *window)
    assert looped.returncode == 0, looped.stderr
    assert "4 slots: 1 fired, 3 refused" in looped.stdout
    assert "live_iteration" in looped.stdout


def test_a_run_the_overlap_policy_keeps_is_printed_as_held_with_what_it_waits_for(
    db_url: str, conn: psycopg.Connection
) -> None:
    run_cli(db_url, "agent", "add", "noop", "--adapter", "noop")
    added = run_cli(db_url, "routine", "add", "nightly", "--agent", "noop", "--prompt", "p",
                    "--max-concurrent", "1", "--overlap", "buffer_one")  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert run_cli(db_url, "routine", "run", "nightly").returncode == 0

    held = run_cli(db_url, "routine", "run", "nightly")

    assert held.returncode == 0, held.stderr
    held_id = held.stdout.split()[0]
    assert held.stdout.strip() == f"{held_id} held (buffered: waits for concurrency)"
    assert conn.execute("select count(*) from ceaseless.held_fires").fetchone() == (1,)
