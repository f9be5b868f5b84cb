"""The LISTEN connection's statements (listener/daemon/notifier.py): its session, its
channels, and the probe that proves it alive.

Guarantees: each call is one statement on the connection it is given, which must be
that session's own (a SET and a LISTEN hold for the session); the channel is an
identifier, quoted as one, never text spliced into the statement.
"""

from __future__ import annotations

import psycopg
from psycopg import sql


async def end_session_when_idle(conn: psycopg.AsyncConnection, millis: int) -> None:
    """Let the server end this session once it has been idle for `millis` ms (SET takes no
    parameters: the number is a literal)."""
    await conn.execute(sql.SQL("set idle_session_timeout = {}").format(sql.Literal(millis)))


async def listen(conn: psycopg.AsyncConnection, channel: str) -> None:
    await conn.execute(sql.SQL("listen {}").format(sql.Identifier(channel)))


async def probe(conn: psycopg.AsyncConnection) -> None:
    """A round trip that answers at once on a live connection."""
    await conn.execute("select 1")
