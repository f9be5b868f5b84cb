"""Named SQL for the topology engine's maintenance: approval expiry and orphaned jobs."""

from __future__ import annotations

import psycopg


async def expire_approvals(conn: psycopg.AsyncConnection) -> int:
    """Fail the runs whose undecided approvals are past expires_at; how many expired."""
    cur = await conn.execute("select ceaseless.expire_approvals()")
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def cancel_orphaned_jobs(conn: psycopg.AsyncConnection) -> int:
    """Cancel live jobs of topology runs that have ended; how many."""
    cur = await conn.execute("select ceaseless.cancel_orphaned_topology_jobs()")
    row = await cur.fetchone()
    return int(row[0]) if row else 0
