"""Deciding an approval: the dashboard's approve / reject buttons and `ceaseless approve|reject`.

One statement for both: the command line runs it on an async connection of its
own (listener/cli/common.py, `call_async`), so it is written once.

Guarantees: one transaction; decide_approval holds every rule of a decision (who
may, whether it still can) and audits it, raising CE404, CE409 or CE422 when it
refuses, which reach the caller as psycopg errors.
"""

from __future__ import annotations

from uuid import UUID

import psycopg


async def decide(
    conn: psycopg.AsyncConnection,
    approval_id: UUID | str,
    approve: bool,
    by: str | None,
    note: str | None,
) -> None:
    """Approve or reject; `by` None: the database role the connection is."""
    await conn.execute(
        "select ceaseless.decide_approval(%s, %s, %s, %s)", (approval_id, approve, by, note)
    )
