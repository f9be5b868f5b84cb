"""Cron's calls: routines waiting for a slot, routines due now, and the answers croniter gave.

Guarantees: `due_cron_routines` locks what it returns until the caller's
transaction ends, so the caller fires them with `fire_cron_routines` inside
that same transaction (listener/scheduler.py does).
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple
from uuid import UUID

import psycopg
from psycopg.rows import args_row


class CronRoutine(NamedTuple):
    id: UUID
    schedule: str
    timezone: str


class DueRoutine(NamedTuple):
    id: UUID
    schedule: str
    timezone: str
    next_fire_at: datetime


async def unscheduled(conn: psycopg.AsyncConnection, ids: list[UUID] | None) -> list[CronRoutine]:
    async with conn.cursor(row_factory=args_row(CronRoutine)) as cur:
        await cur.execute("select * from ceaseless.unscheduled_cron_routines(%s)", (ids,))
        return await cur.fetchall()


async def set_next_fires(
    conn: psycopg.AsyncConnection,
    routines: list[CronRoutine],
    nexts: list[datetime],
) -> int:
    cur = await conn.execute(
        "select ceaseless.set_next_fires(%s, %s, %s, %s)",
        (
            [r.id for r in routines],
            [r.schedule for r in routines],
            [r.timezone for r in routines],
            nexts,
        ),
    )
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def disable_routine(conn: psycopg.AsyncConnection, routine_id: UUID, error: str) -> None:
    await conn.execute("select ceaseless.disable_routine(%s, %s)", (routine_id, error))


async def lock_due(conn: psycopg.AsyncConnection, now: datetime, limit: int) -> list[DueRoutine]:
    """Routines due at `now`, locked until the caller's transaction ends."""
    async with conn.cursor(row_factory=args_row(DueRoutine)) as cur:
        await cur.execute("select * from ceaseless.due_cron_routines(%s, %s)", (now, limit))
        return await cur.fetchall()


async def fire(
    conn: psycopg.AsyncConnection,
    ids: list[UUID],
    nexts: list[datetime],
    missed: list[int],
    now: datetime,
) -> list[str]:
    """Fire locked due routines; returns each fire's routine_runs status (running or skipped)."""
    cur = await conn.execute(
        "select status from ceaseless.fire_cron_routines(%s, %s, %s, %s)",
        (ids, nexts, missed, now),
    )
    return [row[0] for row in await cur.fetchall()]


async def next_fire(conn: psycopg.AsyncConnection) -> datetime | None:
    cur = await conn.execute("select ceaseless.next_cron_fire()")
    row = await cur.fetchone()
    return row[0] if row else None
