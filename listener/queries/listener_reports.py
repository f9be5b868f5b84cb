"""What a listener reports about itself (listener_reports), and how its connection authenticated.

Guarantees: `report` replaces the worker's row in one statement (a restart
under the same worker id overwrites what the last one said) and returns the
database's warning for its authentication; `withdraw`
removes it; `db_auth` reads only the connection it is given.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

import psycopg

from listener.queries import fetch

# system_user (the authentication method and identity) exists from PostgreSQL 16.
_SYSTEM_USER_SINCE = 160000


@dataclass(frozen=True)
class Report:
    worker: str
    sandbox: str
    agent_user: str | None
    isolation_warning: str | None
    db_auth: str
    http: str | None


async def db_auth(conn: psycopg.AsyncConnection) -> str:
    """How `conn` authenticated: password, trust, unknown, or system_user's method (peer, cert…).

    libpq knows whether the server asked for a password; PostgreSQL 16+ also
    says by which method the session authenticated (NULL: trust). Before 16,
    a session without a password may be trust or peer, ident, cert: unknown.
    """
    if conn.info.server_version >= _SYSTEM_USER_SINCE:
        method = await fetch.value(conn, "select split_part(system_user, ':', 1)")
        if method:
            return "password" if conn.pgconn.used_password else str(method)
        return "trust"
    return "password" if conn.pgconn.used_password else "unknown"


async def report(conn: psycopg.AsyncConnection, r: Report) -> str | None:
    """Write the report; the warning its db_auth calls for (_db_auth_warning), or None."""
    return await fetch.value(
        conn,
        "insert into ceaseless.listener_reports (worker, host, pid, sandbox, agent_user, "
        "isolation_warning, db_auth, http) values (%s, %s, %s, %s, %s, left(%s, 2000), %s, %s) "
        "on conflict (worker) do update set started_at = now(), host = excluded.host, "
        "pid = excluded.pid, sandbox = excluded.sandbox, agent_user = excluded.agent_user, "
        "isolation_warning = excluded.isolation_warning, db_auth = excluded.db_auth, "
        "http = excluded.http returning ceaseless._db_auth_warning(db_auth)",
        (
            r.worker,
            socket.gethostname()[:255],
            os.getpid(),
            r.sandbox,
            r.agent_user,
            r.isolation_warning,
            r.db_auth,
            r.http,
        ),
    )


async def withdraw(conn: psycopg.AsyncConnection, worker: str) -> None:
    await conn.execute("delete from ceaseless.listener_reports where worker = %s", (worker,))
