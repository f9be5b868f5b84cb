"""ceaseless's scenarios: each measures one promise, on a fresh migrated database.

Every scenario goes through the real parts: listener processes started as an
operator would, jobs and routines inserted through the SQL API, and results read
back from the tables. Setup is excluded from the timings; what is timed says so.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from bench import event_load as load
from bench.observe import DeliveredCounter, Listener, percentile, wait_until
from bench.server import Server


@dataclass
class Measurement:
    """One run of one scenario: its numbers, and whether anything was lost or doubled."""

    values: dict[str, float]
    lost: int = 0
    duplicated: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def noop_lane(conn: psycopg.Connection) -> None:
    """The noop lane (jobs delivered at once, no process), room for 100,000 at a time."""
    conn.execute(
        "insert into ceaseless.agents (name, adapter, max_concurrent) "
        "values ('noop', 'noop', 100000) on conflict (name) do nothing"
    )


def _check_jobs(conn: psycopg.Connection, expected: int) -> tuple[int, int]:
    row = conn.execute(
        "select count(*) filter (where j.state <> 'delivered'), "
        "       coalesce(sum(greatest(r.runs - 1, 0)), 0) "
        "from ceaseless.job j "
        "left join (select job_id, count(*) as runs from ceaseless.agent_run group by job_id) r "
        "on r.job_id = j.id"
    ).fetchone()
    total = conn.execute("select count(*) from ceaseless.job").fetchone()
    assert row is not None and total is not None
    return int(row[0]) + (expected - int(total[0])), int(row[1])


def drain(
    url: str,
    conn: psycopg.Connection,
    jobs: int,
    listeners: int,
    timeout: float,
    *,
    listen_url: str | None = None,
) -> float:
    """Bulk-enqueue `jobs` noop jobs on a noop lane and let `listeners` listeners deliver them:
    seconds from the insert's commit until the last is delivered (the full path).

    `listen_url`: where LISTEN goes when `url` is a connection pooler's (--listen-url)."""
    noop_lane(conn)
    direct = ("--listen-url", listen_url) if listen_url else ()
    procs = [
        Listener(
            url, "--poll-interval", "60", "--concurrency", "5000", *direct, worker_id=f"bench-{i}"
        )
        for i in range(listeners)
    ]
    try:
        for proc in procs:
            proc.wait_ready()
        counter = DeliveredCounter(listen_url or url)
        # Like the peers, enqueueing is not timed: the clock starts when the
        # bulk insert commits, which is also when its NOTIFY wakes the
        # listeners.
        conn.execute(
            "insert into ceaseless.job (kind, agent, prompt) "
            "select 'task', 'noop', 'bench' from generate_series(1, %s)",
            (jobs,),
        )
        started = time.monotonic()
        finished = counter.wait_for(jobs, timeout=timeout)
        counter.close()
    finally:
        for proc in procs:
            proc.stop()
    return finished - started


def throughput(server: Server, jobs: int, listeners: int) -> Measurement:
    """Bulk-enqueue `jobs` noop jobs, then time commit → every job delivered (full path)."""
    with server.database(migrated=True) as url, psycopg.connect(url, autocommit=True) as conn:
        seconds = drain(url, conn, jobs, listeners, timeout=600)
        lost, duplicated = _check_jobs(conn, jobs)
        return Measurement({"jobs_per_s": jobs / seconds, "seconds": seconds}, lost, duplicated)


def latency(server: Server, jobs: int, rate: float) -> Measurement:
    """Insert jobs one at a time at `rate` per second; insert → agent start percentiles (ms)."""
    with server.database(migrated=True) as url, psycopg.connect(url, autocommit=True) as conn:
        noop_lane(conn)
        proc = Listener(url, "--poll-interval", "60", worker_id="bench-latency").wait_ready()
        try:
            counter = DeliveredCounter(url)
            for _ in range(jobs):
                tick = time.monotonic()
                conn.execute(
                    "insert into ceaseless.job (kind, agent, prompt) "
                    "values ('task', 'noop', 'bench')"
                )
                time.sleep(max(0.0, 1 / rate - (time.monotonic() - tick)))
            counter.wait_for(jobs, timeout=120)
            counter.close()
        finally:
            proc.stop()
        rows = conn.execute(
            "select extract(epoch from r.started_at - j.created_at) * 1000 "
            "from ceaseless.job j join ceaseless.agent_run r on r.job_id = j.id"
        ).fetchall()
        samples = [float(ms) for (ms,) in rows]
        lost, duplicated = _check_jobs(conn, jobs)
        return Measurement(
            {
                "p50_ms": percentile(samples, 50),
                "p95_ms": percentile(samples, 95),
                "p99_ms": percentile(samples, 99),
            },
            lost,
            duplicated,
            extra={"samples": samples},
        )


