"""How the listener's loops wait: backoff with jitter to retry, or an event up to a timeout.

Guarantees: the first retry waits about `first` seconds, each next one about
twice as long, never more than `ceiling`; jitter keeps listeners that lost
the database together from coming back together.
"""

from __future__ import annotations

import asyncio
import contextlib
import random


class Backoff:
    """The delay before the next retry; `reset()` once a call succeeds."""

    def __init__(self, first: float = 0.05, ceiling: float = 5.0) -> None:
        self._first = first
        self._ceiling = ceiling
        self._next = first

    @property
    def delay(self) -> float:
        """How long the next `sleep()` waits (before jitter)."""
        return self._next

    def reset(self) -> None:
        self._next = self._first

    async def sleep(self) -> None:
        """Wait the current delay (with up to 25 % jitter), then double it."""
        await asyncio.sleep(self._next * (1 + random.random() * 0.25))
        self._next = min(self._next * 2, self._ceiling)


async def wait_for(event: asyncio.Event, timeout: float) -> None:
    """Wait for `event` at most `timeout` seconds.

    asyncio.timeout, not asyncio.wait_for: on Python 3.11 wait_for can swallow a
    cancellation that arrives as the event fires, leaving a task that was told
    to stop waiting another full interval.
    """
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()
