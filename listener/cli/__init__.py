"""The `ceaseless` command: conveniences over the SQL API, and the listener itself.

Everything here can also be done in psql; the CLI only saves typing. Errors from
the database are shown as the database phrased them (they name the field, the
rule and the value), without a traceback.

This module assembles the root command from one module per command group:
`serve` (up, listen, migrate, status at the top level), `db_commands` (db …),
`agent`, `job`, `routine`, `loop`, `repo`, `run` (run show|cancel, approve, reject), `cron`
(cron preview) and `docs`; `options` builds the listener's options from
ListenerConfig, and `common` holds what the groups share. The entry point is
`listener.cli:app` (and `python -m listener`).
"""

from __future__ import annotations

import typer

from listener.cli import agent, cron, db_commands, docs, job, loop, repo, routine, run, serve

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

__all__ = ["app"]