def cron_fanout(server: Server, routines: int, listeners: int = 2) -> Measurement:
    """`routines` cron routines due at one instant, two listeners: time until every run exists."""
    with server.database(migrated=True) as url, psycopg.connect(url, autocommit=True) as conn:
        noop_lane(conn)
        conn.execute(
            "update ceaseless.settings set value = %s where key = 'routine_max_running'",
            (json.dumps(routines * 2),),
        )
        procs = [
            Listener(url, "--poll-interval", "60", worker_id=f"bench-cron-{i}")
            for i in range(listeners)
        ]
        try:
            for proc in procs:
                proc.wait_ready()
            # An instant far enough ahead for the inserts and the scheduling to
            # finish, written as a six-field schedule (seconds last) that
            # fires exactly then.
            instant = (datetime.now(UTC) + timedelta(seconds=10 + routines / 500)).replace(
                microsecond=0
            )
            schedule = (
                f"{instant.minute} {instant.hour} {instant.day} {instant.month} * {instant.second}"
            )
            conn.execute(
                "insert into ceaseless.routines (name, user_id, agent, trigger_type, "
                "trigger_config, action_type, action_config, cooldown_secs) "
                "select 'r' || g, 'bench', 'noop', 'cron', %s, 'full_job', "
                '\'{"title": "t", "description": "d"}\', 0 '
                "from generate_series(1, %s) g",
                (json.dumps({"schedule": schedule, "timezone": "UTC"}), routines),
            )
            wait_until(
                lambda: (
                    conn.execute(
                        "select count(*) from ceaseless.routines where next_fire_at is null"
                    ).fetchone()
                    == (0,)
                ),
                timeout=120,
                interval=0.1,
            )
            if datetime.now(UTC) >= instant:
                raise RuntimeError("setup overran the firing instant; use fewer routines")
            time.sleep(max(0.0, (instant - datetime.now(UTC)).total_seconds()))
            # The monotonic clock's reading at the instant itself.
            at_instant = time.monotonic() - (datetime.now(UTC) - instant).total_seconds()
            # When each run became visible, read as the run count over time:
            # a run's own timestamps say when its batch began, not when it
            # committed.
            seen: list[tuple[float, int]] = []
            while not seen or seen[-1][1] < routines:
                if time.monotonic() - at_instant > 120:
                    raise TimeoutError(f"only {seen[-1][1]} of {routines} routines fired")
                row = conn.execute("select count(*) from ceaseless.routine_runs").fetchone()
                assert row is not None
                seen.append((time.monotonic() - at_instant, int(row[0])))
                time.sleep(0.01)
            all_runs_after = seen[-1][0]
            p99_after = next(t for t, n in seen if n >= 0.99 * routines)
            time.sleep(0.5)  # a double fire, if any, would land now
        finally:
            for proc in procs:
                proc.stop()
        row = conn.execute(
            "select count(*) filter (where n > 1), %s - count(*) from "
            "(select routine_id, count(*) as n from ceaseless.routine_runs group by routine_id) x",
            (routines,),
        ).fetchone()
        assert row is not None
        return Measurement(
            {
                "all_runs_s": all_runs_after,
                "lateness_p99_s": p99_after,
                "double_fires": float(row[0]),
            },
            lost=int(row[1]),
            duplicated=int(row[0]),
        )


_DUE_QUERY = (
    "select id from ceaseless.routines "
    "where enabled and next_fire_at is not null and next_fire_at <= now() "
    "order by next_fire_at limit 100 for update skip locked"
)


