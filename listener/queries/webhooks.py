"""The webhook ingress's calls: the token grammar, the signing headers, and verify-and-fire.

Guarantees: `receive` is one transaction. It either raises the documented
SQLSTATE of an authentication refusal (unknown path, stale, bad signature,
replay) and changes nothing, or commits: a fired run, or a fire a guardrail
refused, recorded as a skipped run together with the signature's replay record.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb


@dataclass(frozen=True)
class Received:
    """What _receive_webhook answered: the run, and the refusal when a guardrail refused it."""

    run_id: UUID
    refused_sqlstate: str | None
    refused_message: str | None


async def token_pattern(conn: psycopg.AsyncConnection) -> str:
    cur = await conn.execute("select ceaseless._webhook_token_pattern()")
    row = await cur.fetchone()
    assert row is not None
    return str(row[0])


async def header_names(conn: psycopg.AsyncConnection) -> frozenset[str]:
    """The request headers (lower case) the signature schemes read: the ingress passes these."""
    cur = await conn.execute("select ceaseless._webhook_header_names()")
    row = await cur.fetchone()
    assert row is not None
    return frozenset(row[0])


async def receive(
    conn: psycopg.AsyncConnection, path: str, body: bytes, headers: dict[str, str]
) -> Received:
    """Verify under the target's scheme and fire; `headers` maps lower-case names to values."""
    cur = await conn.execute(
        "select run_id, refused_sqlstate, refused_message"
        " from ceaseless._receive_webhook(%s, %s, %s)",
        (path, body, Jsonb(headers)),
    )
    row = await cur.fetchone()
    assert row is not None, "_receive_webhook returns one row or raises"
    return Received(*row)
