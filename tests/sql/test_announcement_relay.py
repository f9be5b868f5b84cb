"""Relayed announcements: a session with ceaseless.notify = 'relay' commits without
notifying, and relay_announcements sends the same payloads later, in the order written,
one relay at a time, losing none when a relay dies."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests.factories import make_agent

INSERT_JOB = "insert into ceaseless.job (kind, agent, prompt) values ('task', 'noop', %s)"


def _listening(db_url: str) -> psycopg.Connection:
    listener = psycopg.connect(db_url, autocommit=True)
    listener.execute("listen ceaseless_job")
    return listener


def _heard(listener: psycopg.Connection, timeout: float = 0.5) -> list[dict[str, Any]]:
    return [json.loads(n.payload) for n in listener.notifies(timeout=timeout)]


def _relaying(db_url: str) -> psycopg.Connection:
    writer = psycopg.connect(db_url, autocommit=True)
    writer.execute("set ceaseless.notify = 'relay'")
    return writer


def _relay(conn: psycopg.Connection, limit: int = 1000) -> int:
    row = conn.execute("select ceaseless.relay_announcements(%s)", (limit,)).fetchone()
    assert row is not None
    return int(row[0])


def _waiting(conn: psycopg.Connection) -> int:
    row = conn.execute("select waiting from ceaseless.relay_status").fetchone()
    assert row is not None
    return int(row[0])


def _job_ids(conn: psycopg.Connection, prompts: list[str]) -> list[str]:
    rows = conn.execute(
        "select id::text from ceaseless.job where prompt = any (%s) "
        "order by array_position(%s, prompt)",
        (prompts, prompts),
    ).fetchall()
    return [r[0] for r in rows]


def test_a_relaying_session_commits_silently_and_the_relay_sends_the_same_payloads(
    conn: psycopg.Connection, db_url: str
) -> None:
    make_agent(conn)
    with _listening(db_url) as listener, _relaying(db_url) as writer:
        conn.execute(INSERT_JOB, ("direct",))
        [direct] = _heard(listener)
        for prompt in ("a", "b", "c"):
            writer.execute(INSERT_JOB, (prompt,))
        assert _heard(listener) == []
        assert _waiting(conn) == 3

        assert _relay(conn) == 3

        heard = _heard(listener)
        assert [p["id"] for p in heard] == _job_ids(conn, ["a", "b", "c"])
        for payload in heard:
            assert payload.keys() == direct.keys()
            assert {k: v for k, v in payload.items() if k != "id"} == {
                k: v for k, v in direct.items() if k != "id"
            }
        assert _waiting(conn) == 0
        assert _relay(conn) == 0


def test_the_relay_keeps_the_order_written_across_sessions_and_batches(
    conn: psycopg.Connection, db_url: str
) -> None:
    make_agent(conn)
    prompts = [f"job {i}" for i in range(300)]
    with (
        _listening(db_url) as listener,
        _relaying(db_url) as first,
        _relaying(db_url) as second,
    ):
        for i, prompt in enumerate(prompts):
            (first if i % 2 else second).execute(INSERT_JOB, (prompt,))
        assert _relay(conn, 120) == 120
        assert _waiting(conn) == 180
        assert _relay(conn) == 180
        heard = [n for n in listener.notifies(timeout=1, stop_after=300)]
    assert [json.loads(n.payload)["id"] for n in heard] == _job_ids(conn, prompts)


def test_one_relay_at_a_time_and_a_relay_that_dies_loses_nothing(
    conn: psycopg.Connection, db_url: str
) -> None:
    make_agent(conn)
    with _listening(db_url) as listener, _relaying(db_url) as writer:
        for prompt in ("a", "b"):
            writer.execute(INSERT_JOB, (prompt,))
        dying = psycopg.connect(db_url)
        assert _relay(dying) == 2  # its transaction holds the relay and the rows
        # Another relay does not wait for it, and has nothing to send meanwhile.
        assert _relay(conn) == 0
        conn.execute("select pg_terminate_backend(%s, 5000)", (dying.info.backend_pid,))
        dying.close()
        assert _heard(listener) == []
        assert _waiting(conn) == 2
        assert _relay(conn) == 2
        assert [p["id"] for p in _heard(listener)] == _job_ids(conn, ["a", "b"])


def test_a_setting_that_is_neither_direct_nor_relay_is_refused_and_nothing_is_written(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    conn.execute("set ceaseless.notify = 'sometimes'")
    with pytest.raises(psycopg.Error) as refused:
        conn.execute(INSERT_JOB, ("x",))
    assert refused.value.sqlstate == "CE422"
    assert str(refused.value).startswith(
        'ceaseless.notify: must be direct or relay; got "sometimes"'
    )
    conn.execute("reset ceaseless.notify")
    assert conn.execute("select count(*) from ceaseless.job").fetchone() == (0,)
    assert _waiting(conn) == 0


def test_the_relay_batch_is_bounded(conn: psycopg.Connection) -> None:
    for limit in (0, 10_001, None):
        with pytest.raises(psycopg.Error, match="p_limit: must be 1 to 10,000") as refused:
            conn.execute("select ceaseless.relay_announcements(%s)", (limit,))
        assert refused.value.sqlstate == "CE422"


@pytest.mark.parametrize(
    ("channel", "payload", "constraint"),
    [
        ("", "{}", "announcement_channel_sendable"),
        ("c" * 64, "{}", "announcement_channel_sendable"),
        ("ops", "x" * 8000, "announcement_payload_sendable"),
    ],
)
def test_an_announcement_pg_notify_could_not_send_is_refused_when_written(
    conn: psycopg.Connection, channel: str, payload: str, constraint: str
) -> None:
    # Written, it would stop the relay at it, and every announcement behind it.
    with pytest.raises(psycopg.errors.CheckViolation) as refused:
        conn.execute("select ceaseless._relay_announcement(%s, %s)", (channel, payload))
    assert refused.value.diag.constraint_name == constraint
    with pytest.raises(psycopg.errors.InvalidParameterValue):
        conn.execute("select pg_notify(%s, %s)", (channel, payload))
    assert _waiting(conn) == 0


def test_a_user_s_announcements_are_relayed_but_the_relay_is_not_theirs(
    conn: psycopg.Connection, db_url: str, login_role: Callable[..., psycopg.Connection]
) -> None:
    make_agent(conn)
    alice = login_role("alice")
    alice.execute("set ceaseless.notify = 'relay'")
    with _listening(db_url) as listener:
        alice.execute(INSERT_JOB, ("alice's",))
        assert _heard(listener) == []
        assert _waiting(conn) == 1
        for statement in (
            "select * from ceaseless.announcements",
            "select * from ceaseless.relay_status",
            "select ceaseless.relay_announcements()",
            "select ceaseless._relay_announcement('ceaseless_job', '{}')",
            "insert into ceaseless.announcements (channel, payload) values ('x', '{}')",
            "delete from ceaseless.announcements",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                alice.execute(statement)
        assert _waiting(conn) == 1

        # Operators watch the backlog; relaying it is the listeners' part.
        operator = login_role("olivia", "ceaseless_operator")
        assert operator.execute("select waiting from ceaseless.relay_status").fetchone() == (1,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            _relay(operator)
        assert _relay(login_role("lee", "ceaseless_listener")) == 1
        [payload] = _heard(listener)
    assert payload["id"] == _job_ids(conn, ["alice's"])[0]
