"""Named SQL for the topology engine's maintenance: approval expiry and orphaned jobs."""

from __future__ import annotations

import psycopg

from listener.queries import fetch


async def expire_approvals(conn: psycopg.AsyncConnection) -> int:
    """Fail the runs whose undecided approvals are past expires_at; how many expired."""
    return int(await fetch.value(conn, "select ceaseless.expire_approvals()") or 0)


async def cancel_orphaned_jobs(conn: psycopg.AsyncConnection) -> int:
    """Cancel live jobs of topology runs that have ended; how many."""
    return int(await fetch.value(conn, "select ceaseless.cancel_orphaned_topology_jobs()") or 0)
