"""The main job: `up`, `listen`, `migrate`, `status` and `dashboard`, the top-level commands.

`up` is `migrate` then `listen`; both serve through `listener.daemon.supervisor.run`
until Ctrl-C / SIGTERM, with the options `listener_options` builds from
ListenerConfig, and exit with the status it returns (non-zero when the listener
could not record every result). Migrations never run through a connection
pooler, which cannot keep the session lock they hold: `up` migrates through
--listen-url when given, and `migrate` refuses a DATABASE_URL that goes through one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from listener import log
from listener.cli.common import (
    Output,
    OutputOpt,
    call,
    collecting,
    emitting,
    fail,
    listed,
    note,
    section,
    table,
    url,
)
from listener.cli.options import ListenerOptions, listener_options
from listener.config import ListenerConfig
from listener.database import connections, pooler
from listener.queries.commands.status import status as read_status

if TYPE_CHECKING:
    from listener.database.migrate import MigrateReport

app = typer.Typer()


def _serve(config: ListenerConfig) -> None:
    # Imported here: the listener's own imports (aiohttp, the adapters) are
    # only paid for by the commands that serve.
    from listener.daemon import supervisor

    status = supervisor.run(config)
    if status:
        raise typer.Exit(status)


@app.command()
@listener_options
def up(options: ListenerOptions) -> None:
    """Start the database, apply migrations, and run the listener until Ctrl-C / SIGTERM."""
    log.configure(options.log_format)
    database = url()
    config = options.config(database)
    # Migrations need a session of their own: through the listen URL when the
    # listener's own goes through a pooler.
    report = _migrate(config.listen_url or database)
    log.event(
        "migrate.done",
        applied=[m.path.name for m in report.applied],
        functions="unchanged" if report.functions_skipped else "re-applied",
    )
    if connections.uses_embedded():
        log.event("db.embedded", url=database, psql="ceaseless db psql")
    _serve(config)


@app.command()
@listener_options
def listen(options: ListenerOptions) -> None:
    """Run only the listener (the schema must be migrated): claim jobs and run their agents."""
    log.configure(options.log_format)
    _serve(options.config(url()))


@app.command("migrate")
def migrate_command(
    dry_run: Annotated[bool, typer.Option(help="List what would run; change nothing.")] = False,
) -> None:
    """Apply new db/ migrations, then re-apply functions/ if they changed."""
    report = _migrate(url(), dry_run=dry_run)
    verb = "would apply" if dry_run else "applied"
    if report.applied:
        for migration in report.applied:
            typer.echo(f"{verb} {migration.path.name}")
    else:
        typer.echo("no migrations to apply")
    if report.functions_skipped:
        typer.echo("functions/ unchanged: not re-applied")
    else:
        typer.echo(
            f"{'would re-apply' if dry_run else 're-applied'} {len(report.functions)} "
            f"function files: {', '.join(p.name for p in report.functions)}"
        )


def _migrate(database: str, *, dry_run: bool = False) -> MigrateReport:
    """migrate(), refused through a connection pooler; exits with the reason when it fails."""
    # Imported here: the SQL parser that migrations use (pglast) is only paid for by the
    # commands that migrate, not by every command's start.
    from listener.database.migrate import MigrationError, migrate

    try:
        pooler.refuse_for_migrations(database)
        return migrate(database, dry_run=dry_run)
    except (MigrationError, pooler.PoolerRefused) as exc:
        raise fail(str(exc)) from None


@app.command()
def status(output: OutputOpt = Output.TABLE) -> None:
    """Queue summary: jobs by state, each agent lane's governor usage, the running listeners,
    and the relayed announcements still waiting to be sent (relay_status).

    What a listener says of itself (its agents' sandbox, how it reached the
    database) is what that listener reported (listener_status), not a guess
    from this command's own environment. A user role sees its own jobs and
    every lane; the listeners are shown to operators.
    """
    summary = call(read_status)
    with emitting(output):
        listed(summary.jobs, name="jobs")
        section(summary.lanes, "lanes")
        note("")
        if summary.listeners is None:
            note("listeners: shown to operators only (ceaseless.listener_status)")
        else:
            listeners = summary.listeners.rows
            # The last column is each listener's warnings, printed under the table.
            if collecting():
                listed(summary.listeners, name="listeners")
            else:
                table([row[:-1] for row in listeners], summary.listeners.headers[:-1])
            if not any(row[1] for row in listeners):
                _hint("no listener is running: `ceaseless listen` (or `ceaseless up`) starts one")
            for row in listeners:
                for warning in row[-1]:
                    _hint(f"warning: listener {row[0]}: {warning}")
        if summary.relay is not None:
            if collecting():
                listed(summary.relay, name="relay")
            [(waiting, oldest_waited_s)] = summary.relay.rows
            # A listener sends them within about a second (docs/notify.md).
            if waiting and oldest_waited_s > _RELAY_LATE_SECS:
                _hint(
                    f"{waiting} relayed announcements wait, the oldest for "
                    f"{oldest_waited_s:.0f} s: no listener is sending them (its log says why); "
                    "select * from ceaseless.relay_status;"
                )
        blocked = sum(row[1] for row in summary.jobs.rows if row[0] == "blocked")
        if blocked:
            _hint(
                f"{blocked} blocked jobs wait for a person: `ceaseless job list --state blocked` "
                "lists them, `ceaseless job show <id>` says why; fix that, then "
                "`ceaseless job retry <id>`"
            )
        if summary.stuck_jobs.rows:
            _hint(f"{len(summary.stuck_jobs.rows)} stuck jobs: select * from ceaseless.stuck_jobs;")
        if collecting():
            listed(summary.stuck_jobs, name="stuck_jobs")


# Relayed announcements older than this are late: a listener relaying them sends each within
# about a second of its writing.
_RELAY_LATE_SECS = 10


def _hint(text: str) -> None:
    """A next step for people, in yellow after a blank line; not part of a JSON document."""
    if not collecting():
        typer.secho(f"\n{text}", fg=typer.colors.YELLOW)


@app.command()
def dashboard() -> None:
    """Print the sign-in URL of each listener serving HTTP on this host (run as its OS user).

    The URL carries the listener's token, read from its 0600 file in
    CEASELESS_HOME/http/; opening it signs the browser in (an HttpOnly cookie)
    and drops the token from the address bar.
    """
    from listener.web import token

    found = token.serving()
    if not found:
        raise fail(
            f"no listener serving HTTP has a token file in {token.directory()}: start one "
            "with --http, run this as the OS user it runs as, with the same CEASELESS_HOME"
        )
    for entry in found:
        typer.echo(f"{entry.sign_in_url}  (listener {entry.worker})")
