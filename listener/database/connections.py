"""Where the database is, and the only place that opens connections to it.

Order of precedence: DATABASE_URL; else the standard libpq PG* variables (an
empty conninfo lets libpq read them); else the embedded PostgreSQL under
$CEASELESS_HOME, started on demand.

Guarantees:
- every connection is autocommit (each SQL function call is its own
  transaction, as the functions are designed) and says who it is in
  application_name, so operators can find a listener in pg_stat_activity;
- every connection has a deadline to connect (connect_timeout) and, over TCP,
  keepalives and tcp_user_timeout, so a peer that vanished is noticed by the
  kernel instead of never;
- the listener's connections also carry server-side deadlines
  (statement_timeout, idle_in_transaction_session_timeout), so a backend whose
  client was cut off stops working and lets go of its locks by itself; through
  a pooler they are the login role's, which the listener checks at startup;
- decoding a JSON or jsonb value never raises: a document nested deeper than
  Python's decoder can recurse arrives as an `UndecodableJSON` in its place,
  so one bad row fails alone instead of stopping the part that read it;
- `bounded` gives any call on a connection a deadline on the client side
  too, for the failure no timer in the kernel sees: a peer that acknowledges
  every byte and answers none (a hung server, a frozen middlebox). Past the
  deadline the connection's socket is shut down under the call, which fails
  at once, and the connection is never used again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool

from listener import log
from listener.database.embedded import EmbeddedServer, default_home

T = TypeVar("T")

_LIBPQ_VARIABLES = ("PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE")

CONNECT_TIMEOUT_SECS = 10
# Over TCP: probe an idle connection after 10 s, every 5 s, give up after 3
# unanswered probes; and give up on data the peer has not acknowledged for
# 20 s. Unix sockets ignore these (libpq skips them), and need none.
_TCP_DEADLINES: dict[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 20_000,
}


# The pool's check of an idle connection before handing it out.
_CHECK_DEADLINE_SECS = 3.0


class DeadlineExceeded(psycopg.OperationalError):
    """A call outlived its deadline; its connection was closed under it.

    An OperationalError, so every caller that copes with a lost connection
    copes with a hung one the same way.
    """


@dataclass(frozen=True)
class UndecodableJSON:
    """Stands in for a JSON value that Python cannot decode: nested deeper than its recursion.

    The database refuses such documents in every column written from outside
    (functions/02_bounded_json.sql); one stored before that rule, or written
    around it, must still cost only its own row.
    """

    characters: int

    def __str__(self) -> str:
        return f"a JSON document of {self.characters} characters, nested too deeply to decode"


def decode_json(data: bytes | bytearray | memoryview | str) -> Any:
    """The decoded value, or an UndecodableJSON in its place; never raises RecursionError."""
    if isinstance(data, memoryview):
        data = bytes(data)
    try:
        return json.loads(data)
    except RecursionError:
        return UndecodableJSON(len(data))


def _decode_json_safely(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    set_json_loads(decode_json, conn)


def uses_embedded() -> bool:
    """True when neither DATABASE_URL nor the libpq PG* variables point elsewhere."""
    return not os.environ.get("DATABASE_URL") and not any(
        os.environ.get(name) for name in _LIBPQ_VARIABLES
    )


def database_url(*, start: bool = True) -> str:
    """The conninfo to use, starting the embedded server when it is the database."""
    if url := os.environ.get("DATABASE_URL"):
        return url
    if not uses_embedded():
        return ""
    server = EmbeddedServer(default_home())
    return server.start() if start else server.url()


def connection_kwargs(
    application_name: str,
    *,
    server_deadline: float | None = None,
    url: str = "",
    pooled: bool = False,
) -> dict[str, Any]:
    """libpq parameters for one of our connections.

    `server_deadline` (seconds) also asks the server to end any statement, and
    any transaction left idle, that outlives it: the listener's calls are all
    short, and a backend whose client is gone must not hold locks forever.

    `pooled`: the connection goes through a pooler in transaction mode
    (listener/database/pooler.py), which refuses startup options, so the
    deadlines must come from the login role instead; and which lends each
    transaction any server connection, where a statement psycopg prepared on
    another does not exist, so nothing is prepared.
    """
    kwargs: dict[str, Any] = {
        "autocommit": True,
        "application_name": application_name,
        "connect_timeout": CONNECT_TIMEOUT_SECS,
        **_TCP_DEADLINES,
    }
    if pooled:
        kwargs["prepare_threshold"] = None
    elif server_deadline is not None:
        millis = int(server_deadline * 1000)
        ours = f"-c statement_timeout={millis} -c idle_in_transaction_session_timeout={millis}"
        # Keep the operator's own options (a search_path, a role); ours come
        # last so they win where both set the same thing.
        theirs = conninfo_to_dict(url).get("options") if url else None
        kwargs["options"] = f"{theirs} {ours}" if theirs else ours
    return kwargs


def connect(url: str, *, application_name: str = "ceaseless") -> psycopg.Connection:
    conn = psycopg.connect(url, **connection_kwargs(application_name))
    _decode_json_safely(conn)
    return conn


async def connect_async(
    url: str, *, application_name: str = "ceaseless", server_deadline: float | None = None
) -> psycopg.AsyncConnection:
    conn = await psycopg.AsyncConnection.connect(
        url, **connection_kwargs(application_name, server_deadline=server_deadline, url=url)
    )
    _decode_json_safely(conn)
    return conn


def sever(conn: psycopg.AsyncConnection) -> None:
    """Shut the connection's socket down, so a call hanging on it fails at once.

    Not conn.close(): closing waits for the call in progress, which is what
    hangs; and not cancelling the task: psycopg then asks the server to cancel
    the query over a second connection, which hangs the same way. A shut-down
    socket reads as end of file, libpq reports the connection lost, and the
    pool discards it.
    """
    with contextlib.suppress(psycopg.Error, OSError, ValueError):
        duplicate = socket.socket(fileno=os.dup(conn.pgconn.socket))
        try:
            duplicate.shutdown(socket.SHUT_RDWR)
        finally:
            duplicate.close()


async def bounded(
    conn: psycopg.AsyncConnection, call: Awaitable[T], deadline: float, what: str
) -> T:
    """Await `call` (which uses `conn`), severing `conn` if it takes over `deadline` seconds.

    Raises DeadlineExceeded past the deadline. If the caller is cancelled
    meanwhile the connection is severed too: a half-finished call leaves it
    in a state nobody should reuse.
    """
    task = asyncio.ensure_future(call)
    try:
        done, _ = await asyncio.wait({task}, timeout=deadline)
    except asyncio.CancelledError:
        sever(conn)
        await _settle(task)
        raise
    if done:
        return task.result()
    sever(conn)
    await _settle(task)
    log.warning("db.deadline_exceeded", call=what, deadline_secs=deadline)
    raise DeadlineExceeded(
        f"{what} did not answer within {deadline:g} s; its connection was closed and is replaced"
    )


async def _settle(task: asyncio.Future[Any]) -> None:
    """Let a call on a severed connection fail (it does so at once) and drop its error."""
    try:
        async with asyncio.timeout(5):
            await asyncio.shield(task)
    except TimeoutError:
        task.cancel()
    except BaseException:  # its error is the severed connection's: already reported
        pass
    if task.done() and not task.cancelled():
        task.exception()  # retrieved, so asyncio does not log it as never retrieved


def pool(
    url: str, *, application_name: str, size: int, deadline: float, pooled: bool = False
) -> AsyncConnectionPool:
    """The listener's pool: bounded connects, bounded checks, server-side deadlines (the login
    role's when `pooled`: through a pooler, see connection_kwargs)."""

    async def check(conn: psycopg.AsyncConnection) -> None:
        # A killed backend fails this at once; a frozen one would hang it
        # forever without a deadline (the pool's own check has none). An
        # empty query that takes seconds is a dead connection, and the next
        # idle one (possibly frozen too) is waiting behind it: a short one.
        await bounded(conn, conn.execute(""), min(deadline, _CHECK_DEADLINE_SECS), "pool check")

    async def configure(conn: psycopg.AsyncConnection) -> None:
        _decode_json_safely(conn)

    return AsyncConnectionPool(
        url,
        min_size=1,
        max_size=size,
        kwargs=connection_kwargs(
            application_name, server_deadline=deadline, url=url, pooled=pooled
        ),
        configure=configure,
        check=check,
        reconnect_timeout=0,
        timeout=deadline,
        open=False,
    )


async def call(
    db_pool: AsyncConnectionPool,
    what: str,
    fn: Callable[[psycopg.AsyncConnection], Awaitable[T]],
    deadline: float,
) -> T:
    """One call on a pooled connection, within `deadline` seconds (waiting for one included)."""
    async with db_pool.connection(timeout=deadline) as conn:
        return await bounded(conn, fn(conn), deadline, what)
