"""Retention: the prune pass that a listener's maintenance and `ceaseless prune` both run
(functions/96_retention.sql, prune), and the interval between a listener's passes.

Guarantees: `prune` is one call of prune(), so one transaction (connections are
autocommit): what it removes and its audit row commit together. It returns no rows when
another prune holds the advisory lock, and removes nothing then. `prune_all` repeats
passes, each its own call and so each committed, until no kind removes a whole batch.
Which rows go, and how long each kind is kept, is the database's rule; arguments left
None take the function's defaults.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import class_row

from listener.queries import fetch


@dataclass(frozen=True)
class Pruned:
    """How many rows of one kind a pass removed (or, dry, would remove)."""

    kind: str
    removed: int


async def prune(
    conn: psycopg.AsyncConnection[Any],
    *,
    now: datetime | None = None,
    limit: int | None = None,
    only: str | None = None,
    dry_run: bool = False,
) -> list[Pruned]:
    """One pass of prune(): a row per kind, in the order it prunes them; [] when another
    prune runs."""
    given = {"p_now": now, "p_limit": limit, "p_only": only, "p_dry_run": dry_run or None}
    named = [name for name, value in given.items() if value is not None]
    arguments = sql.SQL(", ").join(
        sql.SQL("{} => {}").format(sql.Identifier(name), sql.Placeholder(name)) for name in named
    )
    return await fetch.rows(
        conn,
        class_row(Pruned),
        sql.SQL("select kind, removed from ceaseless.prune({})").format(arguments),
        {name: given[name] for name in named},
    )


async def prune_all(
    one_pass: Callable[[], Awaitable[list[Pruned]]], limit: int
) -> dict[str, int] | None:
    """Run `one_pass` (a `prune` of `limit` rows a kind, on whatever connection and retry
    policy the caller keeps) until no kind removes `limit`: the total of each kind, in
    prune's order; None when another prune held the lock at the first pass (a later pass
    that finds it held ends the run with what went so far)."""
    totals: dict[str, int] = {}
    while True:
        passed = await one_pass()
        if not passed:
            return totals or None
        for row in passed:
            totals[row.kind] = totals.get(row.kind, 0) + row.removed
        if max(row.removed for row in passed) < limit:
            return totals


async def interval(conn: psycopg.AsyncConnection[Any]) -> int:
    """Seconds between a listener's prune passes (the setting prune_interval_secs)."""
    return int(await fetch.value(conn, "select ceaseless._setting_int('prune_interval_secs')"))
