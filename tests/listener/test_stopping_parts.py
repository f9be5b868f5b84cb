"""A listener stops when told to, or when one of its parts crashes, even if a part ignores a cancel.

A cancellation can be lost on its way into a part (psycopg_pool's wait for a connection
swallows one that arrives as a connection is handed over, on Python 3.11); a listener that
waited for such a part would never exit, and a process manager would have to kill it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from listener.daemon.supervisor import EXIT_PART_CRASHED, _cancel
from tests.e2e.support import ListenerProcess, wait_until


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


@pytest.fixture
def refused_prune_url(conn: psycopg.Connection, db_url: str) -> Iterator[str]:
    """A listener role whose retention pass the database refuses (no EXECUTE on prune)."""
    role = f"listener_{uuid.uuid4().hex[:8]}"
    conn.execute(f"create role {role} login password 'pw' in role ceaseless_listener")
    conn.execute(
        "revoke execute on function ceaseless.prune(timestamptz, integer, text, boolean) "
        "from ceaseless_listener"
    )
    conn.commit()
    yield make_conninfo(db_url, user=role, password="pw")
    conn.rollback()
    conn.execute(f"drop owned by {role}")
    conn.execute(f"drop role {role}")
    conn.commit()


def test_a_listener_whose_part_crashes_stops_and_says_which(refused_prune_url: str) -> None:
    listener = ListenerProcess(refused_prune_url, "--poll-interval", "1")
    try:
        wait_until(
            lambda: listener.proc.poll() is not None,
            45,
            lambda: f"the listener is still running after its part crashed: {listener.lines[-10:]}",
        )
    finally:
        if listener.proc.poll() is None:
            listener.proc.kill()
    assert listener.proc.returncode == EXIT_PART_CRASHED
    (crash,) = listener.events("listener.part_crashed")
    assert crash["part"] == "retention"
    assert "prune" in crash["error"]
