"""Every database call has a deadline: a frozen connection is closed under the call and replaced."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from listener.database import connections
from tests.chaos.proxy import FreezingProxy


def test_a_call_on_a_frozen_connection_fails_at_its_deadline_and_closes_it(
    proxy: FreezingProxy,
) -> None:
    async def scenario() -> float:
        conn = await connections.connect_async(proxy.url())
        proxy.freeze()
        started = time.monotonic()
        with pytest.raises(connections.DeadlineExceeded, match="did not answer within 1 s"):
            await connections.bounded(conn, conn.execute("select 1"), 1.0, "probe")
        elapsed = time.monotonic() - started
        assert conn.closed or conn.pgconn.status == psycopg.pq.ConnStatus.BAD
        await conn.close()
        return elapsed

    # At the deadline, not after psycopg's own cancel-and-wait (ten seconds more).
    assert asyncio.run(scenario()) < 3


def test_the_pool_replaces_a_frozen_idle_connection_instead_of_handing_it_out(
    proxy: FreezingProxy,
) -> None:
    async def scenario() -> tuple[int, float]:
        pool = connections.pool(proxy.url(), application_name="deadline test", size=1, deadline=10)
        async with pool:
            await pool.wait()
            proxy.freeze()  # the idle connection; new ones still work
            started = time.monotonic()
            row = await connections.call(pool, "after freeze", _select_one, 10)
            return row, time.monotonic() - started

    row, elapsed = asyncio.run(scenario())
    assert row == 1
    # One bounded check of the frozen connection, then a fresh one.
    assert elapsed < 8


def test_connecting_through_a_partition_fails_at_the_connect_timeout(
    proxy: FreezingProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connections, "CONNECT_TIMEOUT_SECS", 2)
    proxy.freeze(new_connections=True)

    async def scenario() -> float:
        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError):
            await connections.connect_async(proxy.url())
        return time.monotonic() - started

    assert asyncio.run(scenario()) < 6


def test_listener_connections_carry_server_side_deadlines(db_url: str) -> None:
    async def scenario() -> tuple[str, str, str]:
        pool = connections.pool(db_url, application_name="deadline test", size=1, deadline=7)
        async with pool:

            async def show(conn: psycopg.AsyncConnection) -> tuple[str, str, str]:
                cur = await conn.execute(
                    "select current_setting('statement_timeout'), "
                    "current_setting('idle_in_transaction_session_timeout'), "
                    "current_setting('application_name')"
                )
                row = await cur.fetchone()
                assert row is not None
                return row

            return await connections.call(pool, "show", show, 7)

    assert asyncio.run(scenario()) == ("7s", "7s", "deadline test")


def test_every_connection_has_connect_and_tcp_deadlines() -> None:
    kwargs = connections.connection_kwargs("x", url="postgresql://h/d?options=-c%20search_path%3Dx")
    assert kwargs["connect_timeout"] == connections.CONNECT_TIMEOUT_SECS
    assert kwargs["keepalives"] == 1 and kwargs["tcp_user_timeout"] > 0
    with_deadline = connections.connection_kwargs(
        "x", server_deadline=2, url="postgresql://h/d?options=-c%20search_path%3Dx"
    )
    # The operator's own options survive ours.
    assert with_deadline["options"].startswith("-c search_path=x ")
    assert "statement_timeout=2000" in with_deadline["options"]


async def _select_one(conn: psycopg.AsyncConnection) -> int:
    cur = await conn.execute("select 1")
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])
