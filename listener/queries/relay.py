"""The announcement relay's call: send what sessions in relay mode announced
(functions/25_notify_audit.sql, relay_announcements).

Guarantees: one call is one transaction (connections are autocommit), so the
announcements it sends and their removal commit together: a listener that dies
mid-call sends none of them twice and loses none, and the next relay sends them.
"""

from __future__ import annotations

from typing import Any

import psycopg

from listener.queries import fetch


async def relay_announcements(conn: psycopg.AsyncConnection[Any]) -> int:
    """How many announcements this call sent: 0 when none waited or another listener is
    relaying them."""
    return int(await fetch.value(conn, "select ceaseless.relay_announcements()"))
