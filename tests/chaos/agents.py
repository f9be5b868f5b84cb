"""Watching the agent processes the listeners spawn, from /proc, to catch double runs.

A listener puts CEASELESS_JOB_ID and CEASELESS_RUN_ID into every agent's environment.
`AgentWatch` polls /proc in a background thread (every 20 ms by default) for live
processes whose environment has CEASELESS_JOB_ID and every `match` variable (a test
sets e.g. CHAOS_TAG=<uuid> in its listeners' environment so that parallel tests do
not see each other's agents), and keeps one `AgentRecord` per process. The test then
asks `overlaps()` whether one job ran on two listeners at once.

Guarantees:
- A record's [first_seen, last_seen] lies within the time the process really carried
  the job's environment (up to the microseconds one /proc read takes), so a reported
  overlap really happened. An overlap shorter than the poll interval can be missed.
- A zombie (state Z) counts as exited; a pid that is reused is a new record (records
  are keyed by pid and kernel start time).
- A process that vanishes or turns unreadable mid-read is skipped without error; any
  other error in the watch thread is re-raised by the next method call.
- An agent's descendants inherit its environment and are recorded too, with
  `root=False`; their `spawner` is the agent's. Only roots are compared for overlaps,
  so an agent never overlaps its own children.

Linux only. Cost: a process's environment is read every poll while it is younger
than two seconds (between fork and exec it still has its parent's environment),
then about once a second; a recorded agent's stat is read every poll.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from tests.chaos.closing import Closing

JOB_VAR = "CEASELESS_JOB_ID"
RUN_VAR = "CEASELESS_RUN_ID"

_YOUNG_SECS = 2.0
_RECHECK_SECS = 1.0
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class AgentRecord:
    """What was seen of one process carrying CEASELESS_JOB_ID."""

    pid: int
    start_ticks: int
    """The kernel's start time of the process (clock ticks since boot)."""
    job_id: str
    run_id: str | None
    env: Mapping[str, str]
    """The values of the watch's `record` variables that the process has."""
    cmdline: tuple[str, ...]
    """The command line, as of its first two seconds (after any exec)."""
    ppid: int
    """The parent when first seen."""
    spawner: int
    """The nearest ancestor without CEASELESS_JOB_ID: the listener that spawned the agent."""
    spawner_start_ticks: int
    spawner_cmdline: tuple[str, ...]
    root: bool
    """Whether the parent is the spawner, i.e. this is the agent and not its descendant."""
    first_seen: float
    last_seen: float
    """time.time() of the first and last reads that found the process alive."""
    exited: bool

    @property
    def key(self) -> tuple[int, int]:
        return (self.pid, self.start_ticks)

    @property
    def spawner_key(self) -> tuple[int, int]:
        return (self.spawner, self.spawner_start_ticks)


@dataclass(frozen=True)
class Overlap:
    """Two agents of one job alive at the same time, from `start` to `end`."""

    job_id: str
    first: AgentRecord
    second: AgentRecord
    start: float
    end: float


def find_overlaps(records: Iterable[AgentRecord], *, across_spawners: bool = True) -> list[Overlap]:
    """Pairs of root agents of the same job whose observed lifetimes overlap.

    With `across_spawners` (the default), only pairs spawned by different processes:
    the same job running on two listeners at once. Without, also two concurrent
    agents of one listener.
    """
    by_job: dict[str, list[AgentRecord]] = {}
    for record in records:
        if record.root:
            by_job.setdefault(record.job_id, []).append(record)
    found = []
    for job_id, agents in sorted(by_job.items()):
        agents.sort(key=lambda record: record.first_seen)
        for first, second in itertools.combinations(agents, 2):
            if across_spawners and first.spawner_key == second.spawner_key:
                continue
            start = max(first.first_seen, second.first_seen)
            end = min(first.last_seen, second.last_seen)
            if start < end:
                found.append(Overlap(job_id, first, second, start, end))
    return found


@dataclass
class _Proc:
    """One /proc read: enough to decide whether the process is an agent."""

    pid: int
    state: str
    ppid: int
    start_ticks: int
    before: float
    """time.time() before the read: the process was alive at some moment after it."""
    after: float = 0.0
    """time.time() after the environment was read: it carried it at some moment before."""
    environ: dict[str, str] | None = None


