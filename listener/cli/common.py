"""What every command group shares: the database URL, one SQL call, an error, a table.

List and show commands print through `table`, `record` and `note` inside
`emitting(output)`, so `--output json` turns the same calls into one JSON
document for scripts.

Guarantees: a database error reaches the user as the database phrased it (its
primary message and detail name the field, the rule and the value), with exit
status 1 and no traceback. Every call opens its own autocommit connection, named
"ceaseless cli" in pg_stat_activity, so each statement is its own transaction.
Columns a command leaves unset are left out of its INSERT, so the database's
column default applies: defaults are never copied into Python.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import date, datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from typing import Annotated

import psycopg
import typer
from psycopg import sql

from listener.database import connections
from listener.database.embedded import EmbeddedError

Params = Mapping[str, object] | tuple[object, ...]


def fail(message: str) -> typer.Exit:
    """Print `error: message` in red on stderr; raise the result to exit with status 1."""
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    return typer.Exit(1)


def url() -> str:
    """The database's conninfo, starting the embedded server when it is the database."""
    try:
        return connections.database_url()
    except EmbeddedError as exc:
        raise fail(str(exc)) from None


def query(statement: str | sql.Composable, params: Params = ()) -> list[tuple[object, ...]]:
    """Run one statement in its own transaction and return its rows (none for a command)."""
    try:
        with connections.connect(url(), application_name="ceaseless cli") as conn:
            # psycopg types a str query as LiteralString; ours are fixed statements.
            text = statement.encode() if isinstance(statement, str) else statement
            cur = conn.execute(text, params)
            return cur.fetchall() if cur.description else []
    except psycopg.Error as exc:
        detail = f"\n{exc.diag.message_detail}" if exc.diag.message_detail else ""
        raise fail(f"{exc.diag.message_primary or exc}{detail}") from None


def given(values: Mapping[str, object | None]) -> dict[str, object]:
    """The columns the user set: None means "not given", so the column default applies."""
    return {column: value for column, value in values.items() if value is not None}


def columns(values: Mapping[str, object]) -> sql.Composed:
    """The keys of `values` as a list of quoted column names."""
    return sql.SQL(", ").join(sql.Identifier(column) for column in values)


def placeholders(values: Mapping[str, object]) -> sql.Composed:
    """A named placeholder per key of `values`, in the same order as `columns`."""
    return sql.SQL(", ").join(sql.Placeholder(column) for column in values)


def insert(table: str, values: Mapping[str, object]) -> sql.Composed:
    """`insert into ceaseless.<table> (…) values (…)` for exactly the columns in `values`.

    Run it with `values` as the parameters.
    """
    return sql.SQL("insert into {table} ({columns}) values ({placeholders})").format(
        table=sql.Identifier("ceaseless", table),
        columns=columns(values),
        placeholders=placeholders(values),
    )


class Output(StrEnum):
    TABLE = "table"
    JSON = "json"


OutputOpt = Annotated[
    Output,
    typer.Option(
        "--output",
        "-o",
        help="table (for people) or json (for scripts: one JSON document on stdout; times in "
        "ISO 8601, ids as strings).",
    ),
]

# While a command runs with --output json, what it shows is collected here
# (section name → rows or one record) and printed as one document at its end.
_document: ContextVar[dict[str, object] | None] = ContextVar("cli_document", default=None)


@contextmanager
def emitting(output: Output) -> Iterator[None]:
    """Show what the block passes to table/record/note as text, or as one JSON document.

    The document is printed only when the block succeeds: a failing command prints its error
    (`fail`) and nothing on stdout. A list command's document is its rows (an array); a show
    command's, an object of its named sections.
    """
    if output is Output.TABLE:
        yield
        return
    document: dict[str, object] = {}
    token = _document.set(document)
    try:
        yield
    finally:
        _document.reset(token)
    shown = document[""] if list(document) == [""] else document
    typer.echo(json.dumps(shown, default=_json_value, indent=2))


def _json_value(value: object) -> object:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return float(value)
    return str(value)


def record(pairs: Sequence[tuple[str, object]], *, name: str = "", width: int = 22) -> None:
    """Print one record as `header  value` lines (lists and objects as JSON), or add it."""
    document = _document.get()
    if document is not None:
        document[name] = dict(pairs)
        return
    for header, value in pairs:
        shown = json.dumps(value, default=_json_value) if isinstance(value, dict | list) else value
        typer.echo(f"{header:>{width}}  {'' if shown is None else shown}")


def collecting() -> bool:
    """Whether a JSON document is being collected (--output json)."""
    return _document.get() is not None


def note(text: str) -> None:
    """A line for people only (a heading, a hint): not part of a JSON document."""
    if _document.get() is None:
        typer.echo(text)


def table(rows: list[tuple[object, ...]], headers: list[str], *, name: str = "") -> None:
    """Print rows as aligned columns under a header line, or add them to the JSON document."""
    document = _document.get()
    if document is not None:
        document[name] = [dict(zip(headers, row, strict=True)) for row in rows]
        return
    cells = [headers, *[["" if v is None else str(v) for v in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        typer.echo("  ".join(value.ljust(widths[i]) for i, value in enumerate(row)).rstrip())
        if n == 0:
            typer.echo("  ".join("-" * w for w in widths))
