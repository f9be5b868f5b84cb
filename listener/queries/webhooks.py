"""The webhook ingress's calls: the token grammar, the signing headers, and verify-and-fire.

Guarantees: `receive` is one transaction. It either raises the documented
SQLSTATE of an authentication refusal (unknown path, stale, bad signature,
replay) and changes nothing, or commits: a fired run, a held fire (buffered or
debounced), or a fire a guardrail refused, recorded as a skipped run together with the
signature's replay record.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from uuid import UUID

import psycopg
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from listener.queries import fetch


@dataclass(frozen=True)
class Received:
    """What _receive_webhook answered: the run, and the refusal when a guardrail refused it.

    `held` is `buffered` or `debounced` when the fire waits as a held fire (`run_id` is
    then the held_fires id), None when it started or was refused.
    """

    run_id: UUID
    refused_sqlstate: str | None
    refused_message: str | None
    held: str | None


async def token_pattern(conn: psycopg.AsyncConnection) -> str:
    return str(await fetch.value(conn, "select ceaseless._webhook_token_pattern()"))


async def header_names(conn: psycopg.AsyncConnection) -> frozenset[str]:
    """The request headers (lower case) the signature schemes read: the ingress passes these."""
    return frozenset(await fetch.value(conn, "select ceaseless._webhook_header_names()"))


async def receive(
    conn: psycopg.AsyncConnection, path: str, body: bytes, headers: dict[str, str]
) -> Received:
    """Verify under the target's scheme and fire; `headers` maps lower-case names to values."""
    async with conn.transaction():
        (received,) = await fetch.rows(
            conn,
            class_row(Received),
            "select run_id, refused_sqlstate, refused_message, null::text as held"
            " from ceaseless._receive_webhook(%s, %s, %s)",
            (path, body, Jsonb(headers)),
        )
        # A statement of its own: the one above does not see the row its call
        # held (its snapshot predates it).
        held = await fetch.value(
            conn, "select reason from ceaseless.held_fires where id = %s", (received.run_id,)
        )
    return replace(received, held=held)
