"""The webhook ingress's calls: verify-and-fire, and record a refusal.

Guarantees: `receive` is one transaction that either fires (returning the run
id) or raises the documented SQLSTATE and changes nothing; `record_refusal`
writes the refusal's record afterwards, when SQL decides it is one to keep.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

import psycopg


async def receive(
    conn: psycopg.AsyncConnection, path: str, body: bytes, signature: str, sent_at: datetime
) -> UUID | None:
    cur = await conn.execute(
        "select ceaseless.receive_webhook(%s, %s, %s, %s)", (path, body, signature, sent_at)
    )
    row = await cur.fetchone()
    return row[0] if row else None


async def record_refusal(
    conn: psycopg.AsyncConnection, path: str, sqlstate: str, body: bytes
) -> None:
    await conn.execute(
        "select ceaseless._record_refused_webhook(%s, %s, %s)", (path, sqlstate, body)
    )
