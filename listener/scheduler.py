"""Cron: the listener's half of scheduling. SQL fires; this module keeps time.

croniter is the authority for times, and it runs here, so the listener
computes every cron routine's and cron loop's next_fire_at:
- on NOTIFY ceaseless_schedule (a routine or loop was created, changed or re-enabled),
- at startup for every cron routine and loop still waiting for one (reconcile),
- when it fires due routines and loops: it locks them (due_cron_routines /
  due_cron_loops, SKIP LOCKED), computes each next slot and how many slots were
  missed, and hands both to fire_cron_routines / fire_cron_loops in the same
  transaction. Routines and loops are fired in transactions of their own.

Guarantees: no slot fires twice, whatever the number of listeners (the row
locks and the updated next_fire_at decide); a routine whose stored schedule
croniter rejects is disabled with its error recorded and never stops the others;
croniter runs in a worker thread, a batch per call, never on the event loop, so
computing slots cannot delay lease heartbeats or the webhook ingress (its cost
per schedule is bounded by the caps on a schedule's length and list items,
checked in SQL when the row is stored).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from uuid import UUID

import psycopg

from listener import cron, log
from listener.queries import schedule as queries

_BATCH = 2000

# The loops' functions, for callers that schedule loops (Maintenance).
LOOPS = queries.LOOPS


@dataclass(frozen=True)
class FireReport:
    fired: int
    skipped: int
    next_due: datetime | None


async def schedule(
    conn: psycopg.AsyncConnection,
    now: datetime,
    routine_ids: list[UUID] | None = None,
    table: queries.CronTable = queries.ROUTINES,
) -> int:
    """Give cron routines (or loops: `table`) waiting for one their next_fire_at.

    `routine_ids` limits it to those rows (the ids a ceaseless_schedule
    NOTIFY named); None schedules every waiting row (startup, catch-up).
    """
    waiting = await queries.unscheduled(conn, routine_ids, table)
    if not waiting:
        return 0
    computable: list[queries.CronRoutine] = []
    nexts: list[datetime] = []
    for routine, answer in zip(
        waiting, await asyncio.to_thread(_next_fires, waiting, now), strict=True
    ):
        if isinstance(answer, cron.CronError):
            await _disable(conn, routine.id, routine.schedule, answer, table)
            continue
        computable.append(routine)
        nexts.append(answer)
    if not computable:
        return 0
    stored = await queries.set_next_fires(conn, computable, nexts, table)
    log.debug("cron.scheduled", table=table.name, rows=stored)
    return stored


async def reconcile(conn: psycopg.AsyncConnection, now: datetime) -> int:
    """Schedule every enabled cron routine and loop with no next_fire_at (startup, catch-up)."""
    return await schedule(conn, now) + await schedule(conn, now, None, queries.LOOPS)


async def _disable(
    conn: psycopg.AsyncConnection,
    row_id: UUID,
    schedule: str,
    error: Exception,
    table: queries.CronTable,
) -> None:
    # A schedule stored before the caps may be huge: show its start only.
    shown = schedule if len(schedule) <= 80 else schedule[:80] + "…"
    message = f"schedule {shown!r} cannot be used: {error}"
    await queries.disable_routine(conn, row_id, message, table)
    log.warning("cron.disabled", table=table.name, id=str(row_id), error=message)


async def fire_due(conn: psycopg.AsyncConnection, now: datetime) -> FireReport:
    """Fire every cron routine and loop due at `now`, a batch per transaction."""
    fired = skipped = 0
    next_due: datetime | None = None
    for table in (queries.ROUTINES, queries.LOOPS):
        while True:
            batch_fired, batch_skipped, full = await _fire_batch(conn, now, table)
            fired += batch_fired
            skipped += batch_skipped
            if not full:
                break
        table_next = await queries.next_fire(conn, table)
        if table_next is not None and (next_due is None or table_next < next_due):
            next_due = table_next
    return FireReport(fired, skipped, next_due)


async def _fire_batch(
    conn: psycopg.AsyncConnection, now: datetime, table: queries.CronTable
) -> tuple[int, int, bool]:
    async with conn.transaction():
        due = await queries.lock_due(conn, now, _BATCH, table)
        ids: list[UUID] = []
        nexts: list[datetime] = []
        missed: list[int] = []
        for routine, answer in zip(due, await asyncio.to_thread(_due_slots, due, now), strict=True):
            if isinstance(answer, cron.CronError):
                await _disable(conn, routine.id, routine.schedule, answer, table)
                continue
            ids.append(routine.id)
            nexts.append(answer[0])
            missed.append(answer[1])
        if not ids:
            return 0, 0, len(due) == _BATCH
        statuses = await queries.fire(conn, ids, nexts, missed, now, table)
    fired = sum(1 for status in statuses if status != "skipped")
    if statuses:
        log.event("cron.fired", table=table.name, fired=fired, skipped=len(statuses) - fired)
    return fired, len(statuses) - fired, len(due) == _BATCH


def _next_fires(
    routines: Sequence[queries.CronRoutine], now: datetime
) -> list[datetime | cron.CronError]:
    """Each routine's next slot after `now`, or why it has none (in a worker thread)."""
    answers: list[datetime | cron.CronError] = []
    for routine in routines:
        try:
            answers.append(cron.next_fire(routine.schedule, routine.timezone, now))
        except cron.CronError as exc:
            answers.append(exc)
    return answers


def _due_slots(
    due: Sequence[queries.DueRoutine], now: datetime
) -> list[tuple[datetime, int] | cron.CronError]:
    """Each due routine's next slot and missed-slot count, or why not (in a worker thread)."""
    # Routines of a fan-out share schedules: compute each distinct answer
    # once per batch (croniter costs a few hundred microseconds a call).
    next_fire = functools.cache(cron.next_fire)
    slots_between = functools.cache(cron.slots_between)
    answers: list[tuple[datetime, int] | cron.CronError] = []
    for routine in due:
        try:
            next_at = next_fire(routine.schedule, routine.timezone, now)
            # One fire stands for the latest due slot; the slots after the
            # one it was due at were missed (spec 5.2).
            missed = slots_between(routine.schedule, routine.timezone, routine.next_fire_at, now)
        except cron.CronError as exc:
            answers.append(exc)
            continue
        answers.append((next_at, missed))
    return answers


def utcnow() -> datetime:
    return datetime.now(UTC)
