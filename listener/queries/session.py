"""What a connection's session is on the server: its backend, database, role and deadlines.

Read by listener/database/pooler.py to tell a pooler's connection from the server's own.

Guarantees: one statement, reading settings only; it changes nothing in the session.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import class_row

from listener.queries import fetch


@dataclass(frozen=True)
class Session:
    backend_pid: int
    database: str
    role: str
    statement_timeout: str
    idle_in_transaction_session_timeout: str


async def session(conn: psycopg.AsyncConnection[Any]) -> Session:
    found = await fetch.row(
        conn,
        class_row(Session),
        "select pg_backend_pid() as backend_pid, current_database() as database, "
        "current_user as role, "
        "current_setting('statement_timeout') as statement_timeout, "
        "current_setting('idle_in_transaction_session_timeout') "
        "as idle_in_transaction_session_timeout",
    )
    assert found is not None  # a select without FROM returns its one row
    return found
