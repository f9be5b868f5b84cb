"""`ceaseless listen` as a process: how it starts and how it ends.

Real listener processes (tests/e2e/support.py), and the CLI run as a subprocess
with an environment of its own, as an operator's shell would be.
"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from tests.e2e.support import ROOT, ListenerProcess
from tests.factories import make_agent, make_job


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def _listener(db_url: str, *args: str, worker_id: str = "lifecycle-1") -> Iterator[ListenerProcess]:
    process = ListenerProcess(db_url, "--poll-interval", "60", *args, worker_id=worker_id)
    try:
        yield process
    finally:
        process.stop(timeout=10)


def _cli(db_url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "listener", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "DATABASE_URL": db_url, "PYTHONPATH": str(ROOT), **env},
        timeout=60,
    )


def test_a_taken_http_port_ends_the_listener_within_seconds_naming_the_address_and_error(
    db_url: str,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        with _listener(db_url, "--http", address) as listener:
            began = time.monotonic()
            try:
                status = listener.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"still running 10 s later: {listener.lines[-10:]}") from None
            took = time.monotonic() - began
            listener._pump.join(5)
            assert status == 1, listener.lines
            assert took < 10
            failed = listener.events("http.bind_failed")
            assert len(failed) == 1 and failed[0]["level"] == "error"
            assert failed[0]["address"] == address
            assert "in use" in failed[0]["error"].lower(), failed[0]
            assert [e["exit_status"] for e in listener.events("listener.stopped")] == [1]
            # Bound first: nothing was started that could outlive the failure.
            assert not listener.events("listen.subscribed")
            assert not listener.events("listener.ready")


@pytest.mark.slow
def test_a_crashed_part_logs_the_exit_status_the_process_exits_with(
    db_url: str, conn: psycopg.Connection
) -> None:
    make_agent(conn)
    with _listener(db_url) as listener:
        listener.ready()
        # The claim's function gone: the claimer fails with an error no retry cures.
        conn.execute("alter function ceaseless.claim_jobs rename to claim_jobs_gone")
        make_job(conn)
        status = listener.proc.wait(timeout=30)
        listener._pump.join(5)
        assert status == 1
        assert [e["part"] for e in listener.events("listener.part_crashed")] == ["claimer"]
        assert [e["exit_status"] for e in listener.events("listener.stopped")] == [1]


def test_dashboard_prints_the_sign_in_url_that_signs_a_browser_in(db_url: str) -> None:
    port = _free_port()
    with _listener(db_url, "--http", f"127.0.0.1:{port}") as listener:
        listener.ready()
        listener.wait_for_event("http.listening")
        shown = _cli(db_url, "dashboard", CEASELESS_HOME=str(listener.home))
        assert shown.returncode == 0, shown.stderr
        url = shown.stdout.split()[0]
        assert url == f"http://127.0.0.1:{port}/login?token={listener.http_token()}"
        client = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        client.request("GET", url.removeprefix(f"http://127.0.0.1:{port}"))
        answer = client.getresponse()
        answer.read()
        client.close()
        assert answer.status == 303
        assert f"ceaseless_dashboard_{port}=" in (answer.getheader("Set-Cookie") or "")
        # Another CEASELESS_HOME (another OS user's, say) has no token to give.
        elsewhere = _cli(db_url, "dashboard", CEASELESS_HOME=str(listener.home / "elsewhere"))
        assert elsewhere.returncode == 1
        assert "no listener serving HTTP" in elsewhere.stderr
        token_file = Path(listener.events("http.listening")[0]["token_file"])
        assert token_file.stat().st_mode & 0o077 == 0
