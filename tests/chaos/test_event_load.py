"""Event routines under concurrent load: producers fire the same routines at once while
listeners finish earlier runs of them, with the global cap binding.

Event routines fire inside the INSERT INTO events transaction. Four producer
connections insert events of one user as fast as they can; each event matches the
user's six broad routines, every seventh also a canary routine; a routine of the
same user that matches nothing and a second user's routines that match
everything must never fire. Two real listeners run the noop agent and finish runs
while events keep firing the same routines. `routine_max_running` is low, so most
fires are refused for the global cap and the cap is exercised on every event.

What a user would notice is asserted, all of it in one report so a failing run
shows every defect at once: an event INSERT that failed (by SQLSTATE); a listener
that hit a deadlock or did not exit cleanly; more runs running than the cap, seen
by a sampler polling as fast as it can; an event with a run missing, doubled or
fired for a routine it does not match; a run that never completed; a fire refused
for any reason but the global cap (cooldown 0 and huge max_concurrent refuse
nothing).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest

from bench.event_load import Produced, produce
from tests.e2e.support import ListenerProcess
from tests.factories import make_agent, make_routine

pytestmark = pytest.mark.slow

EVENTS = 5_000
PRODUCERS = 4
LISTENERS = 2
CAP = 20
USER = "ops"
BROAD = [f"broad-{n}" for n in range(1, 7)]
CANARY = "canary"
CANARY_EVERY = 7
# Generous: a noop run takes milliseconds; the slack is for a loaded machine.
COMPLETION_DEADLINE_SECS = 60


@pytest.fixture
def listeners() -> Iterator[Callable[..., ListenerProcess]]:
    started: list[ListenerProcess] = []

    def start(url: str, *args: str, worker_id: str) -> ListenerProcess:
        process = ListenerProcess(url, *args, worker_id=worker_id)
        started.append(process)
        return process.ready()

    yield start
    for process in started:
        process.stop(timeout=15)


def _contents() -> list[list[str]]:
    """Every event's content, unique (so a run names its event exactly), dealt to the
    producers; every CANARY_EVERY-th also matches the canary routine."""
    return [
        [
            f"deploy {p}-{i:06d}" + (" canary" if i % CANARY_EVERY == 0 else "")
            for i in range(p, EVENTS, PRODUCERS)
        ]
        for p in range(PRODUCERS)
    ]


def _expected_routines(content: str) -> set[str]:
    return set(BROAD) | ({CANARY} if "canary" in content else set())


def _set_up_routines(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=100_000)
    conn.execute(
        "update ceaseless.settings set value = to_jsonb(%s::integer) "
        "where key = 'routine_max_running'",
        (CAP,),
    )

    def event_routine(name: str, pattern: str, user: str = USER) -> None:
        # Cooldown 0 and a per-routine limit far away: the global cap is the
        # only guardrail that may refuse a fire.
        make_routine(
            conn,
            name,
            "event",
            {"pattern": pattern},
            user_id=user,
            cooldown_secs=0,
            max_concurrent=100_000,
        )

    for name in BROAD:
        event_routine(name, "deploy")
    event_routine(CANARY, r"deploy \S+ canary")
    event_routine("rollback", "rollback")  # the user's, but no event matches it
    for n in range(1, 4):
        event_routine(f"bystander-{n}", "deploy", user="someone-else")


# The trigger-kept count of running runs, in whichever form the schema has it:
# checked against count(*) in the same snapshot, where the two must agree.
_GAUGES = {
    "routine_run_shards": "select coalesce(sum(running), 0) from ceaseless.routine_run_shards",
    "routine_run_gauge": "select running from ceaseless.routine_run_gauge",
}


@dataclass
class CapSamples:
    samples: int = 0
    most_running: int = 0
    gauge: str | None = None
    # (count(*) of running runs, the gauge) in samples where they differed.
    disagreements: list[tuple[int, int]] = field(default_factory=list)


class RunningSampler(threading.Thread):
    """Counts running routine runs on its own connection, as often as it can, until stopped."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.halt = threading.Event()
        self.found = CapSamples()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                query = self._query(conn)
                while not self.halt.is_set():
                    row = conn.execute(query).fetchone()
                    assert row is not None
                    self._record(int(row[0]), None if row[1] is None else int(row[1]))
        except BaseException as exc:  # re-raised by stop(), in the test's thread
            self.error = exc

    def _query(self, conn: psycopg.Connection) -> str:
        for table, gauge in _GAUGES.items():
            row = conn.execute("select to_regclass(%s)", (f"ceaseless.{table}",)).fetchone()
            if row is not None and row[0] is not None:
                self.found.gauge = table
                return (
                    "select (select count(*) from ceaseless.routine_runs "
                    f"where status = 'running'), ({gauge})"
                )
        return "select (select count(*) from ceaseless.routine_runs where status = 'running'), null"

    def _record(self, running: int, gauge: int | None) -> None:
        self.found.samples += 1
        self.found.most_running = max(self.found.most_running, running)
        if gauge is not None and gauge != running:
            self.found.disagreements.append((running, gauge))

    def stop(self) -> CapSamples:
        self.halt.set()
        self.join(10)
        if self.error is not None:
            raise self.error
        return self.found


