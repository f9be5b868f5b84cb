"""`ceaseless db …`: the embedded PostgreSQL's lifecycle, its URL, and psql on it.

Named for its group, so it is mistaken neither for `listener.database.connections` (the module
that opens connections) nor for `listener.database.pool` (the listener's pool).
start and stop refuse politely when DATABASE_URL or PG* variables point
elsewhere; `db status` exits 3 when the embedded server is not running.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import typer

from listener.cli.common import fail, url
from listener.database import connections
from listener.database.embedded import EmbeddedError, EmbeddedServer, default_home, wheel_bin_dir

app = typer.Typer(
    help="The database: embedded PostgreSQL unless DATABASE_URL is set.", no_args_is_help=True
)


def _embedded() -> EmbeddedServer:
    if not connections.uses_embedded():
        raise fail("DATABASE_URL (or PG* variables) is set: the embedded database is not in use")
    return EmbeddedServer(default_home())


def _say(step: Callable[[EmbeddedServer], str]) -> None:
    """Print what a step of the embedded server's lifecycle says, or its error."""
    try:
        typer.echo(step(_embedded()))
    except EmbeddedError as exc:
        raise fail(str(exc)) from None


@app.command("start")
def db_start() -> None:
    """Start the embedded PostgreSQL (reuses it when already running) and print its URL."""
    _say(EmbeddedServer.start)


@app.command("stop")
def db_stop() -> None:
    """Stop the embedded PostgreSQL."""
    _say(EmbeddedServer.stop)


@app.command("status")
def db_status() -> None:
    """Say whether the embedded PostgreSQL is running, and where its data lives."""
    if not connections.uses_embedded():
        typer.echo("using DATABASE_URL / PG* variables, not the embedded database")
        return
    state = _embedded().state()
    typer.echo(state.detail)
    if not state.running:
        raise typer.Exit(3)


@app.command("url")
def db_url() -> None:
    """Print the database URL (starting the embedded server if needed)."""
    typer.echo(url())


@app.command(
    "psql",
    # Everything after `psql` is psql's: `ceaseless db psql -c 'select 1'` and
    # `ceaseless db psql -Atc …` work as they would with psql itself ("--" is
    # still accepted). Only --help stays ours.
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def db_psql(ctx: typer.Context) -> None:
    """Open psql on the database (the psql shipped with the embedded server).

    Every argument is passed to psql as given: `ceaseless db psql -c 'select 1'`,
    `ceaseless db psql -Atc 'select count(*) from ceaseless.job'`, `ceaseless db psql -f
    setup.sql`. psql's own help: `ceaseless db psql -- --help`.
    """
    args = ctx.args
    conninfo = url()
    # The embedded wheel's psql works with any server version we support, so
    # no system psql is needed either way.
    psql = str(wheel_bin_dir() / "psql")
    argv = [psql, conninfo or "", *(args or [])]
    sys.stdout.flush()
    os.execv(psql, argv)
