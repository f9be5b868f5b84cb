"""Event load: concurrent producers insert events that each fire several routines, while
listener processes run the routines' jobs.

Routines fire inside the INSERT INTO events transaction, so this is where event
firing meets itself (producers firing the same routines at once) and meets the
listeners finishing earlier runs of those routines. The chaos test
tests/chaos/test_event_load.py drives the same producers and asserts what must
hold; the benchmark (`bench.ours.event_load`) times it.

What a caller can rely on:
- every producer has its own connection in autocommit, so each INSERT is its own
  transaction, and all producers start together (connecting is not timed);
- an INSERT that raises is counted by SQLSTATE and never retried: an error here
  is an event the user lost;
- a producer whose connection broke stops, rather than counting one error per
  event it could no longer send;
- events are accounted by their content, which is unique per event, against the
  `context` every routine run records;
- with `relay`, the producers' sessions set ceaseless.notify = 'relay' (docs/notify.md,
  "Relayed announcements") and the listeners send what they announce; the listeners' own
  sessions announce directly either way.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import psycopg
from psycopg.conninfo import make_conninfo

from bench.observe import Listener

USER = "bench"
# Every event contains it, so each of the user's routines matches each event.
PATTERN = "deploy"


@dataclass
class Produced:
    """What the producers saw: every INSERT attempted, its latency and its error if any."""

    started: float  # monotonic, when the producers were released
    finished: float  # monotonic, when the last producer was done
    latencies_ms: list[float] = field(default_factory=list)
    inserted: list[str] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def attempted(self) -> int:
        return len(self.latencies_ms)


def error_code(exc: psycopg.Error) -> str:
    """The SQLSTATE of a failed statement, or the exception's class when the server sent none
    (a broken connection)."""
    return exc.sqlstate or type(exc).__name__


class _Producer(threading.Thread):
    """One connection inserting its contents one event per transaction, as fast as it can."""

    def __init__(self, url: str, user: str, contents: Sequence[str], go: threading.Barrier):
        super().__init__(daemon=True)
        self.url = url
        self.user = user
        self.contents = contents
        self.go = go
        self.latencies_ms: list[float] = []
        self.inserted: list[str] = []
        self.errors: Counter[str] = Counter()
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                self.go.wait()
                self._insert_all(conn)
        except BaseException as exc:  # re-raised by produce(), in the caller's thread
            self.failure = exc
            self.go.abort()

    def _insert_all(self, conn: psycopg.Connection) -> None:
        for content in self.contents:
            tick = time.perf_counter()
            try:
                conn.execute(
                    "insert into ceaseless.events (user_id, content) values (%s, %s)",
                    (self.user, content),
                )
            except psycopg.Error as exc:
                self.errors[error_code(exc)] += 1
                if conn.broken:
                    return
            else:
                self.inserted.append(content)
            finally:
                self.latencies_ms.append((time.perf_counter() - tick) * 1000)


def produce(url: str, user: str, shares: Sequence[Sequence[str]]) -> Produced:
    """Insert every content of `shares` as an event of `user`, one producer per share."""
    go = threading.Barrier(len(shares) + 1)
    producers = [_Producer(url, user, share, go) for share in shares]
    for producer in producers:
        producer.start()
    go.wait(timeout=60)
    started = time.monotonic()
    for producer in producers:
        producer.join()
    produced = Produced(started, time.monotonic())
    for producer in producers:
        if producer.failure is not None:
            raise producer.failure
        produced.latencies_ms += producer.latencies_ms
        produced.inserted += producer.inserted
        produced.errors += producer.errors
    return produced


def shares(count: int, producers: int, label: str = PATTERN) -> list[list[str]]:
    """`count` unique event contents, each containing `label`, dealt to `producers`."""
    return [[f"{label} {p}-{i:06d}" for i in range(p, count, producers)] for p in range(producers)]


@dataclass
class EventLoad:
    """One run of the event load: what the producers saw and what became of the runs."""

    produced: Produced
    completed_at: float  # monotonic, when no run was left running (or the deadline passed)
    statuses: Counter[str]  # routine_runs.status -> count
    skipped: Counter[str]  # skip_reason -> count
    missing: int  # (committed event, matching routine) pairs with no run at all
    extra: int  # runs beyond one per committed event and matching routine
    listener_deadlocks: int

    @property
    def completed(self) -> int:
        return sum(n for status, n in self.statuses.items() if status not in ("running", "skipped"))


def run(
    url: str,
    events: int,
    *,
    producers: int = 4,
    listeners: int = 2,
    routines: int = 6,
    max_running: int = 100_000,
    timeout: float = 120,
    relay: bool = False,
) -> EventLoad:
    """Insert `events` events from `producers` connections into a migrated database, each
    matching `routines` routines, with `listeners` listeners running the noop agent."""
    with psycopg.connect(url, autocommit=True) as conn:
        _set_up(conn, routines, max_running)
        procs = [
            Listener(url, "--poll-interval", "60", "--concurrency", "1000", worker_id=f"load-{i}")
            for i in range(listeners)
        ]
        try:
            for proc in procs:
                proc.wait_ready()
            producing = make_conninfo(url, options="-c ceaseless.notify=relay") if relay else url
            produced = produce(producing, USER, shares(events, producers))
            completed_at = _wait_until_none_running(conn, timeout)
        finally:
            for proc in procs:
                proc.stop()
        missing, extra = _account(conn, routines)
        return EventLoad(
            produced,
            completed_at,
            Counter(dict(conn.execute(_STATUSES).fetchall())),
            Counter(dict(conn.execute(_SKIPPED).fetchall())),
            missing,
            extra,
            sum(proc.deadlock_lines for proc in procs),
        )


def _set_up(conn: psycopg.Connection, routines: int, max_running: int) -> None:
    # A cap, a cooldown or a concurrency limit that binds would turn fires into
    # skips, and the scenario would measure refusals instead of runs.
    conn.execute(
        "insert into ceaseless.agents (name, adapter, max_concurrent) "
        "values ('noop', 'noop', 100000)"
    )
    conn.execute(
        "update ceaseless.settings set value = to_jsonb(%s::integer) "
        "where key = 'routine_max_running'",
        (max_running,),
    )
    conn.execute(
        "insert into ceaseless.routines (name, user_id, agent, trigger_type, trigger_config, "
        "action_type, action_config, cooldown_secs, max_concurrent) "
        "select 'load-' || g, %s, 'noop', 'event', jsonb_build_object('pattern', %s::text), "
        "'lightweight', '{\"prompt\": \"check\"}', 0, 100000 from generate_series(1, %s) g",
        (USER, PATTERN, routines),
    )


def _wait_until_none_running(conn: psycopg.Connection, timeout: float) -> float:
    """The monotonic time at which no routine run was running any more (or the deadline)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = conn.execute(
            "select exists (select from ceaseless.routine_runs where status = 'running')"
        ).fetchone()
        if row == (False,):
            break
        time.sleep(0.02)
    return time.monotonic()


_STATUSES = "select status, count(*) from ceaseless.routine_runs group by status"
_SKIPPED = (
    "select skip_reason, count(*) from ceaseless.routine_runs "
    "where status = 'skipped' group by skip_reason"
)


def _account(conn: psycopg.Connection, routines: int) -> tuple[int, int]:
    """(missing, extra) runs: each committed event should have exactly one run (fired or
    skipped) per routine, found by the event's unique content."""
    row = conn.execute(
        "with per_event as ("
        "  select e.id, count(rr.id) as runs from ceaseless.events e "
        "  left join ceaseless.routine_runs rr on rr.context = e.content "
        "  group by e.id) "
        "select coalesce(sum(greatest(%(n)s - runs, 0)), 0), "
        "       coalesce(sum(greatest(runs - %(n)s, 0)), 0) from per_event",
        {"n": routines},
    ).fetchone()
    # A run that names no committed event fired for an event that rolled back,
    # or for content nobody sent.
    orphans = conn.execute(
        "select count(*) from ceaseless.routine_runs rr "
        "where not exists (select from ceaseless.events e where e.content = rr.context)"
    ).fetchone()
    assert row is not None and orphans is not None
    return int(row[0]), int(row[1]) + int(orphans[0])
