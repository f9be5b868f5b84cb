"""`ceaseless repo add|list|show|enable|disable` against a real database (no listener: no
repo is polled)."""

from __future__ import annotations

import subprocess

import psycopg

from tests.e2e.support import run_cli


def _cli(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(db_url, "repo", *args)


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def _one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stdout
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    return result.stderr


ADD = [
    "add",
    "octo-org/hello",
    "--clone-url",
    "https://github.com/octo-org/hello.git",
    "--branch",
    "main",
    "--interval",
    "30",
]


def test_repo_lifecycle_from_the_command_line(db_url: str, conn: psycopg.Connection) -> None:
    added = _cli(
        db_url,
        *ADD,
        "--author",
        "alice",
        "--author",
        "bob",
        "--plan-label",
        "needs-plan",
        "--quiet-from",
        "22:00",
        "--quiet-until",
        "06:00",
        "--quiet-tz",
        "Europe/Berlin",
    )
    repo = _ok(added).strip()
    assert "No --author" not in added.stderr
    row = conn.execute(
        "select api_url, allowed_authors, plan_label, implement_label, interval_seconds, "
        "quiet_timezone from ceaseless.tracked_repo where id = %s",
        (repo,),
    ).fetchone()
    assert row == (
        "https://api.github.com",
        ["alice", "bob"],
        "needs-plan",
        "ceaseless:implement",
        30,
        "Europe/Berlin",
    )

    listed = _ok(_cli(db_url, "list"))
    assert repo in listed and "octo-org/hello" in listed
    # The interval used is the floor, not the 30 seconds asked for.
    assert " 60 " in listed.splitlines()[2]

    shown = _ok(_cli(db_url, "show", "octo-org/hello"))
    assert "22:00-06:00 Europe/Berlin" in shown
    assert "https://github.com/octo-org/hello.git" in shown
    assert '["alice", "bob"]' in shown
    assert "interval_used_secs  60" in shown and "interval_asked_secs  30" in shown

    assert "disabled" in _ok(_cli(db_url, "disable", "octo-org/hello"))
    assert conn.execute(
        "select enabled from ceaseless.tracked_repo where id = %s", (repo,)
    ).fetchone() == (False,)
    assert "enabled" in _ok(_cli(db_url, "enable", repo))
    assert conn.execute(
        "select enabled from ceaseless.tracked_repo where id = %s", (repo,)
    ).fetchone() == (True,)


def test_a_gitea_repo_without_authors_is_added_with_a_warning(db_url: str) -> None:
    added = _cli(
        db_url,
        "add",
        "my_org/tool",
        "--forge",
        "gitea",
        "--api-url",
        "https://gitea.example.com/api/v1",
        "--clone-url",
        "git@gitea.example.com:my_org/tool.git",
        "--branch",
        "trunk",
        "--interval",
        "600",
        "--disabled",
    )
    _ok(added)
    assert "no issue gets work" in added.stderr
    assert "false" in _ok(_cli(db_url, "show", "my_org/tool")).replace("False", "false")


def test_bad_input_is_one_line_naming_field_rule_and_value(db_url: str) -> None:
    error = _one_line_error(
        _cli(db_url, *ADD, "--quiet-from", "22:00", "--quiet-tz", "Europe/Berlin")
    )
    assert "tracked_repo.quiet_until: a quiet window needs both" in error
    error = _one_line_error(
        _cli(
            db_url,
            "add",
            "octo-org/hello",
            "--clone-url",
            "https://x-access-token:ghp_secret123@github.com/octo-org/hello.git",
            "--branch",
            "main",
            "--interval",
            "60",
        )
    )
    assert "tracked_repo.clone_url: must not hold a password" in error
    assert _one_line_error(_cli(db_url, "add", "hello", *ADD[2:])).startswith(
        "error: name the repository as OWNER/REPO"
    )
    assert "no tracked repo" in _one_line_error(_cli(db_url, "show", "nobody/nothing"))
    assert "no tracked repo" in _one_line_error(_cli(db_url, "enable", "nobody/nothing"))


def test_the_same_name_on_two_forges_needs_the_id(db_url: str) -> None:
    _ok(_cli(db_url, *ADD))
    _ok(
        _cli(
            db_url,
            *ADD,
            "--forge",
            "gitea",
            "--api-url",
            "https://gitea.example.com/api/v1",
        )
    )
    assert "use the id" in _one_line_error(_cli(db_url, "show", "octo-org/hello"))


def test_help_explains_every_command(db_url: str) -> None:
    top = _ok(_cli(db_url, "--help"))
    for command in ("add", "list", "show", "enable", "disable"):
        assert command in top
    add = _ok(_cli(db_url, "add", "--help"))
    for option in ("--clone-url", "--branch", "--interval", "--author", "--quiet-tz"):
        assert option in add
