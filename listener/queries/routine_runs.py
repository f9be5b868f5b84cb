"""Named SQL for the routine engine's maintenance: the running count's recount."""

from __future__ import annotations

import psycopg


async def recount_running(conn: psycopg.AsyncConnection) -> int | None:
    """Correct the running-count shards from routine_runs; the correction, or None when
    another listener was recounting."""
    cur = await conn.execute("select ceaseless.recount_routine_run_shards()")
    row = await cur.fetchone()
    return None if row is None or row[0] is None else int(row[0])
