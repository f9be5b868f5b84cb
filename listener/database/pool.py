"""The listener's way to the database: one pool with deadlines, and one retry policy.

Guarantees:
- every call ends within `deadline` seconds (waiting for a connection
  included) or fails with an OperationalError; a hung connection is closed
  under the call and replaced (listener/database/connections.py `bounded`);
- `retry` retries a failed call with backoff, logging each failure, until it
  succeeds or until a given moment passes;
- `doubt` is set whenever a call failed, because a call can fail after its
  transaction committed (the reply was lost): whoever keeps track of what the
  database says this listener holds reconciles when it sees the flag.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool

from listener import log
from listener.backoff import Backoff
from listener.database import connections

T = TypeVar("T")

Call = Callable[[psycopg.AsyncConnection], Awaitable[T]]


class Database:
    """A listener's pool, its deadline and its retry policy."""

    def __init__(self, url: str, name: str, *, deadline: float, size: int = 4) -> None:
        self.deadline = deadline
        self.doubt = asyncio.Event()
        self._url = url
        self._name = name
        self._size = size
        self._pool: AsyncConnectionPool | None = None

    @property
    def pool(self) -> AsyncConnectionPool:
        if self._pool is None:
            raise RuntimeError("the database is used before it was opened")
        return self._pool

    async def open(self, *, pooled: bool = False) -> None:
        """Make the pool, which connects in the background; `pooled`: through a pooler, known
        only once a first connection told (listener/database/pooler.py)."""
        self._pool = connections.pool(
            self._url,
            application_name=self._name,
            size=self._size,
            deadline=self.deadline,
            pooled=pooled,
        )
        await self._pool.open(wait=False)

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close(timeout=5)

    async def once(self, what: str, call: Call[T], *, deadline: float | None = None) -> T:
        """One attempt; raises OperationalError (DeadlineExceeded included) when it fails."""
        try:
            return await connections.call(self.pool, what, call, deadline or self.deadline)
        except psycopg.OperationalError:
            self.doubt.set()
            raise

    async def retry(self, what: str, call: Call[T], *, give_up_at: float | None = None) -> T:
        """Retry `call` with backoff until it succeeds, or until loop time `give_up_at`."""
        loop = asyncio.get_running_loop()
        backoff = Backoff()
        while True:
            deadline = self.deadline
            if give_up_at is not None:
                # The last attempts get what time is left, and at least a second.
                deadline = max(1.0, min(deadline, give_up_at - loop.time()))
            try:
                return await self.once(what, call, deadline=deadline)
            except psycopg.OperationalError as exc:
                if give_up_at is not None and loop.time() + backoff.delay >= give_up_at:
                    raise
                log.warning(
                    "db.unavailable",
                    call=what,
                    error=str(exc).strip(),
                    retry_in=backoff.delay,
                )
                await backoff.sleep()
