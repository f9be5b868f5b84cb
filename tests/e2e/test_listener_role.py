"""A listener that runs as a member of ceaseless_listener, not as a superuser.

What a deployment should do (docs/security.md): the listener's privileges are
enough to claim, run, finish, fire routines and append to the audit log; the
audit actor is its login role, with its worker id recorded beside it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from listener.daemon.supervisor import EXIT_PART_CRASHED
from tests.e2e.support import ListenerProcess, wait_until
from tests.factories import make_agent, make_job, make_routine


@pytest.fixture
def listener_url(conn: psycopg.Connection, db_url: str) -> Iterator[str]:
    role = f"listener_{uuid.uuid4().hex[:8]}"
    conn.execute(f"create role {role} login password 'pw' in role ceaseless_listener")
    conn.commit()
    yield make_conninfo(db_url, user=role, password="pw")
    conn.rollback()
    conn.execute(f"drop owned by {role}")
    conn.execute(f"drop role {role}")
    conn.commit()


def test_a_listener_without_superuser_runs_jobs_and_routines(
    conn: psycopg.Connection,
    listener_url: str,
    start_listener: Callable[..., ListenerProcess],
) -> None:
    make_agent(conn, "echo", "command", ["cat"], max_concurrent=5)
    job = make_job(conn, agent="echo")
    routine = make_routine(conn, "on-deploy", "event", {"pattern": "deploy"}, agent="echo")
    conn.commit()
    start_listener("--poll-interval", "1", url=listener_url, worker_id="unprivileged-1")
    conn.execute("insert into ceaseless.events (user_id, content) values ('alice', 'deploy 42')")
    conn.commit()

    def finished() -> bool:
        row = conn.execute(
            "select (select state from ceaseless.job where id = %s), "
            "(select status from ceaseless.routine_runs where routine_id = %s)",
            (job, routine),
        ).fetchone()
        return row == ("delivered", "attention")

    wait_until(finished, 20, "the job and the routine run did not finish")
    actors = conn.execute(
        "select distinct actor, worker from ceaseless.audit_log "
        "where entity = 'job' and entity_id = %s",
        (job,),
    ).fetchall()
    assert (conninfo_to_dict(listener_url)["user"], "unprivileged-1") in actors


def test_a_listener_whose_part_crashes_stops_and_says_which(
    conn: psycopg.Connection, listener_url: str
) -> None:
    # Its retention pass is refused: no EXECUTE on prune for listeners.
    conn.execute(
        "revoke execute on function ceaseless.prune(timestamptz, integer, text, boolean) "
        "from ceaseless_listener"
    )
    conn.commit()
    listener = ListenerProcess(listener_url, "--poll-interval", "1")
    try:
        wait_until(
            lambda: listener.proc.poll() is not None,
            45,
            lambda: f"the listener is still running after its part crashed: {listener.lines[-10:]}",
        )
    finally:
        if listener.proc.poll() is None:
            listener.proc.kill()
    assert listener.proc.returncode == EXIT_PART_CRASHED
    (crash,) = listener.events("listener.part_crashed")
    assert crash["part"] == "retention"
    assert "prune" in crash["error"]
