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
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from listener.queries import fetch


@dataclass(frozen=True)
class Received:
    """What _receive_webhook answered: the run, and the refusal when a guardrail refused it."""

    run_id: UUID
    refused_sqlstate: str | None
    refused_message: str | None


async def token_pattern(conn: psycopg.AsyncConnection) -> str:
    return str(await fetch.value(conn, "select ceaseless._webhook_token_pattern()"))


async def header_names(conn: psycopg.AsyncConnection) -> frozenset[str]:
    """The request headers (lower case) the signature schemes read: the ingress passes these."""
    return frozenset(await fetch.value(conn, "select ceaseless._webhook_header_names()"))


async def receive(
    conn: psycopg.AsyncConnection, path: str, body: bytes, headers: dict[str, str]
) -> Received:
    """Verify under the target's scheme and fire; `headers` maps lower-case names to values."""
    (received,) = await fetch.rows(
        conn,
        class_row(Received),
        "select run_id, refused_sqlstate, refused_message"
        " from ceaseless._receive_webhook(%s, %s, %s)",
        (path, body, Jsonb(headers)),
    )
    return received
