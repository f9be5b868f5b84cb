"""How an async call reads its statement's answer: its rows or its one row, made into the
row type its caller names, or the one value a function returns.

Guarantees: each helper runs exactly one statement on the connection it is given
and reads the whole answer before it returns, so the cursor is never left open.
"""

from __future__ import annotations

from typing import Any, LiteralString, TypeVar

import psycopg
from psycopg import sql
from psycopg.rows import BaseRowFactory

T = TypeVar("T")

Statement = LiteralString | sql.Composable
Params = tuple[Any, ...] | dict[str, Any]


async def rows(
    conn: psycopg.AsyncConnection[Any],
    row_factory: BaseRowFactory[T],
    statement: Statement,
    params: Params = (),
) -> list[T]:
    """Every row of the statement, each made by `row_factory` (args_row(X), class_row(X),
    dict_row)."""
    async with conn.cursor(row_factory=row_factory) as cur:
        await cur.execute(statement, params)
        return await cur.fetchall()


async def row(
    conn: psycopg.AsyncConnection[Any],
    row_factory: BaseRowFactory[T],
    statement: Statement,
    params: Params = (),
) -> T | None:
    """The statement's one row (the first, if it returned more); None when it returned none."""
    found = await rows(conn, row_factory, statement, params)
    return found[0] if found else None


async def value(
    conn: psycopg.AsyncConnection[Any], statement: Statement, params: Params = ()
) -> Any:
    """The first column of the first row; None when the statement returned no row."""
    cur = await conn.execute(statement, params)
    row = await cur.fetchone()
    return None if row is None else row[0]
