"""What the listener caches from configuration: the agent registry and settings.

Guarantees: read-only; a missing setting raises the database's CE500 naming
the key, rather than a default copied into Python.
"""

from __future__ import annotations

import psycopg

from listener.agents.base import AgentConfig
from listener.enums import Adapter
from listener.queries import fetch


async def load_agents(conn: psycopg.AsyncConnection) -> dict[str, AgentConfig]:
    cur = await conn.execute(
        "select name, adapter, argv, env, model, timeout_secs, kill_grace_secs, env_passthrough, "
        "egress from ceaseless.agents"
    )
    return {
        name: AgentConfig(
            name=name,
            adapter=Adapter(adapter),
            argv=list(argv),
            env=dict(env),
            model=model,
            timeout_secs=timeout_secs,
            kill_grace_secs=kill_grace_secs,
            env_passthrough=tuple(passthrough),
            egress=tuple(egress),
        )
        for (
            name,
            adapter,
            argv,
            env,
            model,
            timeout_secs,
            kill_grace_secs,
            passthrough,
            egress,
        ) in await cur.fetchall()
    }


async def setting_int(conn: psycopg.AsyncConnection, key: str) -> int:
    """An integer policy from ceaseless.settings (lease_secs, webhook_max_body_bytes, …)."""
    value = await fetch.value(conn, "select ceaseless._setting_int(%s)", (key,))
    assert value is not None, "_setting_int raises rather than return NULL"
    return int(value)
