"""What a newcomer meets first: `--help` that reads as prose, and a mistyped command that answers
in one line."""

from __future__ import annotations

import pytest

from tests.e2e.support import run_cli

GROUPS = ["", "db", "agent", "job", "routine", "loop", "repo", "run", "cron", "docs"]


@pytest.mark.parametrize("group", GROUPS)
def test_help_lists_each_command_with_its_whole_summary_and_no_type_noise(
    db_url: str, group: str
) -> None:
    shown = run_cli(db_url, *([group] if group else []), "--help", COLUMNS="80")

    assert shown.returncode == 0, shown.stderr
    assert "<bool>" not in shown.stdout
    commands = shown.stdout.split("Commands:", 1)[1]
    # A summary too long for one line wraps onto the next instead of ending in "...".
    assert not [line for line in commands.splitlines() if line.endswith("...")]


def test_a_paragraph_of_help_is_filled_not_broken_mid_sentence(db_url: str) -> None:
    shown = run_cli(db_url, "job", "why", "--help", COLUMNS="80")

    assert "and when each\n  clears (explain_job)." in shown.stdout


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["job", "lisst"], "error: No such command 'lisst'. Did you mean 'list'? "
         "(see `ceaseless job --help`)"),
        (["job", "list", "--limit", "0"], "error: Invalid value for '--limit': "),
        (["job", "why"], "error: Missing argument 'job'. (see `ceaseless job why --help`)"),
        (["routine", "add", "r", "--cooldown", "soon"], "error: Invalid value for '--cooldown'"),
    ],
)  # fmt: skip
def test_a_usage_error_is_one_line_naming_the_help_and_exits_2(
    db_url: str, args: list[str], error: str
) -> None:
    result = run_cli(db_url, *args)

    assert result.returncode == 2
    assert result.stderr.startswith(error) and len(result.stderr.splitlines()) == 1
    assert result.stdout == ""
