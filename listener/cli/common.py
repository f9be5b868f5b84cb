"""What every command group shares: the database URL, a call of a query, an error, a table.

The statements are listener/queries/commands/, a module per group; a command runs
them through `call` (or `call_async`, for one the listener runs too). Rows that a
group names by id or by name (routines, loops, tracked repos) are found, enabled,
disabled, deleted and read through one `Named`. List commands print through
`list_rows`, show commands through `table`, `listed`, `record` and `note` inside
`emitting(output)`, so `--output json` turns the same calls into one JSON document
for scripts.

Guarantees: a database error reaches the user as the database phrased it (its
primary message and detail name the field, the rule and the value), with exit
status 1 and no traceback. Every call opens its own autocommit connection, named
"ceaseless cli" in pg_stat_activity, so each statement is its own transaction.
Columns a command leaves unset (None) are left out of its INSERT, so the
database's column default applies: defaults are never copied into Python.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any, Concatenate, ParamSpec, TypeVar

import psycopg
import typer

from listener.database import connections
from listener.database.embedded import EmbeddedError
from listener.database.pool import Database
from listener.queries import commands
from listener.queries.commands import Listing

APPLICATION_NAME = "ceaseless cli"

P = ParamSpec("P")
T = TypeVar("T")


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


@contextmanager
def _as_the_database_said() -> Iterator[None]:
    try:
        yield
    except psycopg.Error as exc:
        raise fail(_said(exc)) from None


def _said(exc: psycopg.Error) -> str:
    """The database's error as a user needs it: its message and detail, except two that name
    no value a user gave (by constraint, never by message text)."""
    diag = exc.diag
    if isinstance(exc, psycopg.errors.ForeignKeyViolation) and (
        diag.constraint_name or ""
    ).endswith("_agent_fkey"):
        # "Key (agent)=(ghost) is not present in table agents": the value is in the detail.
        agent = (diag.message_detail or "").partition(")=(")[2].partition(")")[0]
        return (
            f"{diag.table_name}.agent: no agent named {agent!r} is registered "
            "(`ceaseless agent list` shows them, `ceaseless agent add` adds one)"
        )
    detail = diag.message_detail or ""
    if isinstance(exc, psycopg.errors.CheckViolation) and detail.startswith("Failing row"):
        # PostgreSQL's own detail is the whole row, every column: noise, and perhaps a secret.
        detail = ""
    notes = "".join(f"; {note}" for note in getattr(exc, "__notes__", ()))
    return f"{diag.message_primary or exc}{notes}" + (f"\n{detail}" if detail else "")


def connect() -> psycopg.Connection[Any]:
    """An autocommit connection named as `call`'s are, for a command that says in its own
    words what the database's errors mean (`call` reports them as the database said them)."""
    return connections.connect(url(), application_name=APPLICATION_NAME)


def database(*, deadline: float) -> Database:
    """The listener's own handle on the database, one connection named as `call`'s are, for a
    command that runs the listener's async code (`repo poll`)."""
    return Database(url(), APPLICATION_NAME, deadline=deadline, size=1)


def call(
    fn: Callable[Concatenate[psycopg.Connection[Any], P], T], *args: P.args, **kwargs: P.kwargs
) -> T:
    """Run a query function (listener/queries/commands/) on an autocommit connection of its own."""
    conninfo = url()
    with (
        _as_the_database_said(),
        connections.connect(conninfo, application_name=APPLICATION_NAME) as conn,
    ):
        return fn(conn, *args, **kwargs)


