"""The run observer's calls: a run's or a loop's snapshot, and its events after an id.

Guarantees: each call is one statement, so a snapshot and the id it is current
to are one view of the database; events come in id order, at most `limit` at
a time, as the JSON text the database built (functions/91_run_events.sql).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from uuid import UUID

import psycopg


class Stream(StrEnum):
    """What a follower follows: one topology run, or one loop and all its iterations."""

    RUN = "run"
    LOOP = "loop"


_SNAPSHOT = {
    Stream.RUN: "select s::text, (s ->> 'last_event_id')::bigint, (s ->> 'final')::boolean "
    "from ceaseless.run_snapshot(%s) s",
    Stream.LOOP: "select s::text, (s ->> 'last_event_id')::bigint, (s ->> 'final')::boolean "
    "from ceaseless.loop_snapshot(%s) s",
}
_EVENTS = {
    Stream.RUN: "select id, event, data::text, last from ceaseless.run_events(%s, %s, %s)",
    Stream.LOOP: "select id, event, data::text, last from ceaseless.loop_events(%s, %s, %s)",
}


@dataclass(frozen=True)
class Snapshot:
    """The state a new follower starts from, as JSON text, and the audit id it is current to."""

    data: str
    last_event_id: int
    final: bool


@dataclass(frozen=True)
class StreamEvent:
    """One change: its audit id, its name (run, node, approval, loop) and its JSON data.

    `last`: the stream ends once nothing follows it (a run's final status, a
    loop's deletion).
    """

    id: int
    event: str
    data: str
    last: bool


async def snapshot(conn: psycopg.AsyncConnection, stream: Stream, key: UUID) -> Snapshot | None:
    """The run's or loop's snapshot; None when there is no such run or loop."""
    cur = await conn.execute(_SNAPSHOT[stream], (key,))
    row = await cur.fetchone()
    if row is None or row[0] is None:
        return None
    return Snapshot(data=row[0], last_event_id=int(row[1]), final=bool(row[2]))


async def events(
    conn: psycopg.AsyncConnection, stream: Stream, key: UUID, after: int, limit: int
) -> list[StreamEvent]:
    cur = await conn.execute(_EVENTS[stream], (key, after, limit))
    return [StreamEvent(int(r[0]), r[1], r[2], bool(r[3])) for r in await cur.fetchall()]
