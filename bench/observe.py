"""Watching a run without disturbing it: listener processes, NOTIFY counters, statistics."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent


class Listener:
    """A `ceaseless listen` process, as an operator would run it."""

    def __init__(self, url: str, *args: str, worker_id: str) -> None:
        env = {**os.environ, "DATABASE_URL": url, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [
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
        self._ready = threading.Event()
        # Log lines that report a deadlock: the listener retries the call,
        # so a deadlock costs time without failing anything visibly.
        self.deadlock_lines = 0
        self._pumping = threading.Thread(target=self._pump, daemon=True)
        self._pumping.start()

    def _pump(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if '"listen.subscribed"' in line:
                self._ready.set()
            if "deadlock" in line or "40P01" in line:
                self.deadlock_lines += 1

    def wait_ready(self, timeout: float = 30) -> Listener:
        if not self._ready.wait(timeout):
            raise RuntimeError("the listener did not start")
        return self

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._pumping.join(5)  # its last lines are counted before anyone reads the count


class DeliveredCounter:
    """Counts delivered jobs from `ceaseless_job` notifications: no polling of the table."""

    def __init__(self, url: str) -> None:
        self._conn = psycopg.connect(url, autocommit=True)
        self._conn.execute("listen ceaseless_job")
        self.delivered = 0

    def wait_for(self, target: int, timeout: float) -> float:
        """Block until `target` deliveries were announced; returns the monotonic time then."""
        deadline = time.monotonic() + timeout
        while self.delivered < target:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"only {self.delivered} of {target} delivered")
            for notify in self._conn.notifies(timeout=min(remaining, 1.0)):
                payload = json.loads(notify.payload)
                if payload.get("state") == "delivered":
                    self.delivered += int(payload.get("count", 1))
                if self.delivered >= target:
                    break
        return time.monotonic()

    def close(self) -> None:
        self._conn.close()


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.02) -> float:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(interval)
    return time.monotonic()


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary(samples: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples)}
