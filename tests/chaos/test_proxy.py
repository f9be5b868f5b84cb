"""FreezingProxy against the real test server: it forwards faithfully, freezes silently
and resumes without losing a byte."""

from __future__ import annotations

import gc
import hashlib
import os
import select
import socket
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import TypeVar

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from tests.chaos.proxy import FreezingProxy, upstream_of
from tests.conftest import database_name

T = TypeVar("T")

HANG_SECS = 2.0  # long enough that "did not complete" is not a scheduling hiccup
DONE_SECS = 15.0


def in_thread(fn: Callable[[], T]) -> Future[T]:
    """Run `fn` in a daemon thread, so a test survives a call that never returns."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(fn())
        except BaseException as error:
            future.set_exception(error)

    threading.Thread(target=run, daemon=True).start()
    return future


def socket_readable(conn: psycopg.Connection) -> bool:
    """Whether the client socket has data, an EOF or a reset waiting (nothing is consumed)."""
    readable, _, _ = select.select([conn.fileno()], [], [], 0)
    return bool(readable)


def wait_until(condition: Callable[[], bool], timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(message)
        time.sleep(0.05)


def payloads(conn: psycopg.Connection, timeout: float) -> list[str]:
    """The payloads of notifications that arrive within `timeout`, stopping at the first."""
    return [n.payload for n in conn.notifies(timeout=timeout, stop_after=1)]


def backends(conn: psycopg.Connection, application_name: str) -> int:
    row = conn.execute(
        "select count(*) from pg_stat_activity where application_name = %s",
        (application_name,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_queries_reach_the_upstream_database_through_the_proxy(
    proxy: FreezingProxy, db_url: str
) -> None:
    with psycopg.connect(proxy.url(), autocommit=True) as conn:
        assert conn.execute("select current_database(), 1").fetchone() == (
            database_name(db_url),
            1,
        )
        assert conn.info.port == proxy.port
    stats = proxy.stats()
    assert stats.accepted == 1
    assert stats.bytes_to_server > 0 and stats.bytes_to_client > 0


def test_several_megabytes_pass_intact_both_ways(proxy: FreezingProxy) -> None:
    rows = 250_000
    expected = "".join(hashlib.md5(str(i).encode()).hexdigest() for i in range(1, rows + 1))
    upload = os.urandom(8 << 20)
    with psycopg.connect(proxy.url(), autocommit=True) as conn:
        download = conn.execute(
            "select string_agg(md5(i::text), '' order by i) from generate_series(1, %s) i",
            (rows,),
        ).fetchone()
        digest = conn.execute("select sha256(%b)", (upload,)).fetchone()
    assert download is not None and download[0] == expected
    assert digest is not None and bytes(digest[0]) == hashlib.sha256(upload).digest()


def test_frozen_connection_hangs_without_eof_or_reset_and_answers_after_thaw(
    proxy: FreezingProxy,
) -> None:
    with psycopg.connect(proxy.url(), autocommit=True) as conn:
        assert conn.execute("select 1").fetchone() == (1,)
        proxy.freeze()
        pending = in_thread(lambda: conn.execute("select 1").fetchone())
        with pytest.raises(TimeoutError):
            pending.result(timeout=HANG_SECS)
        # Silent, not dead: the client has neither bytes, nor FIN, nor RST to read.
        assert not socket_readable(conn)
        assert not conn.closed
        assert proxy.stats().frozen == 1

        proxy.thaw()
        assert pending.result(timeout=DONE_SECS) == (1,)
        assert conn.execute("select 2").fetchone() == (2,)


def test_freeze_leaves_new_connections_working(proxy: FreezingProxy) -> None:
    with psycopg.connect(proxy.url(), autocommit=True) as old:
        proxy.freeze()
        pending = in_thread(lambda: old.execute("select 'old'").fetchone())
        with psycopg.connect(proxy.url(), autocommit=True, connect_timeout=5) as new:
            assert new.execute("select 'new'").fetchone() == ("new",)
            with pytest.raises(TimeoutError):
                pending.result(timeout=HANG_SECS / 2)
            stats = proxy.stats()
            assert (stats.open, stats.frozen) == (2, 1)
        proxy.thaw()
        assert pending.result(timeout=DONE_SECS) == ("old",)


def test_partition_holds_new_connections_until_their_connect_timeout(
    proxy: FreezingProxy,
) -> None:
    proxy.freeze(new_connections=True)
    started = time.monotonic()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(proxy.url(), connect_timeout=2)
    elapsed = time.monotonic() - started
    assert 1.5 <= elapsed < 10, elapsed
    held = proxy.stats()
    assert (held.held, held.bytes_to_server) == (1, 0)

    proxy.thaw()
    with psycopg.connect(proxy.url(), autocommit=True, connect_timeout=5) as conn:
        assert conn.execute("select 1").fetchone() == (1,)
        assert proxy.stats().held == 0
    # psycopg keeps a timed-out attempt's socket until it is collected; once closed, the
    # connection that was held is forwarded to its end and closed, not kept forever.
    gc.collect()
    wait_until(lambda: proxy.connections() == 0, 10, f"still open: {proxy.stats()}")


def test_notification_arrives_after_thaw_and_not_before(
    proxy: FreezingProxy, conn: psycopg.Connection
) -> None:
    channel = f"chaos_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(proxy.url(), autocommit=True) as listener:
        listener.execute(sql.SQL("listen {}").format(sql.Identifier(channel)))
        conn.execute("select pg_notify(%s, 'before')", (channel,))
        assert payloads(listener, DONE_SECS) == ["before"]

        proxy.freeze()
        conn.execute("select pg_notify(%s, 'during')", (channel,))
        assert payloads(listener, HANG_SECS) == []

        proxy.thaw()
        assert payloads(listener, DONE_SECS) == ["during"]


def test_stream_frozen_midway_resumes_whole_and_in_order(proxy: FreezingProxy) -> None:
    rows = 100_000  # 26 MB: more than the buffers between server and client hold

    def line(i: int) -> bytes:
        return b"%d\t%s\n" % (i, hashlib.md5(str(i).encode()).hexdigest().encode() * 8)

    series = f"generate_series(1, {rows}) i"
    expected = b"".join(line(i) for i in range(1, rows + 1))
    started, frozen = threading.Event(), threading.Event()

    def stream() -> bytes:
        received = bytearray()
        with (
            psycopg.connect(proxy.url(), autocommit=True) as conn,
            conn.cursor() as cur,
            cur.copy(f"copy (select i, repeat(md5(i::text), 8) from {series}) to stdout") as copy,
        ):
            received += copy.read()
            time.sleep(0.5)  # stop reading a while: every buffer on the way fills up
            started.set()
            frozen.wait()
            while block := copy.read():
                received += block
        return bytes(received)

    reader = in_thread(stream)
    assert started.wait(DONE_SECS)
    proxy.freeze()
    frozen_at = proxy.stats().bytes_to_client
    frozen.set()
    # The client drains what its kernel had, then waits; the proxy sends nothing more,
    # not even the bytes it holds, read from the server before the freeze.
    with pytest.raises(TimeoutError):
        reader.result(timeout=HANG_SECS / 2)
    assert proxy.stats().bytes_to_client == frozen_at

    proxy.thaw()
    assert reader.result(timeout=DONE_SECS) == expected
    # The freeze cut the stream: part of it flowed only after the thaw.
    assert proxy.stats().bytes_to_client > frozen_at


def test_frozen_connection_outlives_its_client_until_thaw(
    proxy: FreezingProxy, conn: psycopg.Connection
) -> None:
    name = f"chaos-{uuid.uuid4().hex[:12]}"
    client = psycopg.connect(proxy.url(application_name=name), autocommit=True)
    assert backends(conn, name) == 1

    proxy.freeze()
    client.close()  # Terminate and FIN reach the proxy, which reads neither
    time.sleep(1.0)
    assert backends(conn, name) == 1
    assert proxy.connections() == 1

    proxy.thaw()
    wait_until(lambda: backends(conn, name) == 0, 10, "the backend outlived the thaw")
    wait_until(lambda: proxy.connections() == 0, 10, f"still open: {proxy.stats()}")


def test_sever_resets_the_client_and_ends_the_backend(
    proxy: FreezingProxy, conn: psycopg.Connection
) -> None:
    name = f"chaos-{uuid.uuid4().hex[:12]}"
    with psycopg.connect(proxy.url(application_name=name), autocommit=True) as client:
        assert backends(conn, name) == 1
        proxy.freeze()
        assert proxy.sever() == 1
        with pytest.raises(psycopg.OperationalError):
            client.execute("select 1")
    wait_until(lambda: backends(conn, name) == 0, 10, "the backend outlived sever()")
    proxy.thaw()
    with psycopg.connect(proxy.url(), autocommit=True) as again:
        assert again.execute("select 1").fetchone() == (1,)


def test_unreachable_upstream_closes_the_client_at_once(tmp_path: Path) -> None:
    with FreezingProxy(f"host={tmp_path} port=1 user=nobody dbname=nothing") as proxy:
        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(proxy.url(), connect_timeout=10)
        assert time.monotonic() - started < 5
        assert proxy.stats().upstream_failures == 1


def test_url_keeps_the_upstream_parameters_and_points_at_the_proxy() -> None:
    upstream = "host=/run/pg port=5433 user=alice dbname=jobs application_name=app"
    assert upstream_of(upstream).family == socket.AF_UNIX
    assert upstream_of(upstream).address == "/run/pg/.s.PGSQL.5433"
    assert upstream_of("postgresql://bob@db.example/jobs").address == ("db.example", 5432)
    with FreezingProxy(upstream) as proxy:
        params = conninfo_to_dict(proxy.url())
        assert params == {
            "host": "127.0.0.1",
            "port": str(proxy.port),
            "user": "alice",
            "dbname": "jobs",
            "application_name": "app",
            "sslmode": "disable",
            "gssencmode": "disable",
        }
        other = conninfo_to_dict(proxy.url("other", application_name="x"))
        assert (other["dbname"], other["application_name"]) == ("other", "x")
