"""The listener behind PgBouncer in transaction mode (docs/pgbouncer.md).

Claims, heartbeats, finishes and routine fires go through the pooler, whose few server
connections every listener shares; LISTEN goes to the server itself (--listen-url). What
cannot work through the pooler is refused at startup, in one line naming what to set.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from bench.ours import drain
from listener.database.pool import Database
from listener.queries import fetch
from tests.conftest import database_name
from tests.e2e.pgbouncer import PgBouncer, binary
from tests.e2e.support import FAKES, ROOT, ListenerProcess, run_cli, wait_until
from tests.factories import make_agent, make_job, make_jobs, make_routine

POOL_SIZE = 2
JOBS = 40


@pytest.fixture
def pgbouncer(server_url: str) -> Iterator[PgBouncer]:
    if binary() is None:
        pytest.skip("pgbouncer is not installed (.ci/run unpacks Debian's package)")
    bouncer = PgBouncer(server_url, pool_size=POOL_SIZE)
    try:
        yield bouncer
    finally:
        bouncer.stop()


@pytest.fixture
def listener_role(conn: psycopg.Connection, db_url: str) -> Iterator[tuple[str, str]]:
    """A login role in ceaseless_listener, its server-side deadlines set on the role, as a
    deployment behind a pooler does (the listener cannot ask for them through one)."""
    role = f"listener_{uuid.uuid4().hex[:8]}"
    database = database_name(db_url)
    conn.execute(f"create role {role} login password 'pw' in role ceaseless_listener")
    conn.execute(f"alter role {role} in database \"{database}\" set statement_timeout = '15s'")
    conn.execute(
        f'alter role {role} in database "{database}" '
        "set idle_in_transaction_session_timeout = '15s'"
    )
    conn.commit()
    yield role, "pw"
    conn.rollback()
    conn.execute(f"drop owned by {role}")
    conn.execute(f"drop role {role}")
    conn.commit()


def _runs_per_job(conn: psycopg.Connection) -> dict[int, int]:
    """How many jobs ran how many times."""
    rows = conn.execute(
        "select runs, count(*) from (select j.id, count(r.id) as runs from ceaseless.job j "
        "left join ceaseless.agent_run r on r.job_id = j.id group by j.id) per_job "
        "group by runs"
    ).fetchall()
    return {int(runs): int(jobs) for runs, jobs in rows}


def test_two_listeners_behind_a_small_pgbouncer_pool_run_jobs_routines_and_long_runs_once(
    conn: psycopg.Connection,
    db_url: str,
    pgbouncer: PgBouncer,
    listener_role: tuple[str, str],
    start_listener: Callable[..., ListenerProcess],
) -> None:
    role, password = listener_role
    pgbouncer.add_user(role, password)
    pooled = pgbouncer.url(database_name(db_url), role)
    direct = make_conninfo(db_url, user=role, password=password)
    make_agent(conn, "echo", "command", ["cat"], max_concurrent=50)
    # Outlives its lease, renewed every 0.83 s (a lease of 5 s: under load on a shared
    # machine a shorter one can pass between renewals, and its job rightly runs again).
    make_agent(
        conn,
        "slow",
        "command",
        [str(FAKES / "fake_agent")],
        env={"FAKE_AGENT_MODE": "sleep", "FAKE_AGENT_SLEEP": "6"},
    )
    routine = make_routine(conn, "on-deploy", "event", {"pattern": "deploy"}, agent="echo")
    conn.commit()
    # A poll every minute: only NOTIFY, on the direct session, can wake them in time.
    listeners = [
        start_listener(
            "--poll-interval", "60", "--lease-secs", "5", "--concurrency", "8",
            "--listen-url", direct,
            url=pooled, worker_id=f"pooled-{n}",
        )
        for n in (1, 2)
    ]  # fmt: skip
    for listener in listeners:
        assert listener.events("db.pooled"), listener.lines[-10:]
        assert not listener.events("db.no_server_deadline")

    slow = make_job(conn, agent="slow")
    make_jobs(conn, JOBS, agent="echo")
    conn.execute("insert into ceaseless.events (user_id, content) values ('alice', 'deploy 42')")
    conn.commit()

    def lease() -> datetime | None:
        row = conn.execute(
            "select claim_expires_at from ceaseless.job where id = %s", (slow,)
        ).fetchone()
        return row[0] if row else None

    wait_until(lambda: lease() is not None, 10, "the slow job was never claimed")
    first_lease = lease()
    assert first_lease is not None
    # Many clients, at most POOL_SIZE server connections: transactions share them.
    clients = sum(
        int(pool["cl_active"]) + int(pool["cl_waiting"])  # type: ignore[call-overload]
        for pool in pgbouncer.show("pools")
        if pool["user"] == role
    )
    servers = [server for server in pgbouncer.show("servers") if server["user"] == role]
    assert clients > POOL_SIZE
    assert 0 < len(servers) <= POOL_SIZE

    # Renewed through the pooler while it runs, so nobody takes it over.
    wait_until(
        lambda: (lease() or first_lease) > first_lease, 10, "the slow job's lease was not renewed"
    )

    def delivered() -> bool:
        row = conn.execute(
            "select count(*) filter (where state <> 'delivered'), "
            "(select count(*) from ceaseless.routine_runs where routine_id = %s "
            "and status <> 'running') from ceaseless.job",
            (routine,),
        ).fetchone()
        return row == (0, 1)

    def stalled() -> str:
        outcomes = conn.execute(
            "select outcome, ended_by, count(*) from ceaseless.agent_run group by 1, 2"
        ).fetchall()
        warnings = [line for p in listeners for line in p.lines if line.get("level") == "warning"]
        return f"runs per job {_runs_per_job(conn)}, outcomes {outcomes}, warnings {warnings[-5:]}"

    wait_until(delivered, 60, stalled)
    assert _runs_per_job(conn) == {1: JOBS + 2}, stalled()
    outcome = conn.execute(
        "select outcome from ceaseless.agent_run where job_id = %s", (slow,)
    ).fetchone()
    assert outcome == ("succeeded",)
    workers = conn.execute("select count(distinct worker) from ceaseless.agent_run").fetchone()
    assert workers == (2,)


def test_the_listeners_pool_behind_pgbouncer_runs_a_repeated_statement_on_any_server_connection(
    db_url: str, pgbouncer: PgBouncer
) -> None:
    """psycopg prepares a statement run five times; through the pooler the next transaction
    may get another server connection, where that prepared statement does not exist."""

    async def pids(database: Database, times: int) -> list[int]:
        statement = "select pg_backend_pid() + %s * 0"
        return [
            await database.once("pid", lambda c, i=i: fetch.value(c, statement, (i,)))
            for i in range(times)
        ]

    async def scenario() -> tuple[list[int], int, list[int]]:
        database = Database(pgbouncer.url(database_name(db_url)), "ceaseless test", deadline=15)
        await database.open(pooled=True)
        try:
            # Enough for each of the pool's connections (it takes them in turn) to prepare it.
            before = await pids(database, 16)
            # PgBouncer lends the server connection used last first: this one.
            with psycopg.connect(pgbouncer.url(database_name(db_url))) as holder:
                held = holder.execute("select pg_backend_pid()").fetchone()
                assert held is not None
                after = await pids(database, 3)
            return before, held[0], after
        finally:
            await database.close()

    before, held, after = asyncio.run(scenario())
    assert before[-1] == held
    assert held not in after


def test_a_listener_behind_pgbouncer_refuses_to_start_without_a_direct_listen_url(
    db_url: str, pgbouncer: PgBouncer
) -> None:
    pooled = pgbouncer.url(database_name(db_url))
    for extra in ((), ("--listen-url", pooled)):
        listener = ListenerProcess(pooled, *extra, worker_id="refused")
        try:
            status = listener.proc.wait(30)
        finally:
            listener.stop()
        assert status == 1
        [failed] = listener.events("listener.start_failed")
        assert "connection pooler" in failed["error"]
        assert "--listen-url" in failed["error"]
        assert not listener.events("listener.ready")


def test_a_listener_whose_role_sets_no_deadlines_behind_pgbouncer_says_how_to_set_them(
    db_url: str, pgbouncer: PgBouncer, start_listener: Callable[..., ListenerProcess]
) -> None:
    listener = start_listener("--listen-url", db_url, url=pgbouncer.url(database_name(db_url)))
    [warning] = listener.events("db.no_server_deadline")
    assert "set statement_timeout = '15s'" in warning["problem"]
    assert "set idle_in_transaction_session_timeout = '15s'" in warning["problem"]


def test_migrate_refuses_pgbouncer_and_runs_on_the_server_itself(
    db_url: str, pgbouncer: PgBouncer
) -> None:
    refused = run_cli(pgbouncer.url(database_name(db_url)), "migrate")
    assert refused.returncode == 1
    assert "connection pooler" in refused.stderr
    assert "DATABASE_URL set to the server itself" in refused.stderr
    direct = run_cli(db_url, "migrate")
    assert direct.returncode == 0, direct.stderr
    assert "no migrations to apply" in direct.stdout


def test_up_behind_pgbouncer_migrates_through_the_listen_url_and_serves(
    db_url: str, pgbouncer: PgBouncer, tmp_path: Path
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "listener", "up", "--log-format", "json", "--listen-url", db_url],
        env={
            **os.environ,
            "DATABASE_URL": pgbouncer.url(database_name(db_url)),
            "PYTHONPATH": str(ROOT),
            "CEASELESS_HOME": str(tmp_path),
        },
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stderr is not None
    events: list[str] = []
    try:
        for line in proc.stderr:
            try:
                events.append(json.loads(line)["event"])
            except ValueError:
                events.append(line.strip())  # an error printed before logging began
            if events[-1] in ("listener.ready", "listener.stopped"):
                break
    finally:
        proc.terminate()
        proc.wait(30)
    assert "migrate.done" in events, events
    assert "db.pooled" in events
    assert events[-1] == "listener.ready"


@pytest.mark.slow
def test_noop_jobs_drain_through_pgbouncer_as_through_the_server(
    conn: psycopg.Connection, db_url: str, pgbouncer: PgBouncer
) -> None:
    """Figures for docs/performance.md: printed, never asserted; nothing lost or doubled."""
    jobs = 2000
    pooled = pgbouncer.url(database_name(db_url))
    through_pooler = drain(pooled, conn, jobs, listeners=1, timeout=60, listen_url=db_url)
    direct = drain(db_url, conn, jobs, listeners=1, timeout=60)
    assert _runs_per_job(conn) == {1: 2 * jobs}
    print(
        f"\n{jobs} noop jobs, one listener: {jobs / through_pooler:.0f} jobs/s through "
        f"pgbouncer (pool of {POOL_SIZE}), {jobs / direct:.0f} jobs/s direct"
    )
