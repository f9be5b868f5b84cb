"""Where a job's cost goes on the throughput path: a profile per job, so a change to that path
says which line it moved (docs/performance.md, "Profile of the throughput path").

Two measurements of the job path, each on a fresh database of one server:

- a drain: `jobs` noop jobs inserted in one statement and delivered by real listeners (one
  unless told), with `track_functions = all` on the database. Per job: each function's own
  time (triggers included, nested calls excluded) and its calls, rows written to each table
  (inserts, updates and how many of those were HOT, deletes), WAL bytes, and the CPU time of
  the listener processes and of the database's backends; over the drain, how busy the
  machine was and what the active backends waited for (pg_stat_activity, sampled every 5 ms);
- a batch, called directly as a listener calls it: `batch` jobs claimed and started
  (claim_jobs), heartbeaten (extend_leases, every lease past half its life) and finished
  (finish_runs), each call read through auto_explain: its shared buffers per job, nested
  statements (triggers) included.

And the event fan-in of bin/bench, per event: each function's calls and time and the rows
written, so the matching (_event_candidates) and the admission (_admit_fires) of one fire
read apart from the rest.

Every other client of the database has ended, and its backend has left pg_stat_activity,
before the counters are reset and before they are read: a backend reports what it counted as
it ends, so nothing is counted on the wrong side of the reset or left unreported. WAL bytes
are the server's whole WAL over the drain: measure on a server with nothing else to do (the
default, a dedicated embedded one).

`python -m bench.profile` runs it alone.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import psycopg
import typer

from bench import ours
from bench.observe import DeliveredCounter, Listener
from bench.plans import explained, shared_buffers
from bench.server import DatabaseUrlOpt, Server, provision

_NS_PER_TICK = 1_000_000_000 // os.sysconf("SC_CLK_TCK")


@dataclass
class FunctionCost:
    name: str
    calls_per_job: float
    self_us_per_job: float
    total_us_per_job: float


@dataclass
class TableWrites:
    table: str
    inserted: float
    updated: float
    hot_updated: float
    deleted: float


@dataclass
class Profile:
    jobs: int
    listeners: int
    drain_secs: float
    machine_busy: float
    """The share of the machine's CPU time in use over the drain, all cores."""
    wal_bytes_per_job: float
    listener_cpu_us_per_job: float
    database_cpu_us_per_job: float
    functions: list[FunctionCost] = field(default_factory=list)
    writes: list[TableWrites] = field(default_factory=list)
    buffers_per_job: dict[str, float] = field(default_factory=dict)
    waits: dict[str, float] = field(default_factory=dict)
    """What the database's active backends were doing, by share of samples: a wait event
    (type: event), or CPU when none."""


