"""The `ceaseless` command: conveniences over the SQL API, and the listener itself.

Everything here can also be done in psql; the CLI only saves typing. Errors from
the database are shown as the database phrased them (they name the field, the
rule and the value), without a traceback.

This module assembles the root command from one module per command group:
`serve` (up, listen, migrate, status at the top level), `db_commands` (db …),
`agent`, `job`, `routine`, `loop`, `repo`, `run` (run show|cancel, approve, reject), `cron`
(cron preview), `prune` (retention, at the top level) and `docs`; `options` builds the
listener's options from ListenerConfig, and `common` holds what the groups share. The entry point is
`listener.cli:main` (and `python -m listener`).

Guarantees: every error is one line on stderr starting `error:`; a mistyped command,
option or value (a usage error) exits with status 2 and names the help to read, any
other error with status 1.
"""

from __future__ import annotations

import re
import sys
from typing import Any

import typer

# The exception a usage error raises: typer bundles click (pyproject pins typer to the
# releases that do), and exports Abort and Exit but not this base class.
from typer._click.exceptions import ClickException

from listener.cli import (
    agent,
    cron,
    db_commands,
    docs,
    job,
    loop,
    prune,
    repo,
    routine,
    run,
    serve,
)

app = typer.Typer(
    help=(
        "ceaseless runs AI-agent work from a PostgreSQL queue.\n\n"
        "Start here: `ceaseless up` starts the database (embedded unless DATABASE_URL is set), "
        "applies migrations and runs the listener. In another terminal, `ceaseless db psql` "
        "opens psql on the same database, where INSERTs are the API; `ceaseless agent add` "
        "and `ceaseless job add` save typing for the first agent and job.\n\n"
        "Every command has --help."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.add_typer(serve.app)
app.add_typer(db_commands.app, name="db")
app.add_typer(agent.app, name="agent")
app.add_typer(job.app, name="job")
app.add_typer(routine.app, name="routine")
app.add_typer(loop.app, name="loop")
app.add_typer(repo.app, name="repo")
app.add_typer(run.app, name="run")
app.add_typer(run.approvals)
app.add_typer(docs.app, name="docs")
app.add_typer(cron.app, name="cron")
app.add_typer(prune.app)


def main(args: list[str] | None = None) -> None:
    """Run `ceaseless ARGS`, with usage errors as one line instead of click's usage block."""
    command = typer.main.get_command(app)
    _whole_summaries(command)
    try:
        status = command.main(args, prog_name="ceaseless", standalone_mode=False)
    except typer.Abort:
        typer.secho("error: aborted", fg=typer.colors.RED, err=True)
        sys.exit(1)
    except ClickException as exc:
        if exc.__class__.__name__ == "NoArgsIsHelpError":
            exc.show()  # the group's help, as `--help` prints it
            sys.exit(exc.exit_code)
        context = getattr(exc, "ctx", None)
        hint = f" (see `{context.command_path} --help`)" if context is not None else ""
        typer.secho(f"error: {exc.format_message()}{hint}", fg=typer.colors.RED, err=True)
        sys.exit(exc.exit_code)
    sys.exit(status if isinstance(status, int) else 0)


def _whole_summaries(command: Any) -> None:
    """A group's list of commands shows each one's first sentence whole, wrapped, instead of
    cut to the terminal's width with "...": the first sentence is the summary."""
    for sub in getattr(command, "commands", {}).values():
        if sub.help and not sub.short_help:
            first_paragraph = " ".join(sub.help.split("\n\n")[0].split())
            sub.short_help = re.split(r"(?<=[.?!])\s", first_paragraph)[0]
        _whole_summaries(sub)


__all__ = ["app", "main"]
