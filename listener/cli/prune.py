"""`ceaseless prune`: remove what is past retention now, as a listener's maintenance does
every prune_interval_secs, and print how many rows of each kind went.

Which rows go is the database's rule (prune, functions/96_retention.sql): finished rows
older than their kind's retention_*_secs setting, never a live row nor one a live rule
reads; this command only calls it, a batch at a time, until a pass removes less than a
batch of every kind.

Guarantees: each batch is its own transaction, audited in one audit_log row; --dry-run
removes and audits nothing; when another prune is running (a listener's maintenance),
nothing is removed and the command fails saying so.
"""

from __future__ import annotations

from typing import Annotated, Any

import psycopg
import typer

from listener.cli.common import Output, OutputOpt, call_async, emitting, fail, note, table
from listener.queries import retention

app = typer.Typer()


async def _prune(
    conn: psycopg.AsyncConnection[Any], limit: int, only: str | None, dry_run: bool
) -> dict[str, int] | None:
    if dry_run:
        counted = await retention.prune(conn, limit=limit, only=only, dry_run=True)
        return {row.kind: row.removed for row in counted} or None
    return await retention.prune_all(lambda: retention.prune(conn, limit=limit, only=only), limit)


@app.command("prune")
def prune(
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Count what one batch would remove, and remove nothing.",
        ),
    ] = False,
    only: Annotated[
        str | None,
        typer.Option(
            "--only",
            metavar="KIND",
            help="Prune one kind: routine_runs, topology_runs, jobs, events, notifications, "
            "late_results, webhook_deliveries or audit_log.",
        ),
    ] = None,
    limit: Annotated[
        int,
        typer.Option(
            "--limit",
            min=1,
            help="Rows of each kind per batch; each batch is one transaction, repeated until "
            "a batch removes fewer.",
        ),
    ] = 10000,
    output: OutputOpt = Output.TABLE,
) -> None:
    """Remove finished rows past their retention, and print how many of each kind went.

    How long each kind is kept is a setting (30 days for jobs and runs, 7 for events and
    delivered notifications, 90 for audit rows; 0 keeps a kind forever):

    \b
    select key, value from ceaseless.settings where key like 'retention_%';

    Live rows are never removed (a pending, running or blocked job, a running run), nor
    those a live rule reads (a loop's latest finished iteration, a routine's latest
    success). A running listener does the same every prune_interval_secs; this command is
    for now, or for a database no listener serves. Operators prune every kind but audit
    rows, which only a listener role or the schema's owner may prune.

    \b
    ceaseless prune --dry-run
    ceaseless prune --only events
    """
    removed = call_async(_prune, limit, only, dry_run)
    if removed is None:
        raise fail(
            "another prune is running (a listener's maintenance, or another `ceaseless prune`): "
            "nothing was removed; try again when it ends"
        )
    with emitting(output):
        table(list(removed.items()), ["kind", "would remove" if dry_run else "removed"])
        note(
            "dry run: nothing was removed (one batch counted)"
            if dry_run
            else f"{sum(removed.values())} rows removed"
        )
