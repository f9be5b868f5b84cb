"""`ceaseless migrate` on a running system: a busy listener never waits on it.

`ceaseless up` migrates on every start, often beside listeners that are
draining a queue. On an unchanged schema, migrate must read its bookkeeping
and leave: any DDL it ran (a trigger, a view) would lock a hot table and make
every claim and finish queue behind it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import psycopg
import pytest

from listener.database.migrate import migrate, sql_root
from tests.e2e.support import ROOT, ListenerProcess, wait_until
from tests.factories import make_agent

JOBS = 20_000
# A claim or finish of the listener takes a few milliseconds; 100 ms of lock
# waiting is a stall, whatever the machine.
LONGEST_LOCK_WAIT_SECS = 0.1

# Listener backends waiting for a heavyweight lock, and since when.
_LOCK_WAITS = """
select a.pid, greatest(a.query_start, a.state_change) as since,
       extract(epoch from clock_timestamp() - greatest(a.query_start, a.state_change)),
       a.application_name, a.wait_event, left(a.query, 120)
from pg_stat_activity a
where a.datname = current_database()
  and a.application_name like 'ceaseless%'
  and a.application_name <> 'ceaseless migrate'
  and a.wait_event_type = 'Lock'
"""

# The locks migrate holds on the tables and views of schema ceaseless.
_MIGRATE_LOCKS = """
select c.relname, l.mode
from pg_locks l
join pg_stat_activity a on a.pid = l.pid
join pg_class c on c.oid = l.relation
where a.datname = current_database()
  and a.application_name = 'ceaseless migrate'
  and l.granted
  and c.relnamespace = 'ceaseless'::regnamespace
"""


class Sampler(threading.Thread):
    """Samples lock waits and migrate's locks every ~10 ms until stopped."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.halt = threading.Event()
        # (pid, since) -> (longest wait seen, application_name, wait_event, query)
        self.waits: dict[tuple[int, datetime], tuple[float, str, str, str]] = {}
        self.migrate_locks: set[tuple[str, str]] = set()
        self.samples = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                while not self.halt.is_set():
                    for pid, since, waited, name, event, query in conn.execute(_LOCK_WAITS):
                        longest = self.waits.get((pid, since), (0.0, "", "", ""))[0]
                        self.waits[(pid, since)] = (max(longest, float(waited)), name, event, query)
                    self.migrate_locks.update(conn.execute(_MIGRATE_LOCKS).fetchall())
                    self.samples += 1
                    time.sleep(0.01)
        except BaseException as exc:
            self.error = exc

    def stop(self) -> None:
        self.halt.set()
        self.join(10)
        if self.error is not None:
            raise self.error


def _unfinished(conn: psycopg.Connection) -> int:
    row = conn.execute("select count(*) from ceaseless.job where finished_at is null").fetchone()
    assert row is not None
    return row[0]


@pytest.mark.slow
def test_migrate_on_an_unchanged_schema_never_holds_up_a_listener_draining_jobs(
    conn: psycopg.Connection,
    db_url: str,
    start_listener: Callable[..., ListenerProcess],
) -> None:
    make_agent(conn, max_concurrent=1000)
    listener = start_listener("--poll-interval", "60", "--concurrency", "100")
    conn.execute(
        "insert into ceaseless.job (kind, agent, prompt) "
        "select 'task', 'noop', 'n' || g from generate_series(1, %s) g",
        (JOBS,),
    )
    # Migrate in the thick of it: the listener is claiming and finishing.
    wait_until(lambda: _unfinished(conn) <= JOBS - 1000, 60, "the listener never started")

    sampler = Sampler(db_url)
    sampler.start()
    try:
        migrate = subprocess.run(
            [sys.executable, "-m", "listener", "migrate"],
            env={**os.environ, "DATABASE_URL": db_url, "PYTHONPATH": str(ROOT)},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        left = _unfinished(conn)
    finally:
        sampler.stop()

    assert migrate.returncode == 0, migrate.stdout + migrate.stderr
    assert left > 0, "the queue drained before migrate finished: nothing was tested"
    stalls = {key: wait for key, wait in sampler.waits.items() if wait[0] > LONGEST_LOCK_WAIT_SECS}
    assert stalls == {}, f"listener backends waited on a lock during migrate ({sampler.samples})"
    exclusive = {lock for lock in sampler.migrate_locks if lock[1] == "AccessExclusiveLock"}
    assert exclusive == set(), "migrate locked ceaseless relations against every reader"
    stronger = {lock for lock in sampler.migrate_locks if lock[1] != "AccessShareLock"}
    assert stronger == set(), "migrate locked ceaseless relations beyond ACCESS SHARE"

    wait_until(lambda: _unfinished(conn) == 0, 120, f"not all {JOBS} jobs finished")
    delivered = conn.execute(
        "select count(*) from ceaseless.job where state = 'delivered'"
    ).fetchone()
    assert delivered == (JOBS,)
    assert listener.proc.poll() is None


@pytest.mark.slow
def test_an_index_built_by_migrate_during_a_drain_holds_up_no_listener(
    conn: psycopg.Connection,
    db_url: str,
    start_listener: Callable[..., ListenerProcess],
    tmp_path: Path,
) -> None:
    """A migration that adds an index to the job table, applied while a listener drains it:
    built CONCURRENTLY, so no claim or finish waits on it, and no lock on job beyond SHARE
    UPDATE EXCLUSIVE (which no reader or writer conflicts with)."""
    for area in ("db", "functions"):
        shutil.copytree(sql_root() / area, tmp_path / area)
    (tmp_path / "db" / "9999_later_index.sql").write_text(
        "create index concurrently if not exists job_later_idx on job (updated_at, agent);\n"
    )
    make_agent(conn, max_concurrent=1000)
    # History for the build to read: the index is built over many rows.
    conn.execute(
        "insert into ceaseless.job (kind, state, agent, prompt, finished_at, attempts) "
        "select 'task', 'delivered', 'noop', 'old', now(), 1 from generate_series(1, 200000)"
    )
    listener = start_listener("--poll-interval", "60", "--concurrency", "100")
    conn.execute(
        "insert into ceaseless.job (kind, agent, prompt) "
        "select 'task', 'noop', 'n' || g from generate_series(1, %s) g",
        (JOBS,),
    )
    wait_until(lambda: _unfinished(conn) <= JOBS - 1000, 60, "the listener never started")

    sampler = Sampler(db_url)
    sampler.start()
    try:
        report = migrate(db_url, root=tmp_path)
        left = _unfinished(conn)
    finally:
        sampler.stop()

    assert [m.name for m in report.applied] == ["later_index"] and report.functions_skipped
    assert left > 0, "the queue drained before migrate finished: nothing was tested"
    stalls = {key: wait for key, wait in sampler.waits.items() if wait[0] > LONGEST_LOCK_WAIT_SECS}
    assert stalls == {}, f"listener backends waited on a lock during migrate ({sampler.samples})"
    blocking = {
        lock
        for lock in sampler.migrate_locks
        if lock[1] not in ("AccessShareLock", "ShareUpdateExclusiveLock", "RowExclusiveLock")
    }
    assert blocking == set(), "migrate locked ceaseless relations against writers"
    assert ("job", "ShareUpdateExclusiveLock") in sampler.migrate_locks, (
        "the sampler never saw the build: nothing was tested"
    )

    wait_until(lambda: _unfinished(conn) == 0, 120, f"not all {JOBS} jobs finished")
    assert listener.proc.poll() is None