def scheduler_scale(server: Server, routines: int) -> Measurement:
    """Buffers of the scheduler's due query (a batch of 100) with `routines` rows, 1 % due."""
    with server.database(migrated=True) as url, psycopg.connect(url, autocommit=True) as conn:
        noop_lane(conn)
        # Setup only: the rows are written past the validation trigger, which
        # is not what is measured and would take minutes for a million rows.
        conn.execute("alter table ceaseless.routines disable trigger routines_validate")
        conn.execute("alter table ceaseless.routines disable trigger routines_changed")
        conn.execute(
            "insert into ceaseless.routines (name, user_id, agent, trigger_type, trigger_config, "
            "action_type, action_config, next_fire_at) "
            "select 'r' || g, 'u' || (g %% 1000), 'noop', 'cron', "
            '\'{"schedule": "* * * * *", "timezone": "UTC"}\', \'full_job\', '
            '\'{"title": "t", "description": "d"}\', '
            "case when g %% 100 = 0 then now() - interval '1 minute' "
            "     else now() + (g %% 10000) * interval '1 second' end "
            "from generate_series(1, %s) g",
            (routines,),
        )
        conn.execute("vacuum analyze ceaseless.routines")
        with conn.transaction(force_rollback=True):
            plan = conn.execute("explain (analyze, buffers, format json) " + _DUE_QUERY).fetchone()
        assert plan is not None
        top = plan[0][0]["Plan"]
        buffers = int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"])
        uses_index = "idx_routines_next_fire" in json.dumps(plan[0])
        return Measurement({"buffers": float(buffers)}, extra={"uses_index": uses_index})


def event_routines(conn: psycopg.Connection, routines: int) -> None:
    """`routines` event routines of the user 'bench' on a noop lane, the global cap lifted:
    distinct patterns, so each of `fanin_events` fires exactly one."""
    noop_lane(conn)
    conn.execute(
        "update ceaseless.settings set value = '100000000' where key = 'routine_max_running'"
    )
    conn.execute(
        "insert into ceaseless.routines (name, user_id, agent, trigger_type, trigger_config, "
        "action_type, action_config, cooldown_secs, max_concurrent) "
        "select 'e' || g, 'bench', 'noop', 'event', "
        "jsonb_build_object('pattern', 'alert-' || g || ' '), 'lightweight', "
        '\'{"prompt": "p"}\', 0, 1000000 from generate_series(1, %s) g',
        (routines,),
    )


def fanin_events(routines: int, events: int) -> Iterator[str]:
    """The contents of `events` events that each fire one of `event_routines`' routines."""
    return (f"alert-{i % routines + 1} on host {i}" for i in range(events))


def insert_events(conn: psycopg.Connection, contents: Iterable[str]) -> float:
    """Insert one event per content, each in its own transaction; the seconds it took."""
    started = time.monotonic()
    for content in contents:
        conn.execute(
            "insert into ceaseless.events (user_id, content) values ('bench', %s)", (content,)
        )
    return time.monotonic() - started


def event_fanin(server: Server, routines: int, events: int) -> Measurement:
    """Event inserts per second with `routines` event routines for the inserting user."""
    with server.database(migrated=True) as url, psycopg.connect(url, autocommit=True) as conn:
        event_routines(conn, routines)
        seconds = insert_events(conn, fanin_events(routines, events))
        fired = _count(conn, "select count(*) from ceaseless.routine_runs")
        # The same number of events that match no routine: what matching
        # alone costs, next to matching and firing.
        quiet = insert_events(conn, (f"heartbeat {i} from host {i % 7}" for i in range(events)))
        misfired = _count(conn, "select count(*) from ceaseless.routine_runs") - fired
        return Measurement(
            {
                "inserts_per_s": events / seconds,
                "ms_per_insert": seconds / events * 1000,
                "unmatched_inserts_per_s": events / quiet,
            },
            lost=events - fired,
            # Fires of events that should have matched nothing.
            duplicated=misfired,
        )


