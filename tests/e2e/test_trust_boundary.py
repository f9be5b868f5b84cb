"""The SQL trust boundary through a real listener (a member of ceaseless_listener, not a
superuser) and real login roles.

- alice's fake running job, with a claim that never expires, once held a lane of one slot
  for good: it is refused, and the listener goes on claiming bob's work in that lane;
- a running count lost from the shards (as `set ceaseless.run_shard` once lost one) is put
  right by the listener's maintenance, so the global cap lets routines run again;
- the listener's audit rows name its login role, with its worker id beside it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from tests.e2e.support import ListenerProcess, wait_until
from tests.factories import make_agent, pause_lane

Connect = Callable[..., psycopg.Connection]


@pytest.fixture
def listener_url(conn: psycopg.Connection, db_url: str) -> Iterator[tuple[str, str]]:
    role = f"listener_{uuid.uuid4().hex[:8]}"
    conn.execute(f"create role {role} login password 'pw' in role ceaseless_listener")
    conn.commit()
    yield make_conninfo(db_url, user=role, password="pw"), role
    conn.rollback()
    conn.execute(f"drop owned by {role}")
    conn.execute(f"drop role {role}")
    conn.commit()


def _state(conn: psycopg.Connection, job: object) -> str | None:
    row = conn.execute("select state from ceaseless.job where id = %s", (job,)).fetchone()
    return None if row is None else row[0]


def test_a_users_fake_running_job_cannot_hold_a_lane_shut(
    conn: psycopg.Connection,
    login_role: Connect,
    listener_url: tuple[str, str],
    start_listener: Callable[..., ListenerProcess],
) -> None:
    make_agent(conn, "echo", "command", ["cat"], max_concurrent=1)
    conn.commit()
    alice, bob = login_role("alice"), login_role("bob")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.execute(
            "insert into ceaseless.job (kind, agent, prompt, state, claimed_by, claim_expires_at) "
            "values ('task', 'echo', 'x', 'running', 'x', now() + interval '100 years')"
        )
    bobs = bob.execute(
        "insert into ceaseless.job (kind, agent, prompt) values ('task', 'echo', 'hi') returning id"
    ).fetchone()[0]  # type: ignore[index]
    alices = alice.execute(
        "insert into ceaseless.job (kind, agent, prompt) values ('task', 'echo', 'mine') "
        "returning id"
    ).fetchone()[0]  # type: ignore[index]

    url, role = listener_url
    start_listener("--poll-interval", "1", url=url, worker_id="lane-keeper")

    wait_until(
        lambda: (_state(conn, bobs), _state(conn, alices)) == ("delivered", "delivered"),
        20,
        "the lane never ran bob's and alice's jobs",
    )
    conn.commit()
    actors = conn.execute(
        "select distinct actor, worker from ceaseless.audit_log "
        "where entity = 'job' and entity_id = %s and action = 'state'",
        (bobs,),
    ).fetchall()
    assert actors == [(role, "lane-keeper")]


@pytest.mark.slow
def test_the_listener_recounts_a_lost_running_count(
    conn: psycopg.Connection,
    login_role: Connect,
    listener_url: tuple[str, str],
    start_listener: Callable[..., ListenerProcess],
) -> None:
    make_agent(conn)
    # The lane is paused, so the routine's runs stay running while the count is watched.
    pause_lane(conn, "noop", datetime.now(UTC) + timedelta(days=1))
    conn.execute("update ceaseless.settings set value = '3' where key = 'routine_max_running'")
    conn.commit()
    alice = login_role("alice")
    routine = alice.execute(
        "insert into ceaseless.routines (name, trigger_type, action_type, action_config, agent, "
        "cooldown_secs, max_concurrent) values ('r', 'manual', 'lightweight', "
        "'{\"prompt\": \"p\"}', 'noop', 0, 10) returning id"
    ).fetchone()[0]  # type: ignore[index]

    def fire() -> tuple[str, str | None]:
        run = alice.execute("select ceaseless.run_routine(%s)", (routine,)).fetchone()[0]  # type: ignore[index]
        row = alice.execute(
            "select status, skip_reason from ceaseless.routine_runs where id = %s", (run,)
        ).fetchone()
        assert row is not None
        return row

    def counted() -> tuple[int, int]:
        conn.commit()
        row = conn.execute(
            "select (select sum(running) from ceaseless.routine_run_shards), "
            "(select count(*) from ceaseless.routine_runs where status = 'running')"
        ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    assert fire() == ("running", None)
    # Two runs that ended without leaving the count, as a lost decrement leaves it: the cap
    # of three looks full, and every fire is refused.
    conn.execute("update ceaseless.routine_run_shards set running = running + 2 where shard = 9")
    conn.commit()
    assert fire() == ("skipped", "global_cap")

    url, _ = listener_url
    listener = start_listener("--poll-interval", "1", url=url)
    listener.wait_for_event("routine_runs.recounted", timeout=20)

    assert counted() == (1, 1)
    assert fire() == ("running", None)
    assert listener.events("routine_runs.recounted")[0]["correction"] == -2