def _wait_until_none_running(conn: psycopg.Connection) -> int:
    """Runs still running when the deadline passed (0 when all completed in time)."""
    deadline = time.monotonic() + COMPLETION_DEADLINE_SECS
    while True:
        row = conn.execute(
            "select count(*) from ceaseless.routine_runs where status = 'running'"
        ).fetchone()
        assert row is not None
        if row[0] == 0 or time.monotonic() > deadline:
            return int(row[0])
        time.sleep(0.1)


def _insert_problems(produced: Produced) -> list[str]:
    if not produced.errors:
        return []
    return [
        f"{sum(produced.errors.values())} of {produced.attempted} event INSERTs failed, "
        f"by SQLSTATE: {dict(produced.errors)} (40P01 is a deadlock)"
    ]


def _deadlock_gist(line: dict[str, Any]) -> str:
    """The call, and where the deadlock struck, of a log line that reports one (the error
    text itself carries the whole statement)."""
    error = str(line.get("error", line))
    where = next((part for part in error.splitlines() if part.startswith("CONTEXT:")), "")
    # The tuple's position differs from one deadlock to the next; the relation does not.
    where = re.sub(r"tuple \(\d+,\d+\)", "a tuple", where.removeprefix("CONTEXT:").strip())
    call = str(line.get("call", line.get("event")))
    return f"{call}: {where}" if where else call


def _listener_problems(processes: list[ListenerProcess]) -> list[str]:
    problems = []
    for process in processes:
        code = process.stop(timeout=30)
        deadlocks = Counter(
            _deadlock_gist(line)
            for line in process.lines
            if "deadlock" in (text := json.dumps(line).lower()) or "40p01" in text
        )
        if deadlocks:
            problems.append(
                f"listener {process.worker_id} logged {deadlocks.total()} deadlocks, "
                f"by call and place: {dict(deadlocks)}"
            )
        if code != 0:
            problems.append(
                f"listener {process.worker_id} exited with {code}: {process.lines[-5:]}"
            )
    return problems


def _cap_problems(found: CapSamples, skipped: Counter[str | None]) -> list[str]:
    problems = []
    if found.most_running > CAP:
        problems.append(
            f"{found.most_running} runs were running at once in one of {found.samples} "
            f"samples; routine_max_running is {CAP}"
        )
    if found.disagreements:
        problems.append(
            f"{found.gauge} disagreed with count(*) of running runs in "
            f"{len(found.disagreements)} of {found.samples} samples, e.g. (count, gauge) "
            f"{found.disagreements[:5]}"
        )
    if skipped["global_cap"] == 0:
        # Otherwise the cap never bound and the samples above prove nothing.
        problems.append("no fire was refused for the global cap: the test exercised nothing")
    return problems


