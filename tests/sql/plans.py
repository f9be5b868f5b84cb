"""Read the plans of the statements a PL/pgSQL function runs.

`explained` and `nodes` are the benches' own (bench/plans.py), so a plan test and
a bench read a plan the same way.

A planner setting on a function is kept only with evidence
(docs/performance.md, "Planner settings on functions"); `setting_reset` lets a
plan test show that evidence: the shape the setting prevents appears without it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql

from bench.plans import explained, nodes

__all__ = ["explained", "nodes", "setting_reset", "statement"]


def statement(plans: list[dict[str, Any]], starts_with: str) -> dict[str, Any]:
    """The plan of the one statement whose text starts with `starts_with`."""
    found = [p for p in plans if p["Query Text"].lstrip().startswith(starts_with)]
    assert len(found) == 1, [p["Query Text"][:60] for p in plans]
    return found[0]["Plan"]


@contextmanager
def setting_reset(conn: psycopg.Connection, function: str, setting: str) -> Iterator[None]:
    """Run the block with `setting` taken off ceaseless.`function`'s SET clause (ALTER
    FUNCTION … RESET), so the function plans as the server would; restored after."""
    row = conn.execute(
        "select value from pg_proc p, unnest(p.proconfig) c, split_part(c, '=', 1) name, "
        "substr(c, length(name) + 2) value "
        "where p.oid = %s::regproc and name = %s",
        (f"ceaseless.{function}", setting),
    ).fetchone()
    # A test of what a setting buys means nothing once the function has lost it.
    assert row is not None, f"{function} no longer sets {setting}"
    target = sql.Identifier("ceaseless", function)
    conn.execute(sql.SQL("alter function {} reset {}").format(target, sql.Identifier(setting)))
    try:
        yield
    finally:
        conn.execute(
            sql.SQL("alter function {} set {} = {}").format(
                target, sql.Identifier(setting), sql.Literal(row[0])
            )
        )
