"""Read the plans of the statements a PL/pgSQL function runs.

The queue functions run their statements inside PL/pgSQL, so their plans are
read with auto_explain (nested statements, sent to the client as a NOTICE) —
the real statements as the listener runs them, not hand-copied twins.

A planner setting on a function is kept only with evidence
(docs/performance.md, "Planner settings on functions"); `setting_reset` lets a
plan test show that evidence: the shape the setting prevents appears without it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql


def nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of a plan tree, the root first."""
    found = [plan]
    for child in plan.get("Plans", []):
        found.extend(nodes(child))
    return found


@contextmanager
def explained(conn: psycopg.Connection) -> Iterator[list[dict[str, Any]]]:
    """Collect the EXPLAIN (ANALYZE, BUFFERS) of every statement run inside the block."""
    plans: list[dict[str, Any]] = []

    def on_notice(diag: psycopg.errors.Diagnostic) -> None:
        text = diag.message_primary or ""
        if "Query Text" in text:
            plans.append(json.loads(text[text.index("{") :]))

    conn.add_notice_handler(on_notice)
    conn.execute("load 'auto_explain'")
    for setting, value in {
        "auto_explain.log_min_duration": "0",
        "auto_explain.log_analyze": "on",
        "auto_explain.log_buffers": "on",
        "auto_explain.log_nested_statements": "on",
        "auto_explain.log_format": "json",
        "auto_explain.log_level": "notice",
        "client_min_messages": "notice",
    }.items():
        conn.execute(f"set {setting} = {value}")
    try:
        yield plans
    finally:
        conn.execute("set auto_explain.log_min_duration = -1")
        conn.remove_notice_handler(on_notice)


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
