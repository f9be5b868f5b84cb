"""The command line's statements: what `ceaseless <group> …` reads and writes, a module per group.

Apart from the running listener's modules (jobs, schedule, outbox, …) because they
serve another caller: those are async calls on the listener's pool, these are plain
calls on the one connection a command opens for them (listener/cli/common.py,
`call`), and they read and write what users and operators do, the seed tables and
the views. Each group's statements are in the module named for it (agents, jobs,
routines, loops, repos, runs, status, cron); what the groups share is here: the
INSERT of exactly the columns given, a listing that carries its column names, and
the rows a command names by id or by name (routines, loops, tracked repos), which
it finds, enables, disables and deletes alike, and asks why they wait; and the
firing of a routine or a loop by hand, which either may hold.

Statements are written as SQL text, a clause a line, so they read as they run in
psql; a listing's columns are named in the statement as the command shows them
(`trigger_type as trigger`), so a table's headers and a JSON document's keys are
written once.

Guarantees: every function runs on the autocommit connection it is given, so each
statement is its own transaction; a function that runs two says so. None decides
anything: the database's constraints, triggers and functions do, and their errors
reach the caller as psycopg errors, as the database phrased them.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, LiteralString, NamedTuple

import psycopg
from psycopg import sql

Connection = psycopg.Connection[Any]
Params = Mapping[str, object] | tuple[object, ...]


class Listing(NamedTuple):
    """A statement's rows and its columns' names, in order."""

    headers: list[str]
    rows: list[tuple[Any, ...]]

    def first(self) -> list[tuple[str, Any]] | None:
        """The first row as (column, value) pairs; None when there is none."""
        return list(zip(self.headers, self.rows[0], strict=True)) if self.rows else None


def listing(
    conn: Connection, statement: LiteralString | sql.Composable, params: Params = ()
) -> Listing:
    cur = conn.execute(statement, params)
    return Listing([column.name for column in cur.description or ()], cur.fetchall())


def insert(
    conn: Connection, table: str, values: Mapping[str, object], returning: list[str]
) -> tuple[Any, ...]:
    """Insert one row into ceaseless.<table>, setting only the columns whose value is not None.

    A column left out gets the database's default (and whatever the table's triggers
    fill in), so no default is ever copied into Python. Returns the `returning` columns.
    """
    given = {column: value for column, value in values.items() if value is not None}
    statement = sql.SQL("insert into {table} ({columns}) values ({values}) returning {out}").format(
        table=sql.Identifier("ceaseless", table),
        columns=sql.SQL(", ").join(map(sql.Identifier, given)),
        values=sql.SQL(", ").join(map(sql.Placeholder, given)),
        out=sql.SQL(", ").join(map(sql.Identifier, returning)),
    )
    try:
        row = conn.execute(statement, given).fetchone()
    except psycopg.errors.CheckViolation as exc:
        # PostgreSQL names the constraint (cooldown_secs_not_negative) but not the value;
        # the constraints are named for their column, and the value is the one given here.
        constraint = exc.diag.constraint_name or ""
        for column, value in given.items():
            if constraint.startswith(f"{column}_"):
                exc.add_note(f"got {column} = {value!r}")
        raise
    assert row is not None, "an INSERT … RETURNING of one row returns one row or raises"
    return row


def fire(
    conn: Connection, function: LiteralString, runs: LiteralString, columns: list[str], ref: str
) -> tuple[Any, ...]:
    """Fire `ref` now by ceaseless.<function> (run_routine, run_loop): the id it returns, then
    `columns` of the run it made in ceaseless.<runs>, status first and skip_reason last.

    A fire the overlap policy keeps until its blocker clears is a held fire
    (functions/33_held_fires.sql): its id, then 'held', nulls, and why it waits.
    Two statements: a statement does not see a row its own function call inserted.
    """
    fired = conn.execute(
        sql.SQL("select {}(%s)").format(sql.Identifier("ceaseless", function)), (ref,)
    ).fetchone()
    assert fired is not None, f"{function} returns the run's id or raises"
    held: list[LiteralString] = [
        "'held'",
        *["null"] * (len(columns) - 2),
        "h.reason || coalesce(': waits for ' || h.blocked_by, '')",
    ]
    outcome = conn.execute(
        sql.SQL(
            "select {columns} from {runs} where id = %(id)s "
            "union all "
            "select {held} from ceaseless.held_fires h where h.id = %(id)s"
        ).format(
            columns=sql.SQL(", ").join(map(sql.Identifier, columns)),
            runs=sql.Identifier("ceaseless", runs),
            held=sql.SQL(", ").join(map(sql.SQL, held)),
        ),
        {"id": fired[0]},
    ).fetchone()
    assert outcome is not None, "the run fired a moment ago"
    return fired[0], *outcome


class Named(StrEnum):
    """A table whose rows a command names by id or by name (the value: the table's name)."""

    ROUTINES = "routines"
    LOOPS = "loops"
    TRACKED_REPO = "tracked_repo"


# An id may be given by a unique prefix of four or more hex digits, dashes
# optional, as git takes a commit's: `df611f23` names the job whose id starts
# so. The prefix becomes a range of the primary key, read by its index; a ref
# that is no such prefix passes NULL (`_hex_prefix`), which matches nothing.
_ID_PREFIX: LiteralString = """
    id between rpad(%(prefix)s::text, 32, '0')::uuid and rpad(%(prefix)s::text, 32, 'f')::uuid
"""


def _hex_prefix(ref: str) -> str | None:
    digits = ref.replace("-", "").lower()
    is_hex = all(c in "0123456789abcdef" for c in digits)
    return digits if is_hex and 4 <= len(digits) <= 32 else None


# What names a row besides its id: a routine's name is unique per user (the
# user narrows it down), a loop's title and a repo's OWNER/REPO need not be unique.
_NAMED: dict[Named, LiteralString] = {
    Named.ROUTINES: """
        select id from ceaseless.routines
         where (name = %(ref)s or """
    + _ID_PREFIX
    + """)
           and (%(user)s::text is null or user_id = %(user)s)
    """,
    Named.LOOPS: "select id from ceaseless.loops where title = %(ref)s or " + _ID_PREFIX,
    Named.TRACKED_REPO: "select id from ceaseless.tracked_repo where owner || '/' || repo = "
    "%(ref)s or " + _ID_PREFIX,
}


def ids_by_prefix(conn: Connection, table: LiteralString, ref: str) -> list[str]:
    """The ids (at most two) of ceaseless.<table>'s rows whose id starts with `ref`."""
    statement = sql.SQL("select id from {} where " + _ID_PREFIX + " limit 2").format(
        sql.Identifier("ceaseless", table)
    )
    rows = conn.execute(statement, {"prefix": _hex_prefix(ref)}).fetchall()
    return [str(row[0]) for row in rows]


def ids_named(conn: Connection, table: Named, ref: str, user: str | None = None) -> list[str]:
    """The ids of the rows `ref` names (its name, or its id or a prefix of it), of `user`'s when
    given."""
    params = {"ref": ref, "prefix": _hex_prefix(ref), "user": user}
    rows = conn.execute(_NAMED[table], params).fetchall()
    return [str(row[0]) for row in rows]


def set_enabled(conn: Connection, table: Named, row_id: str, enabled: bool) -> None:
    """Enable or disable a row; the table's triggers do what that means (a fresh next fire)."""
    conn.execute(
        sql.SQL("update {} set enabled = %s where id = %s").format(
            sql.Identifier("ceaseless", table)
        ),
        (enabled, row_id),
    )


def delete(conn: Connection, table: Named, row_id: str) -> None:
    """Delete a row; its history goes with it, unless the table's rules refuse."""
    conn.execute(
        sql.SQL("delete from {} where id = %s").format(sql.Identifier("ceaseless", table)),
        (row_id,),
    )


class Explained(StrEnum):
    """What the database says the waiting of (explain_job, explain_routine, explain_loop)."""

    JOB = "job"
    ROUTINE = "routine"
    LOOP = "loop"


_EXPLAIN: dict[Explained, LiteralString] = {
    Explained.JOB: "select reason, clears_at, detail from ceaseless.explain_job(%s)",
    Explained.ROUTINE: "select reason, clears_at, detail from ceaseless.explain_routine(%s)",
    Explained.LOOP: "select reason, clears_at, detail from ceaseless.explain_loop(%s)",
}


def explain(conn: Connection, what: Explained, row_id: str) -> Listing:
    """Every reason that holds the job, routine or loop, and when each clears."""
    return listing(conn, _EXPLAIN[what], (row_id,))
