"""Cron's calls: what waits for a slot, what is due now, and the answers croniter gave.

Routines and loops are one kind of thing here, a schedule, named by its kind and id
(functions/32_schedules.sql, the trigger layer): one function per step, whichever the
rows are.

Guarantees: `lock_due` locks what it returns until the caller's transaction ends, so the
caller fires them with `fire` inside that same transaction (listener/daemon/scheduler.py does).
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple
from uuid import UUID

import psycopg
from psycopg.rows import args_row

from listener.queries import fetch


class Unscheduled(NamedTuple):
    """A routine or loop waiting for its next slot."""

    kind: str
    id: UUID
    schedule: str
    timezone: str


class Due(NamedTuple):
    """A routine or loop due now, locked by the caller's transaction."""

    kind: str
    id: UUID
    schedule: str
    timezone: str
    next_fire_at: datetime


async def unscheduled(conn: psycopg.AsyncConnection, ids: list[UUID] | None) -> list[Unscheduled]:
    return await fetch.rows(
        conn,
        args_row(Unscheduled),
        "select kind, id, schedule, timezone from ceaseless.unscheduled_schedules(%s)",
        (ids,),
    )


async def set_next_fires(
    conn: psycopg.AsyncConnection, rows: list[Unscheduled], nexts: list[datetime]
) -> int:
    count = await fetch.value(
        conn,
        "select ceaseless.set_next_fires(%s, %s, %s, %s, %s)",
        (
            [r.kind for r in rows],
            [r.id for r in rows],
            [r.schedule for r in rows],
            [r.timezone for r in rows],
            nexts,
        ),
    )
    return int(count or 0)


async def disable(conn: psycopg.AsyncConnection, kind: str, row_id: UUID, error: str) -> None:
    await conn.execute("select ceaseless.disable_schedule(%s, %s, %s)", (kind, row_id, error))


async def lock_due(conn: psycopg.AsyncConnection, now: datetime, limit: int) -> list[Due]:
    """Rows due at `now` (one kind per batch), locked until the caller's transaction ends."""
    return await fetch.rows(
        conn,
        args_row(Due),
        "select kind, id, schedule, timezone, next_fire_at from ceaseless.due_schedules(%s, %s)",
        (now, limit),
    )


async def fire(
    conn: psycopg.AsyncConnection,
    rows: list[Due],
    nexts: list[datetime],
    missed: list[int],
    now: datetime,
) -> list[str]:
    """Fire locked due rows; returns each fire's run status (running / pending, or skipped)."""
    cur = await conn.execute(
        "select status from ceaseless.fire_cron(%s, %s, %s, %s, %s)",
        ([r.kind for r in rows], [r.id for r in rows], nexts, missed, now),
    )
    return [row[0] for row in await cur.fetchall()]


async def fire_held(
    conn: psycopg.AsyncConnection, now: datetime, targets: list[UUID] | None
) -> list[str]:
    """Start the held fires due at `now` (functions/33_held_fires.sql); each one's status.

    `targets` names the routines and loops whose run ended; None tries every one.
    """
    cur = await conn.execute(
        "select status from ceaseless.fire_held(%s, p_targets => %s)", (now, targets)
    )
    return [row[0] for row in await cur.fetchall()]


async def next_fire(conn: psycopg.AsyncConnection) -> datetime | None:
    return await fetch.value(conn, "select ceaseless.next_schedule_fire()")