def _cpu_ns(pid: int) -> int:
    """Nanoseconds of CPU (user and system) process `pid` has used, in clock ticks of
    /proc/PID/stat (10 ms each here: measure thousands of jobs), 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0
    return (int(fields[11]) + int(fields[12])) * _NS_PER_TICK


def _backends(conn: psycopg.Connection) -> list[int]:
    """The pids of the other backends connected to this database."""
    return [
        pid
        for (pid,) in conn.execute(
            "select pid from pg_stat_activity "
            "where datname = current_database() and pid <> pg_backend_pid()"
        )
    ]


def _wal_lsn(conn: psycopg.Connection) -> int:
    row = conn.execute("select pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    assert row is not None
    return int(row[0])


def _insert_jobs(conn: psycopg.Connection, jobs: int) -> None:
    conn.execute(
        "insert into ceaseless.job (kind, agent, prompt) "
        "select 'task', 'noop', 'job ' || g from generate_series(1, %s) g",
        (jobs,),
    )


def _reported(conn: psycopg.Connection, timeout: float = 30) -> None:
    """Until every other client of this database has ended, and so has reported its counts: a
    backend reports them as it ends, after its client has already closed the connection, and
    leaves pg_stat_activity only once it has."""
    deadline = time.monotonic() + timeout
    while conn.execute(
        "select exists (select from pg_stat_activity where datname = current_database() "
        "  and pid <> pg_backend_pid() and backend_type = 'client backend')"
    ).fetchone() != (False,):
        if time.monotonic() > deadline:
            raise TimeoutError("other clients of the profiled database did not end")
        time.sleep(0.01)


def _function_costs(conn: psycopg.Connection, per: int) -> list[FunctionCost]:
    """What each function counted since the reset, per `per` jobs or events, costliest first."""
    conn.execute("select pg_stat_clear_snapshot()")
    return [
        FunctionCost(name, calls / per, 1000 * self_ms / per, 1000 * total_ms / per)
        for name, calls, self_ms, total_ms in conn.execute(
            "select funcname, calls, self_time, total_time from pg_stat_user_functions "
            "where schemaname = 'ceaseless' order by self_time desc"
        )
    ]


def _table_writes(conn: psycopg.Connection, per: int) -> list[TableWrites]:
    """The rows written to each table since the reset, per `per` jobs or events."""
    conn.execute("select pg_stat_clear_snapshot()")
    return [
        TableWrites(name, ins / per, upd / per, hot / per, dels / per)
        for name, ins, upd, hot, dels in conn.execute(
            "select relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del "
            "from pg_stat_user_tables where schemaname = 'ceaseless' "
            "  and n_tup_ins + n_tup_upd + n_tup_del > 0 "
            "order by n_tup_ins + n_tup_upd + n_tup_del desc, relname"
        )
    ]


def _machine_cpu() -> tuple[int, int]:
    """All CPU time of the machine so far and its idle part, in ticks (/proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(values), values[3] + values[4]  # idle and iowait


class _WaitSampler:
    """Samples what this database's active backends wait for, from pg_stat_activity, on a
    connection of its own in a thread, until stopped."""

    def __init__(self, url: str, interval: float = 0.005) -> None:
        self.samples: Counter[str] = Counter()
        self._url = url
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _WaitSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        with psycopg.connect(self._url, autocommit=True) as conn:
            while not self._stop.is_set():
                for wait_type, wait in conn.execute(
                    "select wait_event_type, wait_event from pg_stat_activity "
                    "where datname = current_database() and state = 'active' "
                    "  and pid <> pg_backend_pid()"
                ):
                    self.samples["CPU" if wait is None else f"{wait_type}: {wait}"] += 1
                self._stop.wait(self._interval)

    def shares(self) -> dict[str, float]:
        total = sum(self.samples.values()) or 1
        return {name: count / total for name, count in self.samples.most_common()}


def drain(server: Server, jobs: int, listeners: int = 1, timeout: float = 300) -> Profile:
    """`listeners` listeners deliver `jobs` noop jobs; the per-job costs of the whole path."""
    with server.database(migrated=True) as url, psycopg.connect(url, autocommit=True) as conn:
        database = conn.info.dbname
        conn.execute(f"alter database \"{database}\" set track_functions = 'all'")
        ours.noop_lane(conn)
        procs = [
            Listener(url, "--poll-interval", "60", "--concurrency", "5000", worker_id=f"p{n}")
            for n in range(listeners)
        ]
        counter = DeliveredCounter(url)
        try:
            for proc in procs:
                proc.wait_ready()
            # Counted from here: enqueue, claim, start, finish and every trigger of them.
            conn.execute("select pg_stat_reset()")
            backends = {pid: _cpu_ns(pid) for pid in _backends(conn)}
            listener_before = sum(_cpu_ns(proc.proc.pid) for proc in procs)
            wal_before = _wal_lsn(conn)
            machine_before = _machine_cpu()
            with _WaitSampler(url) as waits:
                began = time.monotonic()
                # On a connection of its own, closed at once: a backend reports what it
                # counted when it ends, and this one's counts would otherwise wait for its
                # next report.
                with psycopg.connect(url, autocommit=True) as producer:
                    _insert_jobs(producer, jobs)
                ended = counter.wait_for(jobs, timeout)
            machine_after = _machine_cpu()
            listener_ns = sum(_cpu_ns(proc.proc.pid) for proc in procs) - listener_before
            backends.update({pid: backends.get(pid, 0) for pid in _backends(conn)})
            database_ns = sum(_cpu_ns(pid) - before for pid, before in backends.items())
            wal = _wal_lsn(conn) - wal_before
        finally:
            counter.close()
            for proc in procs:
                proc.stop()
        _reported(conn)
        functions = _function_costs(conn, jobs)
        writes = _table_writes(conn, jobs)
    total = machine_after[0] - machine_before[0]
    idle = machine_after[1] - machine_before[1]
    return Profile(
        jobs=jobs,
        listeners=listeners,
        drain_secs=ended - began,
        machine_busy=1 - idle / total if total else 0.0,
        waits=waits.shares(),
        wal_bytes_per_job=wal / jobs,
        listener_cpu_us_per_job=listener_ns / 1000 / jobs,
        database_cpu_us_per_job=database_ns / 1000 / jobs,
        functions=functions,
        writes=writes,
    )


def batch_buffers(server: Server, batch: int) -> dict[str, float]:
    """Shared buffers per job of each call of the listener's batch path, triggers included."""
    with server.database(migrated=True) as url, psycopg.connect(url, autocommit=True) as conn:
        ours.noop_lane(conn)
        _insert_jobs(conn, batch)
        found: dict[str, float] = {}
        with explained(conn) as plans:
            held = [
                job
                for (job, _) in conn.execute(
                    "select id, run_id from ceaseless.claim_jobs('profile', %s, p_start => true)",
                    (batch,),
                )
            ]
        found["claim_jobs (claim and start)"] = shared_buffers(plans[-1]["Plan"]) / batch
        with explained(conn) as plans:
            conn.execute(
                "select ceaseless.extend_leases('profile', %s, now() + interval '50 seconds', 60)",
                (held,),
            )
        found["extend_leases (heartbeat)"] = shared_buffers(plans[-1]["Plan"]) / batch
        runs = conn.execute(
            "select id from ceaseless.agent_run where worker = 'profile' and finished_at is null"
        ).fetchall()
        payload = json.dumps([{"run_id": str(run), "outcome": "succeeded"} for (run,) in runs])
        with explained(conn) as plans:
            conn.execute("select ceaseless.finish_runs('profile', %s::jsonb)", (payload,))
        found["finish_runs (finish)"] = shared_buffers(plans[-1]["Plan"]) / batch
        return found


@dataclass
class FanIn:
    routines: int
    events: int
    inserts_per_s: float
    functions: list[FunctionCost]
    writes: list[TableWrites]


def fan_in(server: Server, routines: int, events: int) -> FanIn:
    """`events` events inserted one per transaction, each firing one of `routines` event
    routines of its user (bin/bench's event fan-in): each function's cost per event, so the
    matching (_event_candidates) and the admission (_admit_fires) are read apart from the rest."""
    with server.database(migrated=True) as url, psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"alter database \"{conn.info.dbname}\" set track_functions = 'all'")
        # Set up on a connection of its own, ended before the reset: its counts would
        # otherwise be reported after it, as if the events had written them.
        with psycopg.connect(url, autocommit=True) as setup:
            ours.event_routines(setup, routines)
        _reported(conn)
        conn.execute("select pg_stat_reset()")
        # On a connection of its own, ended before the statistics are read (see drain).
        with psycopg.connect(url, autocommit=True) as producer:
            seconds = ours.insert_events(producer, ours.fanin_events(routines, events))
        _reported(conn)
        return FanIn(
            routines,
            events,
            events / seconds,
            _function_costs(conn, events),
            _table_writes(conn, events),
        )


