"""Exponential backoff with jitter: the one way every loop of the listener waits to retry.

Guarantees: the first retry waits about `first` seconds, each next one about
twice as long, never more than `ceiling`; jitter keeps listeners that lost
the database together from coming back together.
"""

from __future__ import annotations

import asyncio
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
