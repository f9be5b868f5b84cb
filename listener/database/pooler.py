"""A connection pooler (PgBouncer in transaction mode) in front of the database: found, and
kept away from what needs a session of its own.

Such a pooler lends a server connection for one transaction at a time, so whatever a session
keeps between transactions is lost, or lands in another client's session: LISTEN, SET, session
advisory locks, prepared statements, and the server-side deadlines a connection asks for when
it opens (the `options` startup parameter, which PgBouncer refuses). Everything the listener
does on its pool is one SQL function call per transaction, its locks transaction-scoped, so
the pool may go through a pooler; LISTEN and migrations may not.

Guarantees:
- a connection is taken to go through a pooler exactly when its backend is not the process
  it greeted: a pooler answers the startup with its own BackendKeyData, so the pid libpq was
  given is not pg_backend_pid();
- `find_route` refuses, in one line naming the option to set, a listener whose LISTEN would
  go through a pooler or to another database than its work; `refuse_for_migrations` refuses
  a migration runner's URL that goes through one;
- through a pooler, `find_route` reports which server-side deadlines the login role leaves
  off, with the ALTER ROLE statements that set them, since the listener cannot ask for them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import psycopg
from psycopg import sql

from listener.database import connections
from listener.queries.session import Session, session

LISTEN_URL_OPTION = "--listen-url (or CEASELESS_LISTEN_URL)"


class PoolerRefused(ValueError):
    """What needs a session of its own would go through a pooler; the message says what to set."""


@dataclass(frozen=True)
class Route:
    """How the listener's connections reach the database, as found at startup."""

    pooled: bool
    # Through a pooler: the login role's server-side deadlines ('0' is off), and
    # the statements that set those left off.
    deadlines: dict[str, str]
    missing: list[str]


async def _session(url: str, deadline: float) -> tuple[Session, bool, str]:
    """The session `url` leads to, whether a pooler stands between, and its role quoted."""
    # Connected without the deadlines in the startup packet, which a pooler refuses.
    conn = await connections.connect_async(url, application_name="ceaseless route")
    async with conn:
        found = await connections.bounded(conn, session(conn), deadline, "route")
        return (
            found,
            found.backend_pid != conn.info.backend_pid,
            sql.Identifier(found.role).as_string(conn),
        )


async def find_route(url: str, listen_url: str | None, deadline: float) -> Route:
    """Where the listener's pool (`url`) and its LISTEN (`listen_url`, else `url`) lead.

    Raises PoolerRefused when LISTEN would go through a pooler, or to another database
    than the work; OperationalError when either cannot be reached.
    """
    work, pooled, role = await _session(url, deadline)
    if listen_url is None and pooled:
        raise PoolerRefused(
            "DATABASE_URL reaches PostgreSQL through a connection pooler, which cannot keep "
            f"the session LISTEN needs; pass {LISTEN_URL_OPTION} with a URL to the server "
            "itself, the pooler left out"
        )
    if listen_url is not None:
        listen, listen_pooled, _ = await _session(listen_url, deadline)
        if listen_pooled:
            raise PoolerRefused(
                f"{LISTEN_URL_OPTION} reaches PostgreSQL through a connection pooler, which "
                "cannot keep the session LISTEN needs; give it a URL to the server itself, "
                "the pooler left out"
            )
        if listen.database != work.database:
            raise PoolerRefused(
                f"{LISTEN_URL_OPTION} reaches database {listen.database!r} and DATABASE_URL "
                f"{work.database!r}: notifications stay in their database, so the listener "
                "would hear none of its work; point both at the same database"
            )
    if not pooled:
        return Route(pooled=False, deadlines={}, missing=[])
    deadlines = {
        "statement_timeout": work.statement_timeout,
        "idle_in_transaction_session_timeout": work.idle_in_transaction_session_timeout,
    }
    missing = [
        f"alter role {role} set {name} = '{deadline:g}s'"
        for name, value in deadlines.items()
        if value == "0"
    ]
    return Route(pooled=True, deadlines=deadlines, missing=missing)


def refuse_for_migrations(url: str) -> None:
    """Raise PoolerRefused when `url` goes through a pooler: migrations hold a session
    advisory lock and set the session's search_path, which a pooler would hand to others."""
    try:
        _, pooled, _ = asyncio.run(_session(url, connections.CONNECT_TIMEOUT_SECS))
    except psycopg.OperationalError:
        return  # migrate reports the unreachable database itself, in its own words
    if pooled:
        raise PoolerRefused(
            "DATABASE_URL reaches PostgreSQL through a connection pooler; migrations hold a "
            "session lock that a pooler would lend to other clients: run them with "
            "DATABASE_URL set to the server itself, the pooler left out"
        )
