"""The many-writers scenario of the benchmark, small: every insert of every variant is stored
(and, relayed, announced), the NOTIFY-off switch silences exactly the job announcements, and
the numbers are there."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from bench import many_writers
from bench.server import Server

# A scenario of the benchmark, run small: what it checks is the harness and the
# listener, not the server version, so it runs on the embedded server only (.ci/run).
pytestmark = pytest.mark.slow


def test_many_writers_store_every_insert_in_every_variant(server_url: str) -> None:
    server = Server(server_url)
    try:
        found = many_writers.many_writers(server, listeners=2, writers=4, inserts=10)
    finally:
        server.close()
    assert set(found) == set(many_writers.VARIANTS)
    for result in found.values():
        assert result.rows == 40
        assert result.commits_per_s > 0 and 0 < result.p50_ms <= result.p99_ms


def test_the_notify_off_switch_silences_the_job_insert_and_nothing_else(server_url: str) -> None:
    server = Server(server_url)
    try:
        for variant, heard in (
            ("ceaseless, NOTIFY on", 1),
            ("ceaseless, relayed", 0),
            ("ceaseless, NOTIFY off", 0),
        ):
            with server.database(migrated=True) as dsn:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    many_writers._prepare(conn, variant)
                with psycopg.connect(dsn, autocommit=True) as listener:
                    listener.execute("listen ceaseless_job")
                    asyncio.run(many_writers._write(dsn, variant, writers=1, inserts=1))
                    notices = list(listener.notifies(timeout=1, stop_after=1))
                    assert len(notices) == heard, variant
                    rows = listener.execute(
                        "select count(*) from ceaseless.audit_log where entity = 'job'"
                    ).fetchone()
                    assert rows == (1,), variant
                    waiting = listener.execute(
                        "select waiting from ceaseless.relay_status"
                    ).fetchone()
                    assert waiting == ((1,) if variant == "ceaseless, relayed" else (0,)), variant
    finally:
        server.close()
