"""A listener's parts end when it stops, even a part that lost its cancel.

A cancellation can be lost on its way into a part (psycopg_pool's wait for a connection
swallows one that arrives as a connection is handed over, on Python 3.11); a listener that
waited for such a part would never exit, and a process manager would have to kill it.
tests/e2e/test_listener_role.py runs a listener whose part crashes to the end.
"""

from __future__ import annotations

import asyncio

from listener.daemon.supervisor import _cancel


async def _swallows_one_cancel(rounds: list[str]) -> None:
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if rounds:
                raise
            rounds.append("cancel swallowed")  # as a lost cancellation leaves a part: running


def test_a_part_that_loses_its_cancel_is_cancelled_again() -> None:
    rounds: list[str] = []

    async def stop_it() -> bool:
        part = asyncio.create_task(_swallows_one_cancel(rounds))
        await asyncio.sleep(0)
        await asyncio.wait_for(_cancel([part]), timeout=10)
        return part.cancelled()

    assert asyncio.run(stop_it())
    assert rounds == ["cancel swallowed"]
