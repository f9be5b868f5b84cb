"""Column defaults as the catalog states them: for tests that the CLI leaves defaults alone."""

from __future__ import annotations

import psycopg
from psycopg import sql


def column_defaults(conn: psycopg.Connection, table: str, columns: list[str]) -> dict[str, object]:
    """Each column's default of ceaseless.<table>, evaluated, read from information_schema."""
    rows = conn.execute(
        "select column_name, column_default from information_schema.columns "
        "where table_schema = 'ceaseless' and table_name = %s and column_name = any(%s)",
        (table, columns),
    ).fetchall()
    assert sorted(name for name, _ in rows) == sorted(columns), f"ceaseless.{table} changed"
    defaults: dict[str, object] = {}
    for name, expression in rows:
        assert expression is not None, f"ceaseless.{table}.{name} has no default any more"
        row = conn.execute(sql.SQL("select {}").format(sql.SQL(expression))).fetchone()
        assert row is not None
        defaults[name] = row[0]
    return defaults


def shift_column_defaults(
    conn: psycopg.Connection, table: str, columns: list[str]
) -> dict[str, object]:
    """Move each integer default one up (in this test's database) and return the new defaults.

    A command that copied the committed numbers into Python would still match the
    old defaults; after the shift only one that leaves the column out matches.
    """
    for name, value in column_defaults(conn, table, columns).items():
        assert isinstance(value, int)
        conn.execute(
            sql.SQL("alter table {table} alter column {column} set default {value}").format(
                table=sql.Identifier("ceaseless", table),
                column=sql.Identifier(name),
                value=sql.Literal(value + 1),
            )
        )
    return column_defaults(conn, table, columns)
