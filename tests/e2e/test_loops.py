"""Loops end to end: SQL API → listener → fake agents → chained iterations, cron, and the
webhook ingress over real HTTP."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import psycopg

from tests.e2e.support import ListenerProcess, wait_until
from tests.factories import make_agent
from tests.sql.loops import LIVE, iterations, loop_row, make_loop, runs
from tests.sql.topology import graph, node
from tests.webhook_signing import sign


def _answer_agent(conn: psycopg.Connection, name: str = "answer", pause: float = 0) -> str:
    """A command agent that reads its prompt and answers with something unique to its run."""
    return make_agent(
        conn,
        name,
        "command",
        ["sh", "-c", f"cat > /dev/null; sleep {pause}; printf 'answer of process %s' $$"],
        max_concurrent=50,
    )


def _one_node(agent: str) -> dict:
    return graph([node("A", agent)])


def _wait_stopped(conn: psycopg.Connection, loop: UUID, timeout: float = 30) -> dict[str, Any]:
    wait_until(
        lambda: loop_row(conn, loop)["stopped_reason"] is not None,
        timeout,
        lambda: (
            f"the loop never stopped: {[(r['iteration'], r['status']) for r in runs(conn, loop)]}"
        ),
    )
    return loop_row(conn, loop)


def _job_prompt(conn: psycopg.Connection, run: UUID) -> str:
    row = conn.execute(
        "select j.prompt from ceaseless.job j join ceaseless.topology_nodes n on n.job_id = j.id "
        "where n.topology_run_id = %s",
        (run,),
    ).fetchone()
    assert row is not None
    return str(row[0])


def test_iters_3_on_completion_runs_three_chained_iterations_and_stops_completed(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    loop = make_loop(
        conn,
        g=_one_node(_answer_agent(conn)),
        triggers={"on_completion": True},
        policy={"kind": "iters", "spec": {"n": 3}},
        task="Refine the answer.",
    )
    start_listener("--poll-interval", "60")
    conn.execute("select ceaseless.run_loop(%s)", (loop,))
    row = _wait_stopped(conn, loop)
    assert (row["enabled"], row["stopped_reason"], row["next_fire_at"]) == (
        False,
        "completed",
        None,
    )
    chain = iterations(conn, loop)
    assert [r["iteration"] for r in chain] == [1, 2, 3]
    assert [r["status"] for r in chain] == ["succeeded"] * 3
    assert [r["parent_run_id"] for r in chain] == [None, chain[0]["id"], chain[1]["id"]]
    first = chain[0]["final_message"]
    assert first.startswith("answer of process ")
    # Iteration 2's agent was given iteration 1's final message.
    prompt = _job_prompt(conn, chain[1]["id"])
    assert "Refine the answer." in prompt
    assert f"## Prior iteration (1)\n\n{first}" in prompt
    assert len(runs(conn, loop)) == 3
    note = conn.execute(
        "select kind from ceaseless.notifications where source_table = 'loops' and source_id = %s",
        (loop,),
    ).fetchall()
    assert note == [("stopped",)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _post(
    port: int, token: str, key: str, body: bytes, ts: int | None = None, signature: str = ""
) -> tuple[int, dict[str, Any]]:
    stamp = int(datetime.now(UTC).timestamp()) if ts is None else ts
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/hooks/{token}",
        data=body,
        method="POST",
        headers={
            "X-Ceaseless-Timestamp": str(stamp),
            "X-Ceaseless-Signature": signature or sign(key, stamp, body),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_loop_webhook_through_the_ingress(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    loop = make_loop(
        conn,
        g=_one_node(_answer_agent(conn, pause=3)),
        triggers={"webhook_enabled": True},
        task="Triage the alert.",
    )
    port = _free_port()
    listener = start_listener("--poll-interval", "60", "--http", f"127.0.0.1:{port}")
    listener.wait_for_event("http.listening")
    hook = loop_row(conn, loop)
    token, key = hook["webhook_token"], hook["webhook_signing_key"]

    now = int(datetime.now(UTC).timestamp())
    assert _post(port, token, key, b"x", signature="sha256=" + "0" * 64)[0] == 401
    assert _post(port, token, "not-the-key", b"x")[0] == 401
    assert _post(port, token, key, b"x", ts=now - 301)[0] == 401
    status, answer = _post(port, token, key, b'{"alert": "disk full"}', ts=now)
    assert status == 202
    run = UUID(answer["run_id"])
    [row] = runs(conn, loop)
    assert row["id"] == run and row["trigger_type"] == "webhook"
    assert '{"alert": "disk full"}' in _job_prompt(conn, run)
    # The same request again is a replay.
    assert _post(port, token, key, b'{"alert": "disk full"}', ts=now)[0] == 409
    # A second request while the iteration runs is refused and recorded.
    status, answer = _post(port, token, key, b"again")
    assert status == 409 and "running" in answer["error"]
    skipped = [r for r in runs(conn, loop) if r["status"] == "skipped"]
    assert [r["skip_reason"] for r in skipped] == ["live_iteration"]

    # Rotation: disable and re-enable the webhook trigger; the old token is gone.
    for enabled in (False, True):
        conn.execute(
            "update ceaseless.loops set triggers = %s where id = %s",
            (json.dumps({"webhook_enabled": enabled}), loop),
        )
    assert _post(port, token, key, b"x")[0] == 404
    wait_until(lambda: runs(conn, loop)[0]["status"] == "succeeded", 20, "iteration 1 never ended")
    fresh = loop_row(conn, loop)
    status, answer = _post(port, fresh["webhook_token"], fresh["webhook_signing_key"], b"y")
    assert status == 202
    assert iterations(conn, loop)[1]["id"] == UUID(answer["run_id"])
    # The token is the capability to call the loop: logs show only its start.
    logged = json.dumps(listener.lines)
    assert token[:11] in logged and token not in logged
    assert fresh["webhook_token"] not in logged


def test_cron_on_completion_and_webhook_together_never_run_two_iterations(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    loop = make_loop(
        conn,
        g=_one_node(_answer_agent(conn, pause=0.2)),
        triggers={"cron": "* * * * *", "on_completion": True, "webhook_enabled": True},
        policy={"kind": "iters", "spec": {"n": 8}},
    )
    port = _free_port()
    listener = start_listener("--poll-interval", "0.1", "--http", f"127.0.0.1:{port}")
    listener.wait_for_event("http.listening")
    hook = loop_row(conn, loop)
    most_live = 0
    stop = threading.Event()

    def poke() -> None:
        # Cron slots due all the time, and webhooks, while iterations chain.
        with psycopg.connect(conn.info.dsn, autocommit=True) as c:
            while not stop.is_set():
                c.execute(
                    "update ceaseless.loops set next_fire_at = now() - interval '1 second' "
                    "where id = %s and enabled",
                    (loop,),
                )
                _post(port, hook["webhook_token"], hook["webhook_signing_key"], b"poke")
                time.sleep(0.05)

    pokers = threading.Thread(target=poke)
    conn.execute("select ceaseless.run_loop(%s)", (loop,))
    pokers.start()
    try:
        deadline = time.monotonic() + 60
        while loop_row(conn, loop)["stopped_reason"] is None and time.monotonic() < deadline:
            live = conn.execute(
                "select count(*) from ceaseless.topology_runs where loop_id = %s "
                "and status = any(%s)",
                (loop, list(LIVE)),
            ).fetchone()
            assert live is not None
            most_live = max(most_live, live[0])
            time.sleep(0.02)
    finally:
        stop.set()
        pokers.join()
    assert most_live == 1
    assert loop_row(conn, loop)["stopped_reason"] == "completed"
    chain = iterations(conn, loop)
    assert [r["iteration"] for r in chain] == list(range(1, 9))
    assert [r["parent_run_id"] for r in chain[1:]] == [r["id"] for r in chain[:-1]]
    assert all(r["status"] == "succeeded" for r in chain)
    kinds = {r["trigger_type"] for r in runs(conn, loop)}
    assert {"manual", "on_completion", "cron", "webhook"} <= kinds
    skipped = [r for r in runs(conn, loop) if r["status"] == "skipped"]
    assert skipped and {r["skip_reason"] for r in skipped} <= {"live_iteration", "disabled"}
    assert not listener.events("db.error")
    raw = [line.get("line", "") for line in listener.lines if line.get("event") == "raw"]
    assert not [line for line in raw if "Traceback" in line or "deadlock" in line]


def test_a_cron_loop_created_while_the_listener_runs_is_scheduled_through_notify(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    start_listener("--poll-interval", "60")
    loop = make_loop(conn, g=_one_node(_answer_agent(conn)), triggers={"cron": "0 3 * * *"})
    wait_until(
        lambda: loop_row(conn, loop)["next_fire_at"] is not None,
        10,
        "the listener never scheduled the loop",
    )
    at = loop_row(conn, loop)["next_fire_at"]
    assert (at.astimezone(UTC).hour, at.minute, at.second) == (3, 0, 0)
    # A new schedule is computed again.
    conn.execute(
        'update ceaseless.loops set triggers = \'{"cron": "30 4 * * *"}\' where id = %s', (loop,)
    )
    wait_until(
        lambda: loop_row(conn, loop)["next_fire_at"] not in (None, at),
        10,
        "the listener never rescheduled the loop",
    )
    assert loop_row(conn, loop)["next_fire_at"].astimezone(UTC).hour == 4


def test_an_event_starts_an_iteration_that_the_listener_runs_with_the_event_in_its_prompt(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    loop = make_loop(
        conn,
        g=_one_node(_answer_agent(conn)),
        triggers={"event": {"pattern": "^deploy failed", "channel": "ci"}},
        policy={"kind": "iters", "spec": {"n": 1}},
        task="Find out why the deploy failed.",
        user_id="postgres",
    )
    start_listener("--poll-interval", "60")

    conn.execute(
        "insert into ceaseless.events (user_id, channel, content) "
        "values ('postgres', 'ci', 'deploy failed on main: exit 1')"
    )

    row = _wait_stopped(conn, loop)
    assert row["stopped_reason"] == "completed"
    (iteration,) = iterations(conn, loop)
    assert (iteration["status"], iteration["trigger_type"]) == ("succeeded", "event")
    assert iteration["final_message"].startswith("answer of process ")
    assert "## Event\n\ndeploy failed on main: exit 1" in _job_prompt(conn, iteration["id"])
