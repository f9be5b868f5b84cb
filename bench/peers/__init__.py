"""Peers of the benchmark: other PostgreSQL job queues, and PostgreSQL's own limit.

Every peer module exposes `run(dsn, jobs, *, workers=1) -> PeerResult` and is called by the
harness with an empty database of its own. This package holds what the peers share, so that
every peer is timed and counted the same way:

- `PeerResult`, the one answer shape the harness reads;
- `drain_in_processes`, which starts the consumer processes, lets each one set up (imports,
  connections, handler registration), then reads the start off the server's clock and releases
  them all at once. The clock stops at the last completion the peer itself recorded, read off
  the same server clock; the time a consumer takes to notice that the queue is empty and to
  exit is not counted;
- `tally`, which turns what was enqueued, what the no-op task saw, and what the peer's own
  bookkeeping says into completed / lost / duplicated.

The no-op task of every queue peer costs the same: it appends the job's id to a list in its
own process, and the list travels back to the parent when the consumer exits.

Guarantees: a consumer that fails or hangs fails the run (with the end of its stderr) instead of
yielding a number; consumer processes are always reaped.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime
from importlib import import_module
from typing import IO, Any

import psycopg

__all__ = ["Drain", "Gate", "PeerError", "PeerResult", "drain_in_processes", "tally"]

# Seconds a consumer process may take to start, import its queue and connect.
_SETUP_SECONDS = 60.0
# Seconds a consumer gets to exit after reporting, before it is killed.
_EXIT_SECONDS = 10.0
# How a consumer process is started: a fresh interpreter that imports its consumer by name, so
# nothing of the caller (its main module, threads, connections) is re-run or inherited.
_CHILD = "from bench.peers import consumer_main; consumer_main()"


@dataclass(frozen=True)
class PeerResult:
    """One peer's run: how long the drain took and how every enqueued job ended."""

    name: str  # "pgqueuer", "procrastinate", "pgbench limit"
    jobs: int  # jobs enqueued
    seconds: float  # from the release of the consumers until the last job was completed
    completed: int  # jobs observed completed exactly once
    lost: int  # enqueued but never completed
    duplicated: int  # completed more than once
    note: str = ""  # versions, settings, and what was counted


class PeerError(RuntimeError):
    """A consumer process failed or hung; the message carries its output or state."""


@dataclass(frozen=True)
class Drain:
    """A finished drain: when the consumers were released (server clock), each task run seen."""

    started_at: datetime
    runs: Counter[int]

    def seconds_until(self, last_completed_at: datetime | None) -> float:
        """Seconds from the release to the last completion the peer recorded (server clock)."""
        if last_completed_at is None:
            raise PeerError("the peer recorded no completion at all")
        return (last_completed_at - self.started_at).total_seconds()


class Gate:
    """A consumer's side of the start line: announce readiness, then wait for the common start."""

    def __init__(self, channel: IO[str], commands: IO[str]) -> None:
        self._channel = channel
        self._commands = commands

    async def wait(self) -> None:
        """Report this consumer set up, then block until every consumer may start."""
        _send(self._channel, {"ready": os.getpid()})
        line = await asyncio.to_thread(self._commands.readline)
        if line.strip() != "go":
            raise PeerError(f"expected 'go' from the parent, got {line!r}")


# A consumer: sets up, awaits gate.wait(), drains until its queue is empty, and returns the job
# ids its no-op task saw, one entry per run.
Consume = Callable[[str, Gate], Awaitable[list[int]]]


def _send(channel: IO[str], message: dict[str, object]) -> None:
    channel.write(json.dumps(message) + "\n")
    channel.flush()


def _resolve(reference: str) -> Consume:
    module, _, name = reference.partition(":")
    consume: Consume = getattr(import_module(module), name)
    return consume


def consumer_main() -> None:
    """Body of one consumer process: read its orders on stdin, report on stdout.

    stdin carries one JSON line {"consume": "module:function", "dsn": ...} (the DSN stays off
    the command line), then "go". stdout carries {"ready": pid}, then {"seen": [...]};
    anything a library prints goes to stderr instead.
    """
    channel, sys.stdout = sys.stdout, sys.stderr
    orders = json.loads(sys.stdin.readline())
    seen = asyncio.run(_resolve(orders["consume"])(orders["dsn"], Gate(channel, sys.stdin)))
    _send(channel, {"seen": seen})