@dataclass
class _Known:
    """A process that is not (yet) an agent, and when to read it again."""

    start_ticks: int
    next_check: float = 0.0


class AgentWatch(Closing):
    """Records every process with CEASELESS_JOB_ID (and `match`) from start to stop.

    `record` names the environment variables kept in `AgentRecord.env`.
    Use as a context manager, or call `start()` and `stop()`.
    """

    def __init__(
        self,
        *,
        match: Mapping[str, str] | None = None,
        record: Sequence[str] = ("CEASELESS_WORKER",),
        interval: float = 0.02,
    ) -> None:
        self.match = dict(match or {})
        self.record_vars = tuple(record)
        self.interval = interval
        self._records: dict[tuple[int, int], AgentRecord] = {}
        self._alive: dict[int, tuple[int, int]] = {}  # pid -> key of a live record
        self._known: dict[int, _Known] = {}
        self._scans = 0
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    # -- the test's side ---------------------------------------------------

    def start(self) -> AgentWatch:
        if self._thread is not None:
            raise RuntimeError("this AgentWatch was already started")
        self._scan()  # agents that already run are seen before start() returns
        self._thread = threading.Thread(target=self._run, name="AgentWatch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching after one last scan; records stay readable; idempotent."""
        if self._thread is not None and self._thread.is_alive():
            self._stop.set()
            self._thread.join(10)
        self._raise_error()

    def _open(self) -> None:
        self.start()

    def close(self) -> None:
        self.stop()

    def records(self, job_id: str | None = None, *, roots_only: bool = False) -> list[AgentRecord]:
        """Every record so far (of `job_id`), in order of first sight."""
        self._raise_error()
        with self._cond:
            found = list(self._records.values())
        return [
            record
            for record in sorted(found, key=lambda record: record.first_seen)
            if (job_id is None or record.job_id == job_id) and (record.root or not roots_only)
        ]

    def agents(self, job_id: str | None = None) -> list[AgentRecord]:
        """The root records: one per agent a listener spawned."""
        return self.records(job_id, roots_only=True)

    def overlaps(self, *, across_spawners: bool = True) -> list[Overlap]:
        """`find_overlaps` over every record so far."""
        return find_overlaps(self.records(), across_spawners=across_spawners)

    def sync(self, timeout: float = 5.0) -> None:
        """Wait until a scan that began after this call has finished."""
        self._raise_error()
        with self._cond:
            target = self._scans + 2  # the scan running now may have begun before the call
            if not self._cond.wait_for(
                lambda: self._scans >= target or self._error is not None, timeout
            ):
                raise TimeoutError(f"AgentWatch made no scan in {timeout} s")
        self._raise_error()

    def wait_for(
        self,
        predicate: Callable[[list[AgentRecord]], bool],
        timeout: float = 10.0,
        message: str = "condition",
    ) -> list[AgentRecord]:
        """Wait until `predicate(records())` holds; return those records."""
        deadline = time.monotonic() + timeout
        while True:
            records = self.records()
            if predicate(records):
                return records
            if time.monotonic() > deadline:
                raise TimeoutError(f"AgentWatch: {message} not met in {timeout} s: {records}")
            with self._cond:
                self._cond.wait(self.interval * 2)

    # -- the watch thread --------------------------------------------------

    def _raise_error(self) -> None:
        if self._error is not None:
            raise RuntimeError("the AgentWatch thread failed") from self._error

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                self._scan()
            self._scan()
        except BaseException as error:
            self._error = error
        finally:
            with self._cond:
                self._cond.notify_all()

    def _scan(self) -> None:
        now = time.time()
        uptime = _uptime()
        pids = {int(name) for name in os.listdir("/proc") if name.isdigit()}
        seen: dict[int, _Proc] = {}
        for pid in pids:
            if pid in self._alive:
                proc = _read_stat(pid)
                if proc is None or proc.state == "Z":
                    continue
                if (proc.pid, proc.start_ticks) == self._alive[pid]:
                    seen[pid] = proc  # a known agent: its environment is not read again
                    continue
                # The pid was reused: the new process is read as any other.
            known = self._known.get(pid)
            if known is not None and now < known.next_check:
                continue
            proc = _read_stat(pid)
            if proc is None or proc.state == "Z":
                continue
            if known is None or known.start_ticks != proc.start_ticks:
                known = self._known[pid] = _Known(proc.start_ticks)
            proc.environ = _read_environ(pid)
            proc.after = time.time()
            if proc.environ is not None and self._matches(proc.environ):
                seen[pid] = proc
                del self._known[pid]
            elif uptime - proc.start_ticks / _CLOCK_TICKS < _YOUNG_SECS:
                known.next_check = 0.0  # between fork and exec, it may yet become an agent
            else:
                known.next_check = now + _RECHECK_SECS
        for pid in list(self._known):
            if pid not in pids:
                del self._known[pid]
        self._update(seen)

    def _matches(self, environ: Mapping[str, str]) -> bool:
        return JOB_VAR in environ and all(
            environ.get(name) == value for name, value in self.match.items()
        )

    def _update(self, seen: dict[int, _Proc]) -> None:
        updated: dict[tuple[int, int], AgentRecord] = {}
        for pid, key in self._alive.items():
            proc = seen.get(pid)
            record = self._records[key]
            if proc is not None and (pid, proc.start_ticks) == key:
                # Seen between fork and exec (a shell's `cmd &`), a process
                # still shows its parent's command line: read it again while
                # it is young, so the record names what it became.
                young = proc.before - record.first_seen < _YOUNG_SECS
                cmdline = (_read_cmdline(pid) or record.cmdline) if young else record.cmdline
                updated[key] = replace(record, last_seen=proc.before, cmdline=cmdline)
            else:
                updated[key] = replace(record, exited=True)
        for pid, proc in seen.items():
            key = (pid, proc.start_ticks)
            if key not in updated:
                updated[key] = self._new_record(proc, seen)
        with self._cond:
            self._records.update(updated)
            self._alive = {key[0]: key for key, record in updated.items() if not record.exited}
            self._scans += 1
            self._cond.notify_all()

    def _new_record(self, proc: _Proc, seen: dict[int, _Proc]) -> AgentRecord:
        assert proc.environ is not None
        job_id = proc.environ[JOB_VAR]
        spawner = proc.ppid
        hops = 0
        # Climb through ancestors that carry the same job: the agent and its shell.
        while hops < 64:
            parent = self._job_of(spawner, seen)
            if parent is None or parent[0] != job_id:
                break
            spawner = parent[1]
            hops += 1
        spawner_stat = _read_stat(spawner)
        return AgentRecord(
            pid=proc.pid,
            start_ticks=proc.start_ticks,
            job_id=job_id,
            run_id=proc.environ.get(RUN_VAR),
            env={name: proc.environ[name] for name in self.record_vars if name in proc.environ},
            cmdline=_read_cmdline(proc.pid),
            ppid=proc.ppid,
            spawner=spawner,
            spawner_start_ticks=spawner_stat.start_ticks if spawner_stat else 0,
            spawner_cmdline=_read_cmdline(spawner),
            root=spawner == proc.ppid,
            first_seen=proc.after,
            last_seen=proc.after,
            exited=False,
        )

    def _job_of(self, pid: int, seen: dict[int, _Proc]) -> tuple[str, int] | None:
        """(job id, parent pid) of a process with the job variable, else None."""
        proc = seen.get(pid)
        if proc is not None and proc.environ is not None:
            return proc.environ[JOB_VAR], proc.ppid
        key = self._alive.get(pid)
        if key is not None:
            record = self._records[key]
            return record.job_id, record.ppid
        return None


def _uptime() -> float:
    with open("/proc/uptime", "rb") as file:
        return float(file.read().split()[0])


def _read_stat(pid: int) -> _Proc | None:
    before = time.time()
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            data = file.read()
    except OSError:
        return None
    # The command name is in parentheses and may itself hold spaces and parentheses.
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return _Proc(pid, fields[0].decode(), int(fields[1]), int(fields[19]), before)
    except (IndexError, ValueError):
        return None


def _read_environ(pid: int) -> dict[str, str] | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as file:
            data = file.read()
    except OSError:
        return None
    if JOB_VAR.encode() not in data:
        return {}
    environ = {}
    for entry in data.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep:
            environ[name.decode(errors="replace")] = value.decode(errors="replace")
    return environ


def _read_cmdline(pid: int) -> tuple[str, ...]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            data = file.read()
    except OSError:
        return ()
    return tuple(part.decode(errors="replace") for part in data.split(b"\0") if part)
