"""Cron: the listener's half of scheduling. SQL fires; this module keeps time.

croniter is the authority for times, and it runs here, so the listener
computes every schedule's next_fire_at (a routine's or a loop's: one kind of
thing here, the trigger layer's, functions/32_schedules.sql):
- on NOTIFY ceaseless_schedule (a routine or loop was created, changed or re-enabled),
- at startup for every schedule still waiting for one (reconcile),
- when it fires what is due: it locks a batch (due_schedules, SKIP LOCKED; one
  kind per batch), computes each next slot and how many slots were missed, and
  hands both to fire_cron in the same transaction, a batch per transaction,
  until nothing is due; then it starts the held fires that are due (fire_held:
  a debounce window's end, a cooldown's end, or a run's end, which a
  ceaseless_schedule NOTIFY naming held_fires announces with the routine or
  loop: only those are tried, and every one after a start or a reconnect,
  when a NOTIFY may have been missed).

Guarantees: no slot fires twice, whatever the number of listeners (the row
locks and the updated next_fire_at decide); a schedule croniter rejects is
disabled with its error recorded and never stops the others; croniter runs in
a worker thread, a batch per call, never on the event loop, so computing slots
cannot delay lease heartbeats or the webhook ingress (its cost per schedule is
bounded by the caps on a schedule's length and list items, checked in SQL when
the row is stored).
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

# Schedules fired per transaction. A batch admitted shared takes an advisory
# lock per routine whose own guardrails could bind (functions/41_fire_admission.sql),
# all held until it commits: 500 keeps two listeners' batches far below the
# server's lock table (64 locks per connection by default), and lets each take
# the fire slots it needs, so the listeners fire a fan-out side by side rather
# than one batch at a time under the exclusive fire lock.
_BATCH = 500


@dataclass(frozen=True)
class FireReport:
    fired: int
    skipped: int
    next_due: datetime | None


async def schedule(
    conn: psycopg.AsyncConnection, now: datetime, ids: list[UUID] | None = None
) -> int:
    """Give the schedules waiting for one their next_fire_at.

    `ids` limits it to those rows (the ids ceaseless_schedule NOTIFYs named,
    routines' and loops' alike); None schedules every waiting row (startup,
    catch-up).
    """
    waiting = await queries.unscheduled(conn, ids)
    if not waiting:
        return 0
    computable: list[queries.Unscheduled] = []
    nexts: list[datetime] = []
    answers = await asyncio.to_thread(_next_fires, waiting, now)
    for row, answer in zip(waiting, answers, strict=True):
        if isinstance(answer, cron.CronError):
            await _disable(conn, row.kind, row.id, row.schedule, answer)
            continue
        computable.append(row)
        nexts.append(answer)
    if not computable:
        return 0
    stored = await queries.set_next_fires(conn, computable, nexts)
    log.debug("cron.scheduled", rows=stored)
    return stored


async def reconcile(conn: psycopg.AsyncConnection, now: datetime) -> int:
    """Schedule every enabled routine and loop with a schedule and no next_fire_at."""
    return await schedule(conn, now)


async def _disable(
    conn: psycopg.AsyncConnection, kind: str, row_id: UUID, schedule: str, error: Exception
) -> None:
    # A schedule stored before the caps may be huge: show its start only.
    shown = schedule if len(schedule) <= 80 else schedule[:80] + "…"
    message = f"schedule {shown!r} cannot be used: {error}"
    await queries.disable(conn, kind, row_id, message)
    log.warning("cron.disabled", kind=kind, id=str(row_id), error=message)


async def fire_due(
    conn: psycopg.AsyncConnection, now: datetime, held_targets: list[UUID] | None = None
) -> FireReport:
    """Fire every schedule due at `now`, a batch per transaction, until none is left.

    Then start the held fires due: the timed ones, and those of `held_targets`
    (routines and loops whose run ended) waiting for a run's end; None tries
    every routine's and loop's.
    """
    fired = skipped = 0
    while True:
        batch_fired, batch_skipped, moved = await _fire_batch(conn, now)
        fired += batch_fired
        skipped += batch_skipped
        # A batch that moved nothing (none due, or the rest locked by
        # another listener) would come back the same.
        if not moved:
            break
    async with conn.transaction():
        held = await queries.fire_held(conn, now, held_targets)
    if held:
        started = sum(1 for status in held if status in ("running", "pending"))
        log.event("held.fired", started=started, tried=len(held))
        fired += started
    return FireReport(fired, skipped, await queries.next_fire(conn))


async def _fire_batch(conn: psycopg.AsyncConnection, now: datetime) -> tuple[int, int, bool]:
    """Fire one batch: (fired, skipped, whether any row was fired or disabled)."""
    async with conn.transaction():
        due = await queries.lock_due(conn, now, _BATCH)
        rows: list[queries.Due] = []
        nexts: list[datetime] = []
        missed: list[int] = []
        for row, answer in zip(due, await asyncio.to_thread(_due_slots, due, now), strict=True):
            if isinstance(answer, cron.CronError):
                await _disable(conn, row.kind, row.id, row.schedule, answer)
                continue
            rows.append(row)
            nexts.append(answer[0])
            missed.append(answer[1])
        statuses = await queries.fire(conn, rows, nexts, missed, now) if rows else []
    fired = sum(1 for status in statuses if status != "skipped")
    if statuses:
        log.event("cron.fired", kind=due[0].kind, fired=fired, skipped=len(statuses) - fired)
    return fired, len(statuses) - fired, bool(statuses) or len(rows) < len(due)


def _next_fires(
    rows: Sequence[queries.Unscheduled], now: datetime
) -> list[datetime | cron.CronError]:
    """Each row's next slot after `now`, or why it has none (in a worker thread)."""
    answers: list[datetime | cron.CronError] = []
    for row in rows:
        try:
            answers.append(cron.next_fire(row.schedule, row.timezone, now))
        except cron.CronError as exc:
            answers.append(exc)
    return answers


def _due_slots(
    due: Sequence[queries.Due], now: datetime
) -> list[tuple[datetime, int] | cron.CronError]:
    """Each due row's next slot and missed-slot count, or why not (in a worker thread)."""
    # Rows of a fan-out share schedules: compute each distinct answer once
    # per batch (croniter costs a few hundred microseconds a call).
    next_fire = functools.cache(cron.next_fire)
    slots_between = functools.cache(cron.slots_between)
    answers: list[tuple[datetime, int] | cron.CronError] = []
    for row in due:
        try:
            next_at = next_fire(row.schedule, row.timezone, now)
            # One fire stands for the latest due slot; the slots after the
            # one it was due at were missed (spec 5.2).
            missed = slots_between(row.schedule, row.timezone, row.next_fire_at, now)
        except cron.CronError as exc:
            answers.append(exc)
            continue
        answers.append((next_at, missed))
    return answers


def utcnow() -> datetime:
    return datetime.now(UTC)
