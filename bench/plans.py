"""Read the plans of the statements a PL/pgSQL function runs, for the benches and the plan tests.

The queue functions run their statements inside PL/pgSQL, so their plans are read with
auto_explain (nested statements, sent to the client as a NOTICE): the real statements as the
listener runs them, not hand-copied twins. Timing is off: what is read from a plan is its shape,
its rows and its buffers, never its time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg


def nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Every node of a plan tree, the root first."""
    found = [plan]
    for child in plan.get("Plans", []):
        found.extend(nodes(child))
    return found


@contextmanager
def explained(conn: psycopg.Connection) -> Iterator[list[dict[str, Any]]]:
    """Collect the EXPLAIN (ANALYZE, BUFFERS) of every statement run inside the block,
    nested ones included; the outermost statement's comes last."""
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
        "auto_explain.log_timing": "off",
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


def shared_buffers(plan: dict[str, Any]) -> int:
    """A plan's shared buffers, hit and read, its nested statements included."""
    return int(plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0))
