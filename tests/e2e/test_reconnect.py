"""The listener survives lost connections and a restarted server, and catches up."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from listener.database.embedded import EmbeddedServer
from listener.database.migrate import migrate
from tests.e2e.support import FAKES, ListenerProcess, wait_until
from tests.factories import make_agent


class _Producer:
    """Inserts one job every few milliseconds, retrying while the server is away."""

    def __init__(self, url: str, agent: str = "noop") -> None:
        self.url, self.agent = url, agent
        self.inserted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        conn: psycopg.Connection | None = None
        while not self._stop.is_set():
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.url, autocommit=True)
                conn.execute(
                    "insert into ceaseless.job (kind, agent, prompt) values ('task', %s, 'flow')",
                    (self.agent,),
                )
                self.inserted += 1
            except psycopg.OperationalError:
                conn = None
                time.sleep(0.05)
            time.sleep(0.005)
        if conn is not None:
            conn.close()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(10)
        return self.inserted


def _all_delivered(url: str, expected: int) -> Callable[[], bool]:
    def check() -> bool:
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                row = conn.execute(
                    "select count(*) filter (where state = 'delivered'), count(*) "
                    "from ceaseless.job"
                ).fetchone()
        except psycopg.OperationalError:
            return False
        return row == (expected, expected)

    return check


def _no_overlapping_runs(conn: psycopg.Connection) -> None:
    overlaps = conn.execute(
        "select count(*) from ceaseless.agent_run a join ceaseless.agent_run b "
        "on a.job_id = b.job_id and a.id < b.id "
        "and tstzrange(a.started_at, a.finished_at) && tstzrange(b.started_at, b.finished_at)"
    ).fetchone()
    assert overlaps == (0,)


def test_terminated_backends_are_reconnected_and_every_job_delivered(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess], db_url: str
) -> None:
    make_agent(conn, max_concurrent=100)
    make_agent(
        conn,
        "slow",
        "command",
        [str(FAKES / "fake_agent")],
        env={"FAKE_AGENT_MODE": "sleep", "FAKE_AGENT_SLEEP": "1.5"},
    )
    listener = start_listener("--poll-interval", "2", "--lease-secs", "10")
    producer = _Producer(db_url)
    conn.execute("insert into ceaseless.job (kind, agent, prompt) values ('task', 'slow', 'p')")
    time.sleep(0.5)
    for _ in range(3):
        killed = conn.execute(
            "select count(pg_terminate_backend(pid)) from pg_stat_activity "
            "where application_name like 'ceaseless list%%' and datname = current_database()"
        ).fetchone()
        assert killed is not None and killed[0] >= 1
        time.sleep(0.4)
    inserted = producer.stop() + 1
    wait_until(_all_delivered(db_url, inserted), 30, "jobs were lost after the backends died")
    listener.wait_for_event("listen.subscribed", count=2)
    assert listener.events("listen.lost")
    _no_overlapping_runs(conn)


@pytest.fixture
def own_server() -> Iterator[tuple[EmbeddedServer, str]]:
    """A server of this test's own, to restart without disturbing the others."""
    home = Path(tempfile.mkdtemp(prefix="ceaseless-restart-"))
    home.chmod(0o755)
    server = EmbeddedServer(home)
    url = server.start()
    migrate(url)
    try:
        yield server, url
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)


def test_restarted_server_is_reconnected_and_every_job_delivered(
    own_server: tuple[EmbeddedServer, str], start_listener: Callable[..., ListenerProcess]
) -> None:
    server, url = own_server
    with psycopg.connect(url, autocommit=True) as conn:
        make_agent(conn, max_concurrent=100)
    listener = start_listener("--poll-interval", "2", url=url)
    producer = _Producer(url)
    time.sleep(0.7)
    server.stop()
    time.sleep(1.0)
    server.start()
    time.sleep(0.7)
    inserted = producer.stop()
    assert inserted > 0
    wait_until(_all_delivered(url, inserted), 30, "jobs were lost across the restart")
    listener.wait_for_event("listen.subscribed", count=2)
    with psycopg.connect(url, autocommit=True) as conn:
        _no_overlapping_runs(conn)
