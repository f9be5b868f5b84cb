"""What the listener caches from the database's configuration: agents and the lease length.

Reloaded at startup, on NOTIFY ceaseless_config and after every reconnect.

Guarantees: the lease length is the lease_secs setting unless the operator
gave --lease-secs; the listener passes it explicitly on every claim and
renewal, so the lease it fences locally and the lease the database keeps are
the same length.
"""

from __future__ import annotations

import psycopg

from listener import log
from listener.agents.base import AgentConfig
from listener.queries import registry as queries


class Registry:
    def __init__(self, lease_override: int | None) -> None:
        self._lease_override = lease_override
        self.agents: dict[str, AgentConfig] = {}
        self.lease_secs: int = lease_override or 0

    async def reload(self, conn: psycopg.AsyncConnection) -> None:
        self.agents = await queries.load_agents(conn)
        if self._lease_override is None:
            self.lease_secs = await queries.setting_int(conn, "lease_secs")
        log.event("config.loaded", agents=len(self.agents), lease_secs=self.lease_secs)
