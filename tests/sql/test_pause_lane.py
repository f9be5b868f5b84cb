"""pause_lane and resume_lane: an operator pauses a lane with a reason and an end, and lifts
the pause, whoever set it; claims skip the lane meanwhile, and each is audited with who did it.

Operators could read lane_pauses but not write it, so only the database owner could lift a
rate limit's pause by hand, and no pause by hand was audited. Operators and users are real
login roles.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from tests.factories import claim, make_agent, make_job, pause_lane

Connect = Callable[..., psycopg.Connection]


def _who(c: psycopg.Connection) -> str:
    row = c.execute("select current_user").fetchone()
    assert row is not None
    return str(row[0])


def test_an_operator_pauses_a_lane_claims_skip_it_and_resuming_lets_them_claim(
    conn: psycopg.Connection, login_role: Connect
) -> None:
    make_agent(conn)
    job = make_job(conn)
    ops = login_role("ops", "ceaseless_operator")
    until = datetime.now(UTC) + timedelta(hours=1)
    ops.execute("select ceaseless.pause_lane('noop', %s, '  provider outage  ')", (until,))
    assert conn.execute(
        "select paused_until, pause_reason from ceaseless.governor_usage where agent = 'noop'"
    ).fetchone() == (until, "provider outage")
    assert claim(conn) == []
    ops.execute("select ceaseless.resume_lane('noop')")
    assert claim(conn) == [job]
    rows = conn.execute(
        "select actor, action, old_state, new_state, detail ->> 'reason' from ceaseless.audit_log "
        "where entity = 'lane' and entity_key = 'noop' order by id"
    ).fetchall()
    assert rows == [
        (_who(ops), "pause", "open", "paused", "provider outage"),
        (_who(ops), "resume", "paused", "open", "provider outage"),
    ]


def test_an_operators_pause_replaces_a_rate_limits_and_resume_lifts_either(
    conn: psycopg.Connection, login_role: Connect
) -> None:
    make_agent(conn)
    ops = login_role("ops", "ceaseless_operator")
    pause_lane(conn, "noop", datetime.now(UTC) + timedelta(hours=5))
    sooner = datetime.now(UTC) + timedelta(minutes=10)
    ops.execute("select ceaseless.pause_lane('noop', %s, 'maintenance')", (sooner,))
    assert conn.execute(
        "select paused_until, reason from ceaseless.lane_pauses where agent = 'noop'"
    ).fetchone() == (sooner, "maintenance")
    detail = conn.execute(
        "select old_state, detail ->> 'replaced_reason' from ceaseless.audit_log "
        "where entity = 'lane' and action = 'pause'"
    ).fetchone()
    assert detail == ("paused", "rate limit")
    ops.execute("select ceaseless.resume_lane('noop')")
    assert conn.execute("select count(*) from ceaseless.lane_pauses").fetchone() == (0,)


@pytest.mark.parametrize(
    ("call", "sqlstate", "words"),
    [
        ("pause_lane('nobody', now() + interval '1 hour', 'x')", "CE404", "no lane"),
        ("pause_lane('noop', now() - interval '1 minute', 'x')", "CE422", "must be after now"),
        ("pause_lane('noop', null, 'x')", "CE422", "lane_pauses.paused_until"),
        ("pause_lane('noop', now() + interval '1 hour', ' ')", "CE422", "lane_pauses.reason"),
        ("resume_lane('nobody')", "CE404", "no lane"),
        ("resume_lane('noop')", "CE409", "is not paused"),
    ],
)
def test_a_pause_or_resume_that_cannot_be_is_refused_naming_why(
    conn: psycopg.Connection, login_role: Connect, call: str, sqlstate: str, words: str
) -> None:
    make_agent(conn)
    ops = login_role("ops", "ceaseless_operator")
    with pytest.raises(psycopg.Error) as error:
        ops.execute(f"select ceaseless.{call}")
    assert error.value.sqlstate == sqlstate
    assert words in str(error.value)
    assert conn.execute("select count(*) from ceaseless.lane_pauses").fetchone() == (0,)
    assert conn.execute(
        "select count(*) from ceaseless.audit_log where entity = 'lane'"
    ).fetchone() == (0,)


def test_a_passed_pause_is_no_pause_to_resume(
    conn: psycopg.Connection, login_role: Connect
) -> None:
    make_agent(conn)
    pause_lane(conn, "noop", datetime.now(UTC) - timedelta(minutes=1))
    with pytest.raises(psycopg.Error) as error:
        login_role("ops", "ceaseless_operator").execute("select ceaseless.resume_lane('noop')")
    assert error.value.sqlstate == "CE409"


def test_a_user_may_neither_pause_nor_resume_a_lane_every_owner_shares(
    conn: psycopg.Connection, login_role: Connect
) -> None:
    make_agent(conn)
    pause_lane(conn, "noop", datetime.now(UTC) + timedelta(hours=1))
    alice = login_role("alice")
    for call in (
        "pause_lane('noop', now() + interval '2 hours', 'mine')",
        "resume_lane('noop')",
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            alice.execute(f"select ceaseless.{call}")
    assert conn.execute("select reason from ceaseless.lane_pauses").fetchone() == ("rate limit",)


def test_a_listeners_worker_id_is_audited_beside_its_role(
    conn: psycopg.Connection, login_role: Connect
) -> None:
    make_agent(conn)
    listener = login_role("listener", "ceaseless_listener")
    with listener.transaction():
        listener.execute("select set_config('ceaseless.actor', 'listener-1 dashboard:dana', true)")
        listener.execute("select ceaseless.pause_lane('noop', now() + interval '1 hour', 'x')")
    assert conn.execute(
        "select actor, worker from ceaseless.audit_log where entity = 'lane'"
    ).fetchone() == (_who(listener), "listener-1 dashboard:dana")