def call_async(
    fn: Callable[Concatenate[psycopg.AsyncConnection[Any], P], Awaitable[T]],
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """`call` for a statement the listener runs too, written once as an async function."""
    conninfo = url()

    async def run() -> T:
        conn = await connections.connect_async(conninfo, application_name=APPLICATION_NAME)
        async with conn:
            return await fn(conn, *args, **kwargs)

    with _as_the_database_said():
        return asyncio.run(run())


def found(
    query: Callable[[psycopg.Connection[Any], str], Listing], key: str, missing: str
) -> list[tuple[str, Any]]:
    """The first row `query` reads for `key`, as (column, value) pairs; exits saying `missing`
    when it reads none."""
    row = call(query, key).first()
    if row is None:
        raise fail(missing)
    return row


def given(values: Mapping[str, object | None]) -> dict[str, object]:
    """The keys of a JSON document the user set: None means "not given", so the default applies."""
    return {key: value for key, value in values.items() if value is not None}


@dataclass(frozen=True)
class Named:
    """Rows a command group names by id or by name: how to find one, and what to say when none
    or several answer."""

    table: commands.Named
    noun: str
    # Formatted with ref and for_user (" for user NAME" when --user was given).
    missing: str
    # Formatted with count and ref.
    ambiguous: str
    # What enabling and disabling one is called.
    said: tuple[str, str] = ("enabled", "disabled")
    # What the database calls on one to say why it waits (None: nothing holds one).
    explained: commands.Explained | None = None

    def id(self, ref: str, user: str | None = None) -> str:
        """The id of the one row `ref` names (of `user`'s, when given); exits otherwise."""
        ids = call(commands.ids_named, self.table, ref, user)
        if not ids:
            raise fail(self.missing.format(ref=ref, for_user=f" for user {user}" if user else ""))
        if len(ids) > 1:
            raise fail(self.ambiguous.format(count=len(ids), ref=ref))
        return ids[0]

    def read(
        self,
        query: Callable[[psycopg.Connection[Any], str], Listing],
        ref: str,
        user: str | None = None,
    ) -> tuple[str, list[tuple[str, Any]]]:
        """The id of the row `ref` names and its record as `query` reads it; exits when there
        is none."""
        row_id = self.id(ref, user)
        # Another session may delete the row between the two statements.
        return row_id, found(query, row_id, f"{self.noun} {ref} was deleted meanwhile")

    def set_enabled(self, ref: str, enabled: bool, user: str | None = None) -> None:
        """Enable or disable the row, and say so."""
        call(commands.set_enabled, self.table, self.id(ref, user), enabled)
        typer.echo(f"{self.noun} {ref} {self.said[0] if enabled else self.said[1]}")

    def delete(self, ref: str, user: str | None = None) -> None:
        call(commands.delete, self.table, self.id(ref, user))
        typer.echo(f"{self.noun} {ref} deleted")

    def why(self, ref: str, output: Output, user: str | None = None) -> None:
        """Every reason that holds the row, and when each clears."""
        assert self.explained is not None, f"nothing explains why a {self.noun} waits"
        why(self.explained, self.id(ref, user), output)


def why(what: commands.Explained, row_id: str, output: Output) -> None:
    """Every reason that holds a job, routine or loop, and when each clears."""
    with emitting(output):
        listed(call(commands.explain, what, row_id))


def list_rows(
    output: Output,
    query: Callable[Concatenate[psycopg.Connection[Any], P], Listing],
    *args: P.args,
    **kwargs: P.kwargs,
) -> None:
    """What a `list` command prints: the rows `query` reads, as a table or one JSON array."""
    with emitting(output):
        listed(call(query, *args, **kwargs))


class Output(StrEnum):
    TABLE = "table"
    JSON = "json"


def column_option(help: str) -> Any:
    """A typer option for a column the database fills in when the option is left out (its
    value None is left out of the INSERT), with a help that says so."""
    return typer.Option(help=f"{help} (default: the column default).")


# Routines and loops share one trigger layer (functions/32_schedules.sql): the options
# that configure it are written once, for `routine add` and `loop add` alike.
CronOpt = Annotated[
    str | None,
    typer.Option(
        help="Fire on this cron schedule, e.g. '0 */6 * * *'; a sixth field is seconds, LAST: "
        "'0 9 * * * 30'."
    ),
]
TimezoneOpt = Annotated[
    str | None,
    typer.Option("--timezone", "--tz", help="IANA time zone of --cron (default: UTC)."),
]
EventOpt = Annotated[
    str | None,
    typer.Option(
        help="Fire when an event of the owner's (INSERT INTO ceaseless.events) matches this regex."
    ),
]
ChannelOpt = Annotated[
    str | None, typer.Option(help="With --event: only events of this channel (any case).")
]
JobPriorityOpt = Annotated[
    int | None,
    typer.Option(
        help="Priority of the jobs it creates: higher runs first in a lane, -1000..1000 "
        "(default 0)."
    ),
]
JobFairnessKeyOpt = Annotated[
    str | None,
    typer.Option(
        help="Fairness key of the jobs it creates: whose turn they wait for in a round_robin "
        "lane, within their owner's turns (default: the owner)."
    ),
]
DebounceOpt = Annotated[
    int | None,
    typer.Option(
        help="Seconds: event and webhook fires this close together collapse into one, "
        "started this long after the last of them."
    ),
]
DebounceMaxOpt = Annotated[
    int | None,
    typer.Option(
        help="With --debounce: a collapsed fire starts at the latest this many seconds "
        "after the first."
    ),
]

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
        # A multi-line value (an error, a final message) keeps its lines, indented under it.
        text = "" if shown is None else str(shown).rstrip()
        typer.echo(f"{header:>{width}}  " + text.replace("\n", "\n" + " " * (width + 2)))


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
    widest = [CELL_WIDTH] * (len(headers) - 1) + [LAST_CELL_WIDTH]
    cells = [headers, *[[_cell(v, w) for v, w in zip(row, widest, strict=True)] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for n, row in enumerate(cells):
        typer.echo("  ".join(value.ljust(widths[i]) for i, value in enumerate(row)).rstrip())
        if n == 0:
            typer.echo("  ".join("-" * w for w in widths))


# A table cell is one line: a multi-line error or an agent's final message would
# otherwise break every row after it. A cell is cut at CELL_WIDTH characters, except in
# the last column, where a long text (a why's detail, an error) misaligns nothing and is
# cut only at LAST_CELL_WIDTH. `show` commands and --output json carry the whole text.
CELL_WIDTH = 80
LAST_CELL_WIDTH = 400


def _cell(value: object, width: int) -> str:
    if value is None:
        return ""
    if isinstance(value, list):  # an argv, a list of names: as a shell would show it
        value = " ".join(map(str, value))
    text = " ⏎ ".join(line.strip() for line in str(value).strip().splitlines())
    return text if len(text) <= width else text[: width - 1] + "…"


def listed(listing: Listing, *, name: str = "") -> None:
    """`table` of a statement's rows under its own column names."""
    table(listing.rows, listing.headers, name=name)


def section(listing: Listing, name: str, heading: str | None = None) -> None:
    """`listed` below what a show command printed before it: after a blank line and the
    heading, when it has one (for people only, as `note`)."""
    note("")
    if heading is not None:
        note(heading)
    listed(listing, name=name)