def _accounting_problems(conn: psycopg.Connection, produced: Produced) -> list[str]:
    """Each committed event has exactly one run (fired or skipped) per routine it matches,
    and no routine it does not match has a run for it."""
    committed = [content for (content,) in conn.execute("select content from ceaseless.events")]
    problems = []
    if Counter(committed) != Counter(produced.inserted):
        problems.append(
            f"events: {len(committed)} rows, but {len(produced.inserted)} INSERTs succeeded"
        )
    expected = {(c, name) for c in produced.inserted for name in _expected_routines(c)}
    runs = Counter(
        (context, f"{user}/{name}" if user != USER else name)
        for context, user, name in conn.execute(
            "select rr.context, r.user_id, r.name from ceaseless.routine_runs rr "
            "join ceaseless.routines r on r.id = rr.routine_id"
        )
    )
    missing = expected - runs.keys()
    doubled = {pair: n for pair, n in runs.items() if n > 1}
    stray: Counter[str] = Counter()
    for context, name in runs.keys() - expected:
        stray[name] += runs[(context, name)]
    if missing:
        by_routine = Counter(name for (_, name) in missing)
        problems.append(
            f"{len(missing)} (event, matching routine) pairs have no run, by routine: "
            f"{dict(by_routine)}; e.g. {sorted(missing)[:3]}"
        )
    if doubled:
        problems.append(
            f"{len(doubled)} (event, routine) pairs have more than one run, "
            f"{sum(doubled.values())} runs in all; e.g. {sorted(doubled.items())[:3]}"
        )
    if stray:
        problems.append(
            f"{stray.total()} runs for routines their event does not match "
            f"(or for no committed event), by routine: {dict(stray)}"
        )
    return problems


def _status_counts(conn: psycopg.Connection) -> tuple[Counter[str], Counter[str | None]]:
    statuses: Counter[str] = Counter(
        dict(conn.execute("select status, count(*) from ceaseless.routine_runs group by 1"))
    )
    skipped: Counter[str | None] = Counter(
        dict(
            conn.execute(
                "select skip_reason, count(*) from ceaseless.routine_runs "
                "where status = 'skipped' group by 1"
            )
        )
    )
    return statuses, skipped


def _completion_problems(still_running: int, skipped: Counter[str | None]) -> list[str]:
    problems = []
    if still_running:
        problems.append(
            f"{still_running} runs were still running {COMPLETION_DEADLINE_SECS} s "
            "after the last insert"
        )
    refused = {reason: n for reason, n in skipped.items() if reason != "global_cap"}
    if refused:
        problems.append(
            f"fires refused for a reason other than the global cap (cooldown 0, "
            f"max_concurrent 100,000): {refused}"
        )
    return problems


def test_concurrent_events_fire_each_matching_routine_once_within_the_global_cap(
    conn: psycopg.Connection,
    db_url: str,
    listeners: Callable[..., ListenerProcess],
) -> None:
    _set_up_routines(conn)
    processes = [
        listeners(db_url, "--poll-interval", "60", "--concurrency", "100", worker_id=f"load-{n}")
        for n in range(1, LISTENERS + 1)
    ]
    sampler = RunningSampler(db_url)
    sampler.start()
    try:
        started = time.monotonic()
        produced = produce(db_url, USER, _contents())
        inserting = time.monotonic() - started
        still_running = _wait_until_none_running(conn)
    finally:
        cap = sampler.stop()

    statuses, skipped = _status_counts(conn)
    problems = (
        _insert_problems(produced)
        + _listener_problems(processes)
        + _cap_problems(cap, skipped)
        + _accounting_problems(conn, produced)
        + _completion_problems(still_running, skipped)
    )
    summary = (
        f"{produced.attempted} INSERTs in {inserting:.1f} s from {PRODUCERS} producers; "
        f"runs by status {dict(statuses)}, skipped by reason {dict(skipped)}; "
        f"{cap.samples} samples of running runs, at most {cap.most_running} (cap {CAP})"
    )
    assert problems == [], "\n".join([summary, *problems])
