"""The notification outbox's calls: claim a batch of due notifications, report how each went.

Guarantees: whether a failure is retried, when, and when to give up is decided
in SQL (functions/60_notifications.sql); claims are leased, so a batch that is
claimed and never finished comes due again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple
from uuid import UUID

import psycopg
from psycopg.rows import args_row, class_row
from psycopg.types.json import Jsonb

from listener.queries import fetch


@dataclass(frozen=True)
class ClaimedNotification:
    """A row of claim_notifications: `state` 'claimed' means deliver it now;
    'delivered' and 'failed' were settled in SQL and are only reported."""

    id: UUID
    state: str
    attempts: int
    sink_name: str
    sink: dict[str, Any] | None
    kind: str
    subject: str
    body: str
    recipient: str | None
    source_table: str
    source_id: UUID
    created_at: datetime
    last_error: str | None


class Settled(NamedTuple):
    """finish_notifications' answer: delivered, pending (a retry is scheduled) or failed."""

    id: UUID
    status: str
    attempts: int
    next_attempt_at: datetime | None
    last_error: str | None


async def claim(
    conn: psycopg.AsyncConnection, worker: str, limit: int
) -> list[ClaimedNotification]:
    return await fetch.rows(
        conn,
        class_row(ClaimedNotification),
        "select * from ceaseless.claim_notifications(%s, %s)",
        (worker, limit),
    )


async def finish(
    conn: psycopg.AsyncConnection, worker: str, results: list[dict[str, Any]]
) -> list[Settled]:
    return await fetch.rows(
        conn,
        args_row(Settled),
        "select id, status, attempts, next_attempt_at, last_error "
        "from ceaseless.finish_notifications(%s, %s)",
        (worker, Jsonb(results)),
    )
