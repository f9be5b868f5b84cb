"""A job whose payload the listener cannot decode fails alone; the listener runs on.

The database refuses JSON nested past 64 levels (tests/sql/test_bounded_json.py), but a
row stored before that rule, or written around it, must still cost only itself: once,
a payload nested 3,000 levels deep made the claimer raise RecursionError, the listener
exited, the job went back to pending, and every listener that claimed it died again.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import psycopg

from tests.e2e.support import FAKES, ListenerProcess, wait_until
from tests.factories import make_agent, make_job

DEEP = "[" * 3000 + "]" * 3000


def _store_around_the_rule(conn: psycopg.Connection, payload: str) -> None:
    """Insert a job as if it had been stored before the depth rule existed."""
    conn.execute(
        "do $$ begin if exists (select from pg_trigger where tgname = 'job_bounded_json') then "
        "alter table ceaseless.job disable trigger job_bounded_json; end if; end $$"
    )
    conn.execute(
        "insert into ceaseless.job (kind, agent, prompt, payload) "
        "values ('task', 'echo', 'the deep one', %s::jsonb)",
        ('{"deep": ' + payload + "}",),
    )
    conn.execute(
        "do $$ begin if exists (select from pg_trigger where tgname = 'job_bounded_json') then "
        "alter table ceaseless.job enable trigger job_bounded_json; end if; end $$"
    )


def test_an_undecodable_payload_fails_its_job_and_the_listener_runs_the_rest(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(conn, "echo", "command", [str(FAKES / "fake_agent")], max_attempts=1)
    _store_around_the_rule(conn, DEEP)
    wide = {f"k{i}": list(range(20)) for i in range(5_000)}
    ok = [make_job(conn, agent="echo", prompt=f"job {i}", payload=wide) for i in range(3)]
    listener = start_listener()

    def settled() -> bool:
        row = conn.execute(
            "select count(*) filter (where state in ('failed', 'delivered')), count(*) "
            "from ceaseless.job"
        ).fetchone()
        return row is not None and row[0] == row[1]

    wait_until(settled, 30, lambda: f"jobs never settled: {listener.lines[-10:]}")
    assert listener.proc.poll() is None, "the listener stopped"
    states = dict(
        conn.execute(
            "select prompt, state from ceaseless.job where prompt = 'the deep one' or id = any(%s)",
            (ok,),
        ).fetchall()
    )
    assert states.pop("the deep one") == "failed"
    assert set(states.values()) == {"delivered"}
    error = conn.execute(
        "select r.error from ceaseless.agent_run r join ceaseless.job j on j.id = r.job_id "
        "where j.prompt = 'the deep one'"
    ).fetchone()
    assert error is not None
    assert "nested too deeply to decode" in error[0]
    assert "the agent was not started" in error[0]
    # A job enqueued afterwards still runs: nothing is wedged.
    later = make_job(conn, agent="echo", prompt="later", payload={"n": json.dumps(1)})
    wait_until(
        lambda: (
            conn.execute("select state from ceaseless.job where id = %s", (later,)).fetchone()
            == ("delivered",)
        ),
        15,
        "a later job never ran",
    )
    assert listener.events("job.undecodable_payload")


FORGED = [
    "[" * 3900 + "]" * 3900,
    "not json",
    "[]",
    "null",
    '{"id": "not-a-uuid"}',
    '{"id": 12}',
    '{"count": "many"}',
    '{"count": true}',
    '{"state": [1], "kind": {}}',
    '{"table": "approvals", "id": "00000000-0000-0000-0000-000000000001", "run_id": 5}',
]
CHANNELS = [
    "ceaseless_job",
    "ceaseless_run",
    "ceaseless_schedule",
    "ceaseless_config",
    "ceaseless_notification",
]


def test_forged_notifications_from_a_user_role_cost_the_listener_nothing(
    conn: psycopg.Connection,
    start_listener: Callable[..., ListenerProcess],
    login_role: Callable[..., psycopg.Connection],
) -> None:
    make_agent(conn, "echo", "command", [str(FAKES / "fake_agent")])
    listener = start_listener()
    alice = login_role("alice")
    for channel in CHANNELS:
        for payload in FORGED:
            alice.execute("select pg_notify(%s, %s)", (channel, payload))
    job = make_job(conn, agent="echo", prompt="after the forgeries")
    wait_until(
        lambda: (
            conn.execute("select state from ceaseless.job where id = %s", (job,)).fetchone()
            == ("delivered",)
        ),
        15,
        lambda: f"the job never ran: {listener.lines[-10:]}",
    )
    assert listener.proc.poll() is None
    assert not listener.events("listener.part_crashed")
