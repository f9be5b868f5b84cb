"""Cron's calls: what waits for a slot, what is due now, and the answers croniter gave.

Routines and loops are scheduled alike, each through its own SQL functions
(42_cron_schedule.sql / 41_routine_firing.sql, 57_loop_cron.sql), named by a
`CronTable`.

Guarantees: the `due` function locks what it returns until the caller's
transaction ends, so the caller fires them with the `fire` function inside that
same transaction (listener/scheduler.py does).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.rows import args_row


@dataclass(frozen=True)
class CronTable:
    """The SQL functions that schedule one kind of cron-bearing row."""

    name: str
    unscheduled: str
    set_next_fires: str
    disable: str
    due: str
    fire: str
    next_fire: str

    def call(self, function: str, args: int) -> sql.Composed:
        return sql.SQL("ceaseless.{}({})").format(
            sql.Identifier(function), sql.SQL(", ").join([sql.Placeholder()] * args)
        )


ROUTINES = CronTable(
    name="routines",
    unscheduled="unscheduled_cron_routines",
    set_next_fires="set_next_fires",
    disable="disable_routine",
    due="due_cron_routines",
    fire="fire_cron_routines",
    next_fire="next_cron_fire",
)
LOOPS = CronTable(
    name="loops",
    unscheduled="unscheduled_cron_loops",
    set_next_fires="set_loop_next_fires",
    disable="disable_loop",
    due="due_cron_loops",
    fire="fire_cron_loops",
    next_fire="next_cron_loop_fire",
)


class CronRoutine(NamedTuple):
    """A routine or loop waiting for its next slot."""

    id: UUID
    schedule: str
    timezone: str


class DueRoutine(NamedTuple):
    """A routine or loop due now, locked by the caller's transaction."""

    id: UUID
    schedule: str
    timezone: str
    next_fire_at: datetime


async def unscheduled(
    conn: psycopg.AsyncConnection, ids: list[UUID] | None, table: CronTable = ROUTINES
) -> list[CronRoutine]:
    async with conn.cursor(row_factory=args_row(CronRoutine)) as cur:
        await cur.execute(
            sql.SQL("select * from {}").format(table.call(table.unscheduled, 1)), (ids,)
        )
        return await cur.fetchall()


async def set_next_fires(
    conn: psycopg.AsyncConnection,
    routines: list[CronRoutine],
    nexts: list[datetime],
    table: CronTable = ROUTINES,
) -> int:
    cur = await conn.execute(
        sql.SQL("select {}").format(table.call(table.set_next_fires, 4)),
        (
            [r.id for r in routines],
            [r.schedule for r in routines],
            [r.timezone for r in routines],
            nexts,
        ),
    )
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def disable_routine(
    conn: psycopg.AsyncConnection, routine_id: UUID, error: str, table: CronTable = ROUTINES
) -> None:
    await conn.execute(
        sql.SQL("select {}").format(table.call(table.disable, 2)), (routine_id, error)
    )


async def lock_due(
    conn: psycopg.AsyncConnection, now: datetime, limit: int, table: CronTable = ROUTINES
) -> list[DueRoutine]:
    """Rows due at `now`, locked until the caller's transaction ends."""
    async with conn.cursor(row_factory=args_row(DueRoutine)) as cur:
        await cur.execute(
            sql.SQL("select * from {}").format(table.call(table.due, 2)), (now, limit)
        )
        return await cur.fetchall()


async def fire(
    conn: psycopg.AsyncConnection,
    ids: list[UUID],
    nexts: list[datetime],
    missed: list[int],
    now: datetime,
    table: CronTable = ROUTINES,
) -> list[str]:
    """Fire locked due rows; returns each fire's run status (running / pending, or skipped)."""
    cur = await conn.execute(
        sql.SQL("select status from {}").format(table.call(table.fire, 4)),
        (ids, nexts, missed, now),
    )
    return [row[0] for row in await cur.fetchall()]


async def next_fire(conn: psycopg.AsyncConnection, table: CronTable = ROUTINES) -> datetime | None:
    cur = await conn.execute(sql.SQL("select {}").format(table.call(table.next_fire, 0)))
    row = await cur.fetchone()
    return row[0] if row else None