def measure(server: Server, jobs: int, batch: int, listeners: int = 1) -> Profile:
    profile = drain(server, jobs, listeners)
    profile.buffers_per_job = batch_buffers(server, batch)
    return profile


def _tables(functions: list[FunctionCost], writes: list[TableWrites], unit: str) -> list[str]:
    return [
        f"| function (own time: nested calls excluded) | calls per {unit} | own µs per {unit} "
        f"| total µs per {unit} |",
        "|---|---:|---:|---:|",
        *(
            f"| `{f.name}` | {f.calls_per_job:.3f} | {f.self_us_per_job:.1f} "
            f"| {f.total_us_per_job:.1f} |"
            for f in functions
            if f.self_us_per_job >= 0.25
        ),
        "",
        f"| table | rows inserted per {unit} | updated | of those HOT | deleted |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| `{w.table}` | {w.inserted:.2f} | {w.updated:.2f} | {w.hot_updated:.2f} "
            f"| {w.deleted:.2f} |"
            for w in writes
            if w.inserted + w.updated + w.deleted >= 0.01
        ),
    ]


def markdown(profile: Profile, server_version: str) -> str:
    """The throughput profile as the tables of docs/performance.md."""
    lines = [
        f"PostgreSQL {server_version}; {profile.jobs:,} noop jobs, {profile.listeners} "
        f"listener{'s' if profile.listeners > 1 else ''}, drained in {profile.drain_secs:.2f} s "
        f"({profile.jobs / profile.drain_secs:,.0f} jobs/s), the machine "
        f"{profile.machine_busy:.0%} busy.",
        "",
        "| per job | |",
        "|---|---:|",
        f"| listener process CPU | {profile.listener_cpu_us_per_job:,.0f} µs |",
        f"| database backends CPU | {profile.database_cpu_us_per_job:,.0f} µs |",
        f"| WAL | {profile.wal_bytes_per_job:,.0f} bytes |",
        *(
            f"| shared buffers, {call} | {value:.1f} |"
            for call, value in profile.buffers_per_job.items()
        ),
        "",
        "| the database's active backends, by share of samples | |",
        "|---|---:|",
        *(f"| {name} | {share:.1%} |" for name, share in profile.waits.items() if share >= 0.005),
        "",
        *_tables(profile.functions, profile.writes, "job"),
    ]
    return "\n".join(lines)


def fan_in_markdown(found: FanIn) -> str:
    """The fan-in profile as docs/performance.md shows it."""
    return "\n".join(
        [
            f"{found.events:,} events, each firing one of {found.routines:,} event routines: "
            f"{found.inserts_per_s:,.0f} inserts/s.",
            "",
            *_tables(found.functions, found.writes, "event"),
        ]
    )


def main(
    database_url: DatabaseUrlOpt = None,
    jobs: Annotated[int, typer.Option(help="Noop jobs the listener drains.")] = 20_000,
    batch: Annotated[int, typer.Option(help="Jobs per direct call, for the buffers.")] = 1_000,
    routines: Annotated[int, typer.Option(help="Event routines of the fan-in.")] = 1_000,
    events: Annotated[int, typer.Option(help="Events of the fan-in.")] = 1_000,
    listeners: Annotated[int, typer.Option(help="Listeners of the drain.")] = 1,
) -> None:
    """Profile the throughput path per job and the event fan-in per event; print markdown."""
    with provision(database_url) as server:
        profile = measure(server, jobs, batch, listeners)
        typer.echo(markdown(profile, server.settings()["server_version"]))
        typer.echo("")
        typer.echo(fan_in_markdown(fan_in(server, routines, events)))


if __name__ == "__main__":
    typer.run(main)
