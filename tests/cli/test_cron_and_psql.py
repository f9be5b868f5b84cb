"""`ceaseless cron preview`, the next slots in `routine show`, and `db psql` taking psql's own
arguments without `--`, run as a user types them."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest

from tests.e2e.support import ROOT, run_cli


def test_cron_preview_skips_the_slot_a_spring_forward_removes(db_url: str) -> None:
    result = run_cli(
        db_url, "cron", "preview", "30 2 * * *", "--tz", "Europe/Berlin", "-n", "3",
        "--after", "2026-03-28T00:00+01:00",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    # Aligned columns, whichever of CET and CEST a slot falls in.
    assert result.stdout.splitlines() == [
        "Europe/Berlin        zone  day  UTC",
        "-------------------  ----  ---  -------------------",
        "2026-03-28 02:30:00  CET   Sat  2026-03-28 01:30:00",
        "2026-03-30 02:30:00  CEST  Mon  2026-03-30 00:30:00",
        "2026-03-31 02:30:00  CEST  Tue  2026-03-31 00:30:00",
    ]


def test_cron_preview_reads_seconds_as_the_sixth_field(db_url: str) -> None:
    result = run_cli(
        db_url, "cron", "preview", "0 9 * * * 30", "-n", "2", "--after", "2026-12-01T00:00Z"
    )
    assert result.stdout.splitlines()[2:] == [
        "2026-12-01 09:00:30  UTC   Tue  2026-12-01 09:00:30",
        "2026-12-02 09:00:30  UTC   Wed  2026-12-02 09:00:30",
    ]


def test_cron_preview_errors_are_one_line_naming_what_is_wrong(db_url: str) -> None:
    for args, expected in (
        (["every day"], "error: schedule: expected 5 fields"),
        (["@daily", "--tz", "Mars/Base"], 'unknown time zone "Mars/Base"'),
        (["@daily", "--after", "tomorrow"], "error: --after: 'tomorrow' is not an ISO 8601"),
        (["@daily", "--after", "2026-12-01T00:00"], "has no UTC offset"),
    ):
        result = run_cli(db_url, "cron", "preview", *args)
        assert result.returncode == 1 and expected in result.stderr, result.stderr
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_cron_preview_refuses_what_storing_the_schedule_would_refuse(
    db_url: str, conn: psycopg.Connection
) -> None:
    # The database's rule, not a copy of it: a reversed range croniter would wrap.
    result = run_cli(db_url, "cron", "preview", "0 22-2 * * *")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip() == (
        'error: schedule: hour field "22-2": a range must run upwards, and 22 comes after 2: '
        "to wrap past the end of the field, write two ranges (22-23,0-2); "
        'got "0 22-2 * * *"'
    )
    conn.execute("insert into ceaseless.agents (name, adapter) values ('noop', 'noop')")
    with pytest.raises(psycopg.Error) as error:
        conn.execute(
            "insert into ceaseless.routines (name, agent, trigger_type, trigger_config, "
            "action_type, action_config) values ('late', 'noop', 'cron', %s, 'lightweight', %s)",
            (json.dumps({"schedule": "0 22-2 * * *"}), json.dumps({"prompt": "check"})),
        )
    rule = result.stderr.strip().removeprefix("error: schedule: ")
    assert error.value.diag.message_primary == f"routines.trigger_config.schedule: {rule}"


def test_cron_preview_without_a_database_says_it_needs_one(db_url: str) -> None:
    closed = "postgresql://nobody@127.0.0.1:1/ceaseless"
    result = run_cli(closed, "cron", "preview", "@daily", "--after", "2026-12-01T00:00Z")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith(
        "error: cron preview checks the schedule with the database's own rule, and could not "
        "connect ("
    )
    assert "start the database (`ceaseless db start`) or point DATABASE_URL at one" in (
        result.stderr
    )
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_cron_preview_on_a_database_not_migrated_says_to_migrate(empty_db_url: str) -> None:
    result = run_cli(empty_db_url, "cron", "preview", "@daily")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip() == (
        "error: cron preview checks the schedule with the database's own rule, "
        "ceaseless.check_schedule, which this database lacks: run `ceaseless migrate`"
    )


@pytest.mark.slow
def test_cron_preview_uses_the_embedded_server_like_every_other_command() -> None:
    # No DATABASE_URL: the embedded server is started on demand, as for `routine list`;
    # until it is migrated, the preview says what to run. (A home PostgreSQL's own OS
    # user can reach, as tests/cli/test_db_commands.py makes it.)
    home = Path(tempfile.mkdtemp(prefix="ceaseless-cron-"))
    home.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL" and not k.startswith("PG")}
    env.update(CEASELESS_HOME=str(home), PYTHONPATH=str(ROOT))

    def ceaseless(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "listener", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )

    preview = ("cron", "preview", "0 9 * * 1-5", "-n", "1", "--after", "2026-12-04T10:00Z")
    try:
        before = ceaseless(*preview)
        assert before.returncode == 1, before.stderr
        assert "which this database lacks: run `ceaseless migrate`" in before.stderr
        assert ceaseless("migrate").returncode == 0
        after = ceaseless(*preview)
        assert after.returncode == 0, after.stderr
        assert after.stdout.splitlines()[2:] == [
            "2026-12-07 09:00:00  UTC   Mon  2026-12-07 09:00:00"
        ]
    finally:
        ceaseless("db", "stop")
        shutil.rmtree(home, ignore_errors=True)


def test_routine_show_lists_the_next_slots(db_url: str, conn: psycopg.Connection) -> None:
    conn.execute("insert into ceaseless.agents (name, adapter) values ('noop', 'noop')")
    conn.execute(
        "insert into ceaseless.routines (name, agent, trigger_type, trigger_config, action_type, "
        "action_config) values ('nightly', 'noop', 'cron', %s, 'lightweight', %s)",
        (
            json.dumps({"schedule": "0 3 * * *", "timezone": "Asia/Tokyo"}),
            json.dumps({"prompt": "check"}),
        ),
    )
    result = run_cli(db_url, "routine", "show", "nightly")
    assert result.returncode == 0, result.stderr
    assert "next slots (0 3 * * *, Asia/Tokyo):" in result.stdout
    slots = result.stdout.split("next slots")[1].splitlines()[3:]
    assert len(slots) == 5 and all(s.split()[1:3] == ["03:00:00", "JST"] for s in slots)
    assert all(s.split()[-1] == "18:00:00" for s in slots)


def test_db_psql_passes_psql_arguments_through_without_a_separator(db_url: str) -> None:
    plain = run_cli(db_url, "db", "psql", "-XAtc", "select 6 * 7")
    assert (plain.returncode, plain.stdout.strip()) == (0, "42"), plain.stderr
    split = run_cli(db_url, "db", "psql", "-X", "-A", "-t", "-c", "select 'a b'")
    assert split.stdout.strip() == "a b"
    separated = run_cli(db_url, "db", "psql", "--", "-XAtc", "select 1")
    assert separated.stdout.strip() == "1"
    ours = run_cli(db_url, "db", "psql", "--help")
    assert "Every argument is passed to psql" in ours.stdout


def test_shell_completion_script_is_printed_as_the_readme_says(db_url: str) -> None:
    # Run from bash, as a user would: the script is for the shell the command runs in (and
    # "; true" keeps bash alive as the parent instead of exec'ing the command).
    command = f"{shlex.quote(sys.executable)} -m listener --show-completion; true"
    env = {**os.environ, "DATABASE_URL": db_url, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        ["bash", "-c", command], env=env, capture_output=True, text=True, timeout=60
    )
    assert "_ceaseless_completion" in result.stdout, (result.stdout[:200], result.stderr[-500:])


def test_a_six_field_schedule_meant_the_quartz_way_gets_a_warning_with_both_readings(
    db_url: str, conn: psycopg.Connection
) -> None:
    previewed = run_cli(
        db_url, "cron", "preview", "30 0 9 * * *", "-n", "1", "--after", "2026-12-01T00:00Z"
    )
    assert previewed.returncode == 0, previewed.stderr
    warning = previewed.stderr.splitlines()
    assert warning[0].startswith("warning: '30 0 9 * * *' has six fields")
    assert "which here would be '0 9 * * * 30'" in warning[0]
    assert warning[1].split(":", 1)[1].split(",")[0].strip() == "2026-12-09 00:30:00 UTC"
    assert warning[2].split(":", 1)[1].split(",")[0].strip() == "2026-12-01 09:00:30 UTC"
    assert previewed.stdout.splitlines()[2].startswith("2026-12-09 00:30:00")

    conn.execute("insert into ceaseless.agents (name, adapter) values ('noop', 'noop')")
    added = run_cli(db_url, "routine", "add", "r", "--agent", "noop", "--prompt", "p",
                    "--cron", "30 0 9 * * *")  # fmt: skip
    assert added.returncode == 0 and "has six fields" in added.stderr
    stored = conn.execute("select trigger_config ->> 'schedule' from ceaseless.routines")
    assert stored.fetchone() == ("30 0 9 * * *",)  # croniter's reading is kept

    for plain in ("0 9 * * * 30", "* * * * * *", "0 9 * * *"):
        quiet = run_cli(db_url, "cron", "preview", plain, "-n", "1")
        assert quiet.returncode == 0 and quiet.stderr == "", (plain, quiet.stderr)
