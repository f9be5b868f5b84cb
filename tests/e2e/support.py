"""Running real listener processes against a test database."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg

ROOT = Path(__file__).resolve().parents[2]
FAKES = ROOT / "tests" / "fakes"


class ListenerProcess:
    """`python -m listener listen` in a subprocess, with its JSON log lines collected."""

    def __init__(
        self,
        db_url: str,
        *args: str,
        worker_id: str = "listener-1",
        wrapper: Sequence[str] = (),
    ) -> None:
        """`wrapper` is a command that execs the listener, e.g. `ip netns exec NAME`: the
        process started is still the listener (`proc.pid`), in whatever the wrapper set up."""
        env = {**os.environ, "DATABASE_URL": db_url, "PYTHONPATH": str(ROOT)}
        # Where the listener keeps its HTTP token file: a directory of its own,
        # unless the test chose a CEASELESS_HOME.
        self._home: str | None = None
        if "CEASELESS_HOME" not in env:
            self._home = tempfile.mkdtemp(prefix="ceaseless-listener-home-")
            env["CEASELESS_HOME"] = self._home
        self.home = Path(env["CEASELESS_HOME"])
        self.worker_id = worker_id
        self.lines: list[dict[str, Any]] = []
        self.proc = subprocess.Popen(
            [
                *wrapper,
                sys.executable,
                "-m",
                "listener",
                "listen",
                "--log-format",
                "json",
                "--worker-id",
                worker_id,
                *args,
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            try:
                self.lines.append(json.loads(line))
            except ValueError:
                self.lines.append({"event": "raw", "line": line.rstrip()})

    def events(self, name: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("event") == name]

    def wait_for_event(self, name: str, timeout: float = 15, count: int = 1) -> None:
        wait_until(
            lambda: len(self.events(name)) >= count,
            timeout,
            f"listener never logged {name}: {self.lines[-20:]}",
        )

    def ready(self) -> ListenerProcess:
        self.wait_for_event("listen.subscribed")
        return self

    def http_token(self) -> str:
        """The token of this listener's HTTP server, from the 0600 file it wrote."""
        self.wait_for_event("http.listening")
        path = self.events("http.listening")[0]["token_file"]
        return str(json.loads(Path(path).read_text())["token"])

    def auth(self) -> dict[str, str]:
        """The header an operator's client sends to the dashboard, observer and /metrics."""
        return {"Authorization": f"Bearer {self.http_token()}"}

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._pump.join(5)
        if self._home is not None:
            shutil.rmtree(self._home, ignore_errors=True)
        return self.proc.returncode


def run_cli(
    db_url: str, *args: str, stdin: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """`ceaseless ARGS` in a process of its own against `db_url`, as a user types it; `env` adds
    variables to the test's environment."""
    return subprocess.run(
        [sys.executable, "-m", "listener", *args],
        env={**os.environ, "DATABASE_URL": db_url, "PYTHONPATH": str(ROOT), **env},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def wait_until(
    predicate: Callable[[], bool], timeout: float, message: str | Callable[[], str] = ""
) -> None:
    """Poll `predicate` until true; else fail with `message` (called then, if callable)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    text = message() if callable(message) else message
    raise AssertionError(text or "condition not reached in time")


def scalar(url: str, query: str, params: tuple[Any, ...] = ()) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query, params).fetchone()
        return row[0] if row else None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes; read its state.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):  # gone while being read
        return False
    return state != "Z"


def wait_routine_run(
    conn: psycopg.Connection, routine: UUID, timeout: float = 15
) -> tuple[str, str]:
    """Wait for the routine's first run to end; its status and summary."""

    def finished() -> bool:
        row = conn.execute(
            "select count(*) from ceaseless.routine_runs where routine_id = %s "
            "and status not in ('running')",
            (routine,),
        ).fetchone()
        return row is not None and row[0] >= 1

    wait_until(finished, timeout, "the routine run never finished")
    row = conn.execute(
        "select status, coalesce(result_summary, '') from ceaseless.routine_runs "
        "where routine_id = %s order by started_at limit 1",
        (routine,),
    ).fetchone()
    assert row is not None
    return row[0], row[1]
