"""Overlap policies and debounce end to end, for routines and loops: webhooks over real
HTTP, a real listener releasing held fires (fire_held) when a run ends or a window
closes, agents stopped by cancel_other, and held fires surviving kill -9."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg

from tests.e2e.support import FAKES, ListenerProcess, pid_alive, wait_until
from tests.factories import make_agent, make_routine
from tests.sql.loops import iterations, loop_row, make_loop, runs
from tests.sql.topology import graph, node
from tests.webhook_signing import sign

SECRET = "a-signing-secret-of-some-length"
ENDED = ("ok", "attention", "failed")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _post(port: int, path: str, body: bytes, secret: str = SECRET) -> tuple[int, dict[str, Any]]:
    stamp = int(datetime.now(UTC).timestamp())
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/hooks/{path}",
        data=body,
        method="POST",
        headers={
            "X-Ceaseless-Timestamp": str(stamp),
            "X-Ceaseless-Signature": sign(secret, stamp, body),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@contextmanager
def _serving(start_listener: Callable[..., ListenerProcess]) -> Iterator[int]:
    port = _free_port()
    listener = start_listener("--poll-interval", "60", "--http", f"127.0.0.1:{port}")
    listener.wait_for_event("http.listening")
    yield port


def _agent(conn: psycopg.Connection, pids: Path, pause: float = 0.5, name: str = "slow") -> str:
    """A command agent that records its pid, reads its prompt, and answers after `pause` s."""
    return make_agent(
        conn,
        name,
        "command",
        ["sh", "-c", f"echo $$ >> {pids}; cat > /dev/null; sleep {pause}; echo ROUTINE_OK"],
        max_concurrent=20,
    )


def _routine_runs(conn: psycopg.Connection, routine: UUID) -> list[tuple[str, str | None]]:
    return [
        (r[0], r[1])
        for r in conn.execute(
            "select status, context from ceaseless.routine_runs where routine_id = %s "
            "order by started_at, created_at",
            (routine,),
        ).fetchall()
    ]


def _ended(conn: psycopg.Connection, routine: UUID) -> list[str | None]:
    return [context for status, context in _routine_runs(conn, routine) if status in ENDED]


def _held_count(conn: psycopg.Connection) -> int:
    row = conn.execute("select count(*) from ceaseless.held_fires").fetchone()
    assert row is not None
    return int(row[0])


def _sleeper(conn: psycopg.Connection, pid_file: Path) -> str:
    """An agent that sleeps until stopped, its pid in `pid_file` (the latest one started)."""
    return make_agent(
        conn,
        "sleeper",
        "command",
        [str(FAKES / "fake_agent")],
        env={"FAKE_AGENT_MODE": "sleep", "FAKE_AGENT_PID_FILE": str(pid_file)},
        max_concurrent=20,
    )


def _pid(path: Path) -> int | None:
    return int(path.read_text().split()[0]) if path.exists() and path.read_text() else None


# --- buffer_one: two deliveries inside a cooldown are two runs, never a 409 ---------------


def test_buffer_one_turns_two_webhook_deliveries_inside_a_cooldown_into_two_runs(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess], tmp_path: Path
) -> None:
    agent = _agent(conn, tmp_path / "pids", pause=0.2)
    routine = make_routine(
        conn,
        "hook",
        "webhook",
        {"path": "deploys", "secret": SECRET},
        agent=agent,
        cooldown_secs=2,
        max_concurrent=1,
        overlap_policy="buffer_one",
    )
    conn.commit()
    with _serving(start_listener) as port:
        first = _post(port, "deploys", b'{"n": 1}')
        second = _post(port, "deploys", b'{"n": 2}')
        assert first[0] == 202 and first[1]["run_id"], first
        assert second[0] == 202 and "held_fire_id" in second[1], second
        assert second == (
            202,
            {
                "run_id": None,
                "held_fire_id": second[1]["held_fire_id"],
                "buffered": True,
                "debounced": False,
            },
        )
        wait_until(
            lambda: len(_ended(conn, routine)) == 2, 30, lambda: str(_routine_runs(conn, routine))
        )
    assert _ended(conn, routine) == ['{"n": 1}', '{"n": 2}']
    assert [s for s, _ in _routine_runs(conn, routine)].count("skipped") == 0
    assert _held_count(conn) == 0


def test_loop_buffer_one_turns_two_webhook_deliveries_into_two_iterations(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess], tmp_path: Path
) -> None:
    agent = _agent(conn, tmp_path / "pids", pause=1)
    loop = make_loop(
        conn,
        triggers={"webhook_enabled": True},
        g=graph([node("A", agent)]),
        overlap_policy="buffer_one",
    )
    row = loop_row(conn, loop)
    conn.commit()
    with _serving(start_listener) as port:
        token, key = row["webhook_token"], row["webhook_signing_key"]
        first = _post(port, token, b"first", key)
        second = _post(port, token, b"second", key)
        assert first[0] == 202 and first[1]["run_id"]
        assert second[0] == 202 and second[1]["buffered"] is True
        wait_until(
            lambda: [i["status"] for i in iterations(conn, loop)] == ["succeeded", "succeeded"],
            30,
            lambda: str([(r["iteration"], r["status"]) for r in runs(conn, loop)]),
        )
    assert "## Webhook body\n\nsecond" in iterations(conn, loop)[1]["task"]
    assert [r for r in runs(conn, loop) if r["status"] == "skipped"] == []


# --- buffer_all: order and bound ---------------------------------------------------------


def test_buffer_all_runs_the_held_fires_in_order_and_skips_past_its_bound(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess], tmp_path: Path
) -> None:
    conn.execute("update ceaseless.settings set value = '3' where key = 'overlap_buffer_max'")
    agent = _agent(conn, tmp_path / "pids", pause=0.2)
    routine = make_routine(
        conn,
        "hook",
        "webhook",
        {"path": "deploys", "secret": SECRET},
        agent=agent,
        max_concurrent=1,
        overlap_policy="buffer_all",
    )
    # Held back by a paused lane: the first run's job waits, so the next fires are held.
    conn.execute("select ceaseless.pause_lane(%s, now() + interval '1 hour', 'test')", (agent,))
    conn.commit()
    with _serving(start_listener) as port:
        answers = [_post(port, "deploys", f"delivery {i}".encode()) for i in range(5)]
        assert [a[0] for a in answers] == [202, 202, 202, 202, 409]
        assert [a[1].get("buffered", False) for a in answers[:4]] == [False, True, True, True]
        conn.execute("select ceaseless.resume_lane(%s)", (agent,))
        conn.commit()
        wait_until(
            lambda: len(_ended(conn, routine)) == 4, 30, lambda: str(_routine_runs(conn, routine))
        )
    assert _ended(conn, routine) == [f"delivery {i}" for i in range(4)]


def test_loop_buffer_all_runs_held_fires_in_order(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess], tmp_path: Path
) -> None:
    agent = _agent(conn, tmp_path / "pids", pause=0.3)
    loop = make_loop(conn, g=graph([node("A", agent)]), overlap_policy="buffer_all")
    conn.commit()
    start_listener("--poll-interval", "60")
    for _ in range(3):
        conn.execute("select ceaseless.run_loop(%s)", (loop,))
        conn.commit()
    wait_until(
        lambda: [i["status"] for i in iterations(conn, loop)] == ["succeeded"] * 3,
        30,
        lambda: str([(r["iteration"], r["status"]) for r in runs(conn, loop)]),
    )
    assert _held_count(conn) == 0


# --- cancel_other: the live run's agent is stopped ---------------------------------------


def test_cancel_other_stops_the_live_runs_agent_and_starts_the_new_fire(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess], tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    agent = _sleeper(conn, pids)
    routine = make_routine(
        conn, "r", "manual", agent=agent, max_concurrent=1, overlap_policy="cancel_other"
    )
    conn.commit()
    # The new fire's agent sleeps on when the test ends: the listener stops it a second
    # into its shutdown, not after the default grace.
    start_listener("--poll-interval", "60", "--shutdown-grace", "1")
    conn.execute("select ceaseless.run_routine(%s)", (routine,))
    conn.commit()
    wait_until(lambda: _pid(pids) is not None, 30, "the agent never started")
    first = _pid(pids)
    assert first is not None and pid_alive(first)
    conn.execute("select ceaseless.run_routine(%s)", (routine,))
    conn.commit()
    wait_until(
        lambda: not pid_alive(first),
        30,
        lambda: f"the cancelled run's agent still runs: {_routine_runs(conn, routine)}",
    )
    wait_until(lambda: _pid(pids) not in (None, first), 30, "the new fire's agent never started")
    assert [s for s, _ in _routine_runs(conn, routine)] == ["failed", "running"]


def test_loop_cancel_other_stops_the_live_iterations_agent(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess], tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    agent = _sleeper(conn, pids)
    loop = make_loop(conn, g=graph([node("A", agent)]), overlap_policy="cancel_other")
    conn.commit()
    start_listener("--poll-interval", "60", "--shutdown-grace", "1")  # as above
    conn.execute("select ceaseless.run_loop(%s)", (loop,))
    conn.commit()
    wait_until(lambda: _pid(pids) is not None, 30, "the agent never started")
    first = _pid(pids)
    assert first is not None and pid_alive(first)
    conn.execute("select ceaseless.run_loop(%s)", (loop,))
    conn.commit()
    wait_until(lambda: not pid_alive(first), 30, "the cancelled iteration's agent still runs")
    wait_until(lambda: _pid(pids) not in (None, first), 30, "the next iteration never started")
    assert [i["status"] for i in iterations(conn, loop)] == ["cancelled", "running"]
    assert loop_row(conn, loop)["enabled"] is True


# --- debounce: fifty events in ten seconds are one run -----------------------------------


def test_fifty_events_in_ten_seconds_are_one_debounced_run(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess], tmp_path: Path
) -> None:
    agent = _agent(conn, tmp_path / "pids", pause=0)
    routine = make_routine(
        conn,
        "watch",
        "event",
        {"pattern": "deploy"},
        agent=agent,
        debounce_secs=5,
        max_concurrent=50,
    )
    user = conn.execute("select current_user").fetchone()
    assert user is not None
    loop = make_loop(
        conn,
        triggers={"event": {"pattern": "deploy"}},
        g=graph([node("A", agent)]),
        debounce_secs=5,
    )
    conn.commit()
    start_listener("--poll-interval", "60")
    # Pinned times, a minute ago: the window closed long before the listener looks.
    # One transaction: the listener sees the window only once it is whole.
    start = datetime.now(UTC) - timedelta(minutes=1)
    with conn.transaction():
        for i in range(50):
            at = start + timedelta(seconds=i * 0.2)
            for who in ("alice", user[0]):
                conn.execute(
                    "insert into ceaseless.events (user_id, content, created_at) "
                    "values (%s, %s, %s)",
                    (who, f"deploy {i}", at),
                )
    conn.commit()
    wait_until(
        lambda: len(_ended(conn, routine)) == 1, 30, lambda: str(_routine_runs(conn, routine))
    )
    wait_until(lambda: [i["status"] for i in iterations(conn, loop)] == ["succeeded"], 30)
    assert _ended(conn, routine) == ["deploy 49"]
    assert iterations(conn, loop)[0]["trigger_detail"].startswith("50 fires collapsed")
    assert _held_count(conn) == 0


# --- held fires survive kill -9 -----------------------------------------------------------


def test_held_fires_survive_kill_9_and_a_new_listener_fires_them(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess], tmp_path: Path
) -> None:
    agent = _agent(conn, tmp_path / "pids", pause=0)
    buffered = make_routine(
        conn,
        "buffered",
        "event",
        {"pattern": "build"},
        agent=agent,
        max_concurrent=1,
        overlap_policy="buffer_one",
    )
    debounced = make_routine(
        conn,
        "debounced",
        "event",
        {"pattern": "deploy"},
        agent=agent,
        debounce_secs=3600,
    )
    conn.execute("select ceaseless.pause_lane(%s, now() + interval '1 hour', 'test')", (agent,))
    conn.commit()
    first = start_listener("--poll-interval", "60")
    for content in ("build 1", "build 2"):
        conn.execute(
            "insert into ceaseless.events (user_id, content) values ('alice', %s)", (content,)
        )
        conn.commit()
    assert _held_count(conn) == 1
    first.kill()
    # Held while no listener runs (its NOTIFY reaches nobody), its window
    # closed at a pinned time long past.
    conn.execute(
        "insert into ceaseless.events (user_id, content, created_at) "
        "values ('alice', 'deploy 1', now() - interval '2 hours')"
    )
    assert _held_count(conn) == 2
    conn.execute("select ceaseless.resume_lane(%s)", (agent,))
    conn.commit()
    start_listener("--poll-interval", "60")
    wait_until(
        lambda: len(_ended(conn, buffered)) == 2 and len(_ended(conn, debounced)) == 1,
        30,
        lambda: f"{_routine_runs(conn, buffered)} {_routine_runs(conn, debounced)}",
    )
    assert _ended(conn, buffered) == ["build 1", "build 2"]
    assert _held_count(conn) == 0


def test_held_loop_fires_survive_kill_9_and_a_new_listener_fires_them(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess], tmp_path: Path
) -> None:
    agent = _agent(conn, tmp_path / "pids", pause=0)
    buffered = make_loop(
        conn,
        title="buffered",
        triggers={"event": {"pattern": "build"}},
        g=graph([node("A", agent)]),
        overlap_policy="buffer_one",
    )
    debounced = make_loop(
        conn,
        title="debounced",
        triggers={"event": {"pattern": "deploy"}},
        g=graph([node("A", agent)]),
        debounce_secs=3600,
    )
    # The first iteration stays live while the lane is paused: the second fire waits.
    conn.execute("select ceaseless.pause_lane(%s, now() + interval '1 hour', 'test')", (agent,))
    conn.commit()
    first = start_listener("--poll-interval", "60")
    for content in ("build 1", "build 2"):
        conn.execute(
            "insert into ceaseless.events (user_id, content) values (current_user, %s)", (content,)
        )
        conn.commit()
    assert _held_count(conn) == 1
    first.kill()
    # Held while no listener runs, its window closed at a pinned time long past.
    conn.execute(
        "insert into ceaseless.events (user_id, content, created_at) "
        "values (current_user, 'deploy 1', now() - interval '2 hours')"
    )
    assert _held_count(conn) == 2
    conn.execute("select ceaseless.resume_lane(%s)", (agent,))
    conn.commit()
    start_listener("--poll-interval", "60")

    def statuses(loop: UUID) -> list[str]:
        return [i["status"] for i in iterations(conn, loop)]

    wait_until(
        lambda: (
            statuses(buffered) == ["succeeded", "succeeded"]
            and statuses(debounced) == ["succeeded"]
        ),
        30,
        lambda: f"{statuses(buffered)} {statuses(debounced)}",
    )
    assert ["build 2" in i["task"] for i in iterations(conn, buffered)] == [False, True]
    assert _held_count(conn) == 0
