"""Named SQL for the routine engine's maintenance: the running count's recount, and the
engine's per-backend transaction state of backends that have exited."""

from __future__ import annotations

import psycopg

from listener.queries import fetch


async def recount_running(conn: psycopg.AsyncConnection) -> int | None:
    """Correct the running-count shards from routine_runs; the correction, or None when
    another listener was recounting."""
    correction = await fetch.value(conn, "select ceaseless.recount_routine_run_shards()")
    return None if correction is None else int(correction)


async def forget_ended_backends(conn: psycopg.AsyncConnection) -> int:
    """Delete the transaction_state rows of backends that have exited; how many."""
    return int(await fetch.value(conn, "select ceaseless.forget_ended_backends()") or 0)
