"""Where the database is, and the only place that opens connections to it.

Order of precedence: DATABASE_URL; else the standard libpq PG* variables (an
empty conninfo lets libpq read them); else the embedded PostgreSQL under
$CEASELESS_HOME, started on demand.

Guarantees: every connection is autocommit (each SQL function call is its own
transaction, as the functions are designed) and says who it is in
application_name, so operators can find a listener in pg_stat_activity.
"""

from __future__ import annotations

import os

import psycopg
from psycopg_pool import AsyncConnectionPool

from listener.embedded import EmbeddedServer, default_home

_LIBPQ_VARIABLES = ("PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE")


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


def connect(url: str, *, application_name: str = "ceaseless") -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True, application_name=application_name)


async def connect_async(
    url: str, *, application_name: str = "ceaseless"
) -> psycopg.AsyncConnection:
    return await psycopg.AsyncConnection.connect(
        url, autocommit=True, application_name=application_name
    )


def pool(url: str, *, application_name: str, size: int) -> AsyncConnectionPool:
    """A small pool for the listener's queue calls; opened by the caller."""
    return AsyncConnectionPool(
        url,
        min_size=1,
        max_size=size,
        kwargs={"autocommit": True, "application_name": application_name},
        # A killed backend must not be handed out again: check on checkout.
        check=AsyncConnectionPool.check_connection,
        reconnect_timeout=0,
        open=False,
    )