def _reference(consume: Consume) -> str:
    reference = f"{consume.__module__}:{consume.__qualname__}"
    if _resolve(reference) is not consume:
        raise ValueError(f"{reference} is not importable by name; make it a module-level function")
    return reference


@dataclass(frozen=True)
class _Consumer:
    """A consumer interpreter, and the file its stderr goes to (a pipe could fill and block it)."""

    process: subprocess.Popen[str]
    log: IO[str]

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def receive(self, key: str, deadline: float) -> Any:
        """The consumer's next message, which must be `key`'s; PeerError on death or deadline.

        select() on the buffered stream is sound here because the consumer never writes a
        message before the parent has read the previous one.
        """
        stdout = self.process.stdout
        assert stdout is not None
        readable, _, _ = select.select([stdout], [], [], max(deadline - time.monotonic(), 0.0))
        if not readable:
            raise self.failure(f"did not report {key!r} in time; raise the timeout")
        line = stdout.readline()
        if not line:
            raise self.failure(f"exited before reporting {key!r}")
        message: dict[str, Any] = json.loads(line)
        if key not in message:
            raise self.failure(f"sent {sorted(message)} where {key!r} was due")
        return message[key]

    def failure(self, what: str) -> PeerError:
        code = self.process.poll()
        self.log.seek(0)
        tail = self.log.read()[-4000:]
        state = "still running" if code is None else f"exit code {code}"
        return PeerError(f"a consumer process {what} ({state}); its stderr ends with:\n{tail}")

    def reap(self) -> None:
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        try:
            self.process.wait(timeout=_EXIT_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextmanager
def _consumers(count: int) -> Iterator[list[_Consumer]]:
    """Start `count` consumer interpreters; always reap them, killing any that linger."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in sys.path if path)}
    with ExitStack() as stack:
        consumers: list[_Consumer] = []
        for _ in range(count):
            log = stack.enter_context(tempfile.TemporaryFile("w+"))
            process = subprocess.Popen(
                [sys.executable, "-c", _CHILD],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=env,
            )
            consumers.append(_Consumer(process, log))
        try:
            yield consumers
        finally:
            for consumer in consumers:
                consumer.reap()


def _now(clock: psycopg.Connection) -> datetime:
    """The server's clock: starts and completions are then read off one clock, the database's."""
    row = clock.execute("select clock_timestamp()").fetchone()
    assert row is not None
    now: datetime = row[0]
    return now


def drain_in_processes(consume: Consume, dsn: str, workers: int, *, timeout: float) -> Drain:
    """Run `workers` consumer processes over one queue, released together; wait until drained.

    `consume` must be a module-level function: each process imports it by name. The start is
    read off the server's clock once every consumer has called `gate.wait()`, just before they
    are released; `timeout` bounds the drain itself.
    """
    if workers < 1:
        raise ValueError("workers must be at least 1")
    orders = json.dumps({"consume": _reference(consume), "dsn": dsn})
    with _consumers(workers) as consumers:
        setup_deadline = time.monotonic() + _SETUP_SECONDS
        for consumer in consumers:
            consumer.send(orders)
        for consumer in consumers:
            consumer.receive("ready", setup_deadline)
        with psycopg.connect(dsn, autocommit=True) as clock:
            started_at = _now(clock)
            for consumer in consumers:
                consumer.send("go")
        deadline = time.monotonic() + timeout
        reports = [consumer.receive("seen", deadline) for consumer in consumers]
    runs: Counter[int] = Counter()
    for seen in reports:
        runs.update(seen)
    return Drain(started_at=started_at, runs=runs)


def tally(
    name: str,
    enqueued: Iterable[int],
    runs: Counter[int],
    finished: Counter[int],
    *,
    seconds: float,
    note: str,
) -> PeerResult:
    """Classify each enqueued job by how often its task ran and how often the peer finished it.

    Completed: the task ran once and the peer's bookkeeping records it finished once.
    Duplicated: the task ran, or the bookkeeping records it finished, more than once.
    Lost: everything else (never ran, or ran but its completion was never recorded).
    """
    ids = list(enqueued)
    duplicated = sum(1 for job in ids if runs[job] > 1 or finished[job] > 1)
    completed = sum(1 for job in ids if runs[job] == 1 and finished[job] == 1)
    return PeerResult(
        name=name,
        jobs=len(ids),
        seconds=seconds,
        completed=completed,
        lost=len(ids) - completed - duplicated,
        duplicated=duplicated,
        note=note,
    )
