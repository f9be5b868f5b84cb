"""`ceaseless listen` as a process: how it starts, how it ends, and what it tells `status`.

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

from tests.e2e.support import ROOT, ListenerProcess, run_cli
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


def test_status_shows_the_running_listeners_sandbox_and_db_auth_not_its_own(
    db_url: str, conn: psycopg.Connection
) -> None:
    # The listener runs without a sandbox (CEASELESS_SANDBOX=off, as every test's
    # listener does); the operator's shell has no such setting.
    with _listener(db_url, worker_id="reporting-1") as listener:
        listener.ready()
        reported = conn.execute(
            "select sandbox, db_auth from ceaseless.listener_reports where worker = 'reporting-1'"
        ).fetchone()
        assert reported is not None and reported[0] == "none"
        env = {k: v for k, v in os.environ.items() if k != "CEASELESS_SANDBOX"}
        shown = subprocess.run(
            [sys.executable, "-m", "listener", "status"],
            capture_output=True,
            text=True,
            env={**env, "DATABASE_URL": db_url, "PYTHONPATH": str(ROOT), "COLUMNS": "300"},
            timeout=60,
        )
        assert shown.returncode == 0, shown.stderr
        row = next(line for line in shown.stdout.splitlines() if line.startswith("reporting-1"))
        assert row.split()[:2] == ["reporting-1", "True"]
        assert " none " in f" {row} " and f" {reported[1]} " in f" {row} "
        assert "warning: listener reporting-1: agents are not fully isolated" in shown.stdout
        assert "the sandbox is turned off (CEASELESS_SANDBOX=off)" in shown.stdout
        # The database's word on the connection, in the log and in status alike.
        no_password = listener.events("db.no_password")
        if reported[1] in ("trust", "unknown"):
            assert no_password and no_password[0]["problem"] in shown.stdout
            assert "used no password" in shown.stdout
        else:
            assert not no_password and "used no password" not in shown.stdout
    # Stopped: its report is gone, and status says no listener runs.
    assert conn.execute("select count(*) from ceaseless.listener_reports").fetchone() == (0,)
    shown = run_cli(db_url, "status")
    assert "no listener is running" in shown.stdout


def test_a_listener_without_a_password_is_told_so_by_the_database(conn: psycopg.Connection) -> None:
    warning = conn.execute("select ceaseless._db_auth_warning('trust')").fetchone()[0]
    assert "used no password (trust authentication)" in warning
    assert "scram-sha-256" in warning
    unknown = conn.execute("select ceaseless._db_auth_warning('unknown')").fetchone()[0]
    assert "used no password" in unknown and "before 16" in unknown
    for fine in ("password", "peer", "cert"):
        assert conn.execute("select ceaseless._db_auth_warning(%s)", (fine,)).fetchone() == (None,)


def test_dashboard_prints_the_sign_in_url_that_signs_a_browser_in(db_url: str) -> None:
    port = _free_port()
    with _listener(db_url, "--http", f"127.0.0.1:{port}") as listener:
        listener.ready()
        listener.wait_for_event("http.listening")
        shown = run_cli(db_url, "dashboard", CEASELESS_HOME=str(listener.home))
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
        elsewhere = run_cli(db_url, "dashboard", CEASELESS_HOME=str(listener.home / "elsewhere"))
        assert elsewhere.returncode == 1
        assert "no listener serving HTTP" in elsewhere.stderr
        token_file = Path(listener.events("http.listening")[0]["token_file"])
        assert token_file.stat().st_mode & 0o077 == 0
