"""The listener under frozen connections and partitions (a proxy that neither answers nor closes).

Each test points a real listener process at a `FreezingProxy` in front of its
database and freezes it: existing connections only (half-open connections to a
healthy server), or new ones too (a partition). What a user would notice is
asserted: the listener says what happened within 30 s and catches up; a
finished agent's result is never dropped silently; a job never runs on two
listeners at once; a closed run is never rewritten.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any
from uuid import UUID

import psycopg
import pytest

from tests.chaos.agents import AgentWatch
from tests.chaos.proxy import FreezingProxy
from tests.e2e.support import FAKES, ListenerProcess, scalar, wait_until
from tests.factories import make_agent, make_job, make_routine

pytestmark = pytest.mark.slow

DETECTED_WITHIN_SECS = 30


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


def _sleeper(conn: psycopg.Connection, watch: AgentWatch, seconds: float, **columns: Any) -> str:
    """A command lane whose agent sleeps, tagged so `watch` sees its processes."""
    return make_agent(
        conn,
        "sleeper",
        "command",
        [str(FAKES / "fake_agent")],
        env={"FAKE_AGENT_MODE": "sleep", "FAKE_AGENT_SLEEP": str(seconds), **watch.match},
        **columns,
    )


def _one_agent_running(
    conn: psycopg.Connection,
    watch: AgentWatch,
    start: Callable[..., ListenerProcess],
    url: str,
    *args: str,
    seconds: float,
    worker_id: str,
) -> tuple[ListenerProcess, UUID]:
    """A listener at `url` running one sleeping agent `seconds` long; (listener, job)."""
    _sleeper(conn, watch, seconds)
    listener = start(url, *args, worker_id=worker_id)
    job = make_job(conn, agent="sleeper")
    wait_until(
        lambda: len(watch.agents()) == 1,
        30,
        lambda: f"the agent never started: {watch.records()} {listener.lines}",
    )
    return listener, job


def _state(url: str, job: object) -> str:
    return scalar(url, "select state from ceaseless.job where id = %s", (job,))


def test_idle_listener_replaces_frozen_connections_and_catches_up(
    conn: psycopg.Connection,
    db_url: str,
    proxy: FreezingProxy,
    listeners: Callable[..., ListenerProcess],
) -> None:
    make_agent(conn)
    # A routine due every second: the cron loop must keep firing it, on a
    # replaced connection, after the freeze.
    make_routine(conn, "tick", "cron", {"schedule": "* * * * * *", "timezone": "UTC"})
    # The fallback poll is far away: only a working LISTEN, or the catch-up
    # after replacing it, can start the job below in time.
    listener = listeners(proxy.url(), "--poll-interval", "120", worker_id="frozen")
    proxy.freeze()  # every existing connection; new ones work
    frozen_at = time.monotonic()
    frozen_at_db = scalar(db_url, "select now()")
    job = make_job(conn)

    listener.wait_for_event("listen.lost", timeout=DETECTED_WITHIN_SECS)
    listener.wait_for_event("listen.subscribed", count=2, timeout=DETECTED_WITHIN_SECS)
    wait_until(
        lambda: _state(db_url, job) == "delivered",
        DETECTED_WITHIN_SECS - (time.monotonic() - frozen_at),
        lambda: f"the job inserted after the freeze was not delivered: {listener.lines[-15:]}",
    )
    wait_until(
        lambda: (
            scalar(
                db_url,
                "select count(*) from ceaseless.routine_runs "
                "where started_at > %s + interval '5 s'",
                (frozen_at_db,),
            )
            > 0
        ),
        DETECTED_WITHIN_SECS - (time.monotonic() - frozen_at),
        lambda: f"cron stopped firing after the freeze: {listener.lines[-15:]}",
    )
    assert time.monotonic() - frozen_at < DETECTED_WITHIN_SECS
    lost = listener.events("listen.lost")[0]
    assert "did not answer" in lost["error"]


def test_result_of_an_agent_that_ends_during_a_freeze_reaches_the_database(
    conn: psycopg.Connection,
    db_url: str,
    proxy: FreezingProxy,
    listeners: Callable[..., ListenerProcess],
    agent_watch: AgentWatch,
) -> None:
    # Long enough that the freeze below surely lands while the agent runs.
    listener, job = _one_agent_running(
        conn,
        agent_watch,
        listeners,
        proxy.url(),
        "--db-deadline",
        "4",
        seconds=5,
        worker_id="frozen",
    )
    proxy.freeze()
    frozen_at = time.monotonic()
    assert not agent_watch.agents()[0].exited

    wait_until(
        lambda: _state(db_url, job) == "delivered",
        DETECTED_WITHIN_SECS,
        lambda: f"the result never reached the database: {listener.lines[-15:]}",
    )
    assert time.monotonic() - frozen_at < DETECTED_WITHIN_SECS
    runs = conn.execute(
        "select outcome, ended_by, exit_status from ceaseless.agent_run where job_id = %s",
        (job,),
    ).fetchall()
    assert runs == [("succeeded", "agent", 0)]
    # Whichever connection the result took, the frozen ones are found and said.
    listener.wait_for_event("listen.lost", timeout=DETECTED_WITHIN_SECS)


def test_shutdown_during_a_partition_names_the_results_it_could_not_record(
    conn: psycopg.Connection,
    db_url: str,
    proxy: FreezingProxy,
    listeners: Callable[..., ListenerProcess],
    agent_watch: AgentWatch,
) -> None:
    # Long enough that the partition below surely begins while the agent runs.
    listener, job = _one_agent_running(
        conn,
        agent_watch,
        listeners,
        proxy.url(),
        "--db-deadline",
        "2",
        "--shutdown-grace",
        "3",
        seconds=4,
        worker_id="cut-off",
    )
    proxy.freeze(new_connections=True)
    assert not agent_watch.agents()[0].exited
    wait_until(lambda: agent_watch.agents()[0].exited, 15, "the agent never ended")

    started = time.monotonic()
    status = listener.stop(timeout=30)

    assert status == 3
    assert time.monotonic() - started < 15
    (unrecorded,) = listener.events("listener.results_unrecorded")
    assert unrecorded["jobs"] == [str(job)]
    proxy.thaw()
    # Nothing was recorded behind our back, and nothing is lost: the lease
    # passes and the job runs again.
    assert _state(db_url, job) == "running"


def test_partitioned_listener_stops_its_agents_before_another_takes_their_jobs(
    conn: psycopg.Connection,
    db_url: str,
    proxy: FreezingProxy,
    listeners: Callable[..., ListenerProcess],
    agent_watch: AgentWatch,
) -> None:
    jobs_count = 10
    _sleeper(conn, agent_watch, 14, max_concurrent=jobs_count)
    lease = ("--lease-secs", "10", "--db-deadline", "3")
    partitioned = listeners(proxy.url(), *lease, worker_id="partitioned")
    jobs = [make_job(conn, agent="sleeper") for _ in range(jobs_count)]
    wait_until(
        lambda: len(agent_watch.records(roots_only=True)) >= jobs_count,
        30,
        lambda: f"not all agents started: {agent_watch.records()} {partitioned.lines[-10:]}",
    )
    proxy.freeze(new_connections=True)
    # When each lease ends in the database, as the partition found it.
    lease_ends = dict(
        conn.execute(
            "select id, extract(epoch from claim_expires_at)::float8 from ceaseless.job "
            "where id = any(%s)",
            (jobs,),
        ).fetchall()
    )
    rescuer = listeners(db_url, *lease, "--poll-interval", "1", worker_id="rescuer")

    wait_until(
        lambda: all(_state(db_url, job) == "delivered" for job in jobs),
        60,
        lambda: f"the rescued jobs were not all delivered: {rescuer.lines[-10:]}",
    )
    proxy.thaw()
    partitioned.wait_for_event("listen.subscribed", count=2, timeout=DETECTED_WITHIN_SECS)
    wait_until(
        lambda: scalar(db_url, "select count(*) from ceaseless.late_results") == jobs_count,
        DETECTED_WITHIN_SECS,
        lambda: f"the partitioned listener's results were not kept: {partitioned.lines[-10:]}",
    )

    records = [r for r in agent_watch.records() if r.root]
    first_runs = {r.job_id: r for r in records if r.spawner == partitioned.proc.pid}
    assert len(first_runs) == jobs_count
    # 0 jobs ran on two listeners at once, and every first agent was gone
    # before its lease ended in the database.
    assert agent_watch.overlaps() == []
    for job_id, record in first_runs.items():
        assert record.exited and record.last_seen < lease_ends[UUID(job_id)]
    assert len(partitioned.events("lease.fenced")) == jobs_count
    # 0 closed runs rewritten: each first run is as the lease sweep closed it.
    closed = conn.execute(
        "select outcome, ended_by, exit_status, final_message from ceaseless.agent_run "
        "where worker = 'partitioned'"
    ).fetchall()
    assert closed == [("lease_expired", "lease_expiry", None, None)] * jobs_count
    kept = conn.execute(
        "select distinct worker, result ->> 'outcome' from ceaseless.late_results"
    ).fetchall()
    assert kept == [("partitioned", "lease_expired")]


def test_a_listener_that_cannot_reach_its_database_still_stops_on_sigterm(
    db_url: str, proxy: FreezingProxy
) -> None:
    proxy.freeze(new_connections=True)
    listener = ListenerProcess(proxy.url(), "--db-deadline", "2", worker_id="never-connected")
    try:
        listener.wait_for_event("listener.starting")
        listener.wait_for_event("db.unavailable", timeout=20)
        started = time.monotonic()
        assert listener.stop(timeout=20) == 0
        assert time.monotonic() - started < 10
    finally:
        listener.stop(timeout=5)