def event_load(
    server: Server, events: int, routines: int = 6, *, relay: bool = False
) -> Measurement:
    """Four producers insert `events` events, each firing `routines` routines, while two
    listeners run them: events/s, and routine runs/s from the first insert until the last
    run left `running`. With `relay`, the producers' announcements are relayed."""
    with server.database(migrated=True) as url:
        found = load.run(url, events, routines=routines, relay=relay)
    produced = found.produced
    return Measurement(
        {
            "events_per_s": len(produced.inserted) / (produced.finished - produced.started),
            "runs_per_s": found.completed / (found.completed_at - produced.started),
            # Every attempt, failed ones included: a producer waited for each.
            "insert_p50_ms": percentile(produced.latencies_ms, 50),
            "insert_p99_ms": percentile(produced.latencies_ms, 99),
            "insert_errors": float(sum(produced.errors.values())),
            # Nothing binds (no cooldown, caps far away): every skip is a defect.
            "skipped_runs": float(sum(found.skipped.values())),
            "listener_deadlocks": float(found.listener_deadlocks),
        },
        # A run still running at the deadline never completed.
        lost=found.missing + found.statuses["running"],
        duplicated=found.extra,
        extra={"errors": dict(produced.errors), "skipped": dict(found.skipped)},
    )


def _count(conn: psycopg.Connection, query: str) -> int:
    row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


def listener_footprint(server: Server, agents: int) -> Measurement:
    """RSS of one listener while it runs `agents` concurrent agent processes (`sleep`)."""
    with server.database(migrated=True) as url, psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "insert into ceaseless.agents (name, adapter, argv, max_concurrent) "
            "values ('sleeper', 'command', '{sleep,30}', %s)",
            (agents,),
        )
        proc = Listener(
            url, "--poll-interval", "60", "--concurrency", str(agents), worker_id="bench-rss"
        ).wait_ready()
        try:
            conn.execute(
                "insert into ceaseless.job (kind, agent, prompt) "
                "select 'task', 'sleeper', 'bench' from generate_series(1, %s)",
                (agents,),
            )
            wait_until(
                lambda: (
                    conn.execute(
                        "select count(*) from ceaseless.agent_run where finished_at is null"
                    ).fetchone()
                    == (agents,)
                ),
                timeout=60,
                interval=0.1,
            )
            time.sleep(1)
            rss = proc.rss_mb()
            conn.execute("select ceaseless.cancel_job(id) from ceaseless.job")
        finally:
            proc.stop()
        return Measurement({"rss_mb": rss})


def loop_chain(server: Server, iterations: int) -> Measurement:
    """An on_completion loop of a one-node noop graph, iters {n}: run_loop → the loop stopped.

    Each iteration starts in the transaction that ends the one before it, so
    this measures the chain's own cost per iteration: a node job claimed,
    run and finished, the run settled, the policy applied and the next
    iteration inserted and started. The loop is unpaced (min_interval_secs 0):
    paced, it would measure its interval.
    """
    with server.database(migrated=True) as url, psycopg.connect(url, autocommit=True) as conn:
        noop_lane(conn)
        loop = conn.execute(
            "insert into ceaseless.loops (title, description, graph, task_template, triggers, "
            "repeat_policy, min_interval_secs) "
            "values ('bench', '', %s, 'iterate', '{\"on_completion\": true}', %s, 0) "
            "returning id",
            (
                json.dumps({"nodes": [{"id": "a", "agent": "noop", "prompt": "go"}], "edges": []}),
                json.dumps({"kind": "iters", "spec": {"n": iterations}}),
            ),
        ).fetchone()
        assert loop is not None
        proc = Listener(url, "--poll-interval", "60", worker_id="bench-loop").wait_ready()
        try:
            started = time.monotonic()
            conn.execute("select ceaseless.run_loop(%s)", (loop[0],))
            seconds = (
                wait_until(
                    lambda: (
                        conn.execute(
                            "select stopped_reason is not null from ceaseless.loops where id = %s",
                            (loop[0],),
                        ).fetchone()
                        == (True,)
                    ),
                    timeout=600,
                    interval=0.01,
                )
                - started
            )
        finally:
            proc.stop()
        row = conn.execute(
            "select count(*) filter (where status = 'succeeded'), "
            "count(*) - count(distinct iteration) "
            "from ceaseless.topology_runs where loop_id = %s and iteration is not null",
            (loop[0],),
        ).fetchone()
        assert row is not None
        return Measurement(
            {
                "iterations_per_s": iterations / seconds,
                "ms_per_iteration": 1000 * seconds / iterations,
            },
            lost=iterations - int(row[0]),
            duplicated=int(row[1]),
        )
