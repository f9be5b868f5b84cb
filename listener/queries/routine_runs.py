"""Named SQL for the routine engine's maintenance: the running count's recount, and the
engine's per-backend transaction state of backends that have exited."""

from __future__ import annotations

import psycopg


async def recount_running(conn: psycopg.AsyncConnection) -> int | None:
    """Correct the running-count shards from routine_runs; the correction, or None when
    another listener was recounting."""
    cur = await conn.execute("select ceaseless.recount_routine_run_shards()")
    row = await cur.fetchone()
    return None if row is None or row[0] is None else int(row[0])


async def forget_ended_backends(conn: psycopg.AsyncConnection) -> int:
    """Delete the transaction_state rows of backends that have exited; how many."""
    cur = await conn.execute("select ceaseless.forget_ended_backends()")
    row = await cur.fetchone()
    return int(row[0]) if row else 0
