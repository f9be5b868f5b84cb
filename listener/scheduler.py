"""Cron: the listener's half of scheduling. SQL fires; this module keeps time.

croniter is the authority for times, and it runs here, so the listener
computes every cron routine's next_fire_at:
- on NOTIFY ceaseless_schedule (a routine was created, changed or re-enabled),
- at startup for every cron routine still waiting for one (reconcile),
- when it fires due routines: it locks them (due_cron_routines, SKIP LOCKED), computes
  each next slot and how many slots were missed, and hands both to
  fire_cron_routines in the same transaction.

Guarantees: no slot fires twice, whatever the number of listeners (the row
locks and the updated next_fire_at decide); a routine whose stored schedule
croniter rejects is disabled with its error recorded and never stops the others;
croniter runs in a worker thread, a batch per call, never on the event loop, so
computing slots cannot delay lease heartbeats or the webhook ingress (its cost
per schedule is bounded by the caps on a schedule's length and list items,
checked in SQL and again by cron.validate).
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


@dataclass(frozen=True)
class FireReport:
    fired: int
    skipped: int
    next_due: datetime | None


async def schedule(
    conn: psycopg.AsyncConnection, now: datetime, routine_ids: list[UUID] | None = None
) -> int:
    """Give cron routines waiting for one their next_fire_at, in one round trip.

    `routine_ids` limits it to those routines (the ids a ceaseless_schedule
    NOTIFY named); None schedules every waiting routine (startup, catch-up).
    """
    waiting = await queries.unscheduled(conn, routine_ids)
    if not waiting:
        return 0
    computable: list[queries.CronRoutine] = []
    nexts: list[datetime] = []
    for routine, answer in zip(
        waiting, await asyncio.to_thread(_next_fires, waiting, now), strict=True
    ):
        if isinstance(answer, cron.CronError):
            await _disable(conn, routine.id, routine.schedule, answer)
            continue
        computable.append(routine)
        nexts.append(answer)
    if not computable:
        return 0
    stored = await queries.set_next_fires(conn, computable, nexts)
    log.debug("cron.scheduled", routines=stored)
    return stored


async def reconcile(conn: psycopg.AsyncConnection, now: datetime) -> int:
    """Schedule every enabled cron routine that has no next_fire_at (startup, catch-up)."""
    return await schedule(conn, now)


async def _disable(
    conn: psycopg.AsyncConnection, routine_id: UUID, schedule: str, error: Exception
) -> None:
    # A schedule stored before the caps may be huge: show its start only.
    shown = schedule if len(schedule) <= 80 else schedule[:80] + "…"
    message = f"schedule {shown!r} cannot be used: {error}"
    await queries.disable_routine(conn, routine_id, message)
    log.warning("cron.disabled", routine=str(routine_id), error=message)


async def fire_due(conn: psycopg.AsyncConnection, now: datetime) -> FireReport:
    """Fire every cron routine due at `now`, a batch per transaction."""
    fired = skipped = 0
    while True:
        batch_fired, batch_skipped, full = await _fire_batch(conn, now)
        fired += batch_fired
        skipped += batch_skipped
        if not full:
            break
    return FireReport(fired, skipped, await queries.next_fire(conn))


async def _fire_batch(conn: psycopg.AsyncConnection, now: datetime) -> tuple[int, int, bool]:
    async with conn.transaction():
        due = await queries.lock_due(conn, now, _BATCH)
        ids: list[UUID] = []
        nexts: list[datetime] = []
        missed: list[int] = []
        for routine, answer in zip(due, await asyncio.to_thread(_due_slots, due, now), strict=True):
            if isinstance(answer, cron.CronError):
                await _disable(conn, routine.id, routine.schedule, answer)
                continue
            ids.append(routine.id)
            nexts.append(answer[0])
            missed.append(answer[1])
        if not ids:
            return 0, 0, len(due) == _BATCH
        statuses = await queries.fire(conn, ids, nexts, missed, now)
    fired = sum(1 for status in statuses if status == "running")
    if statuses:
        log.event("cron.fired", fired=fired, skipped=len(statuses) - fired)
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
