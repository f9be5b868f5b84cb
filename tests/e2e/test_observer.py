"""The run observer over real HTTP: server-sent events of runs and loops from a real listener.

Clients are plain http.client connections reading the event stream line by
line (and, for the slow reader, a raw socket that never reads). They present
the listener's token, as an operator's client does, unless a test says not to.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import psycopg
import pytest

from tests.e2e.support import ListenerProcess, wait_until
from tests.factories import make_agent
from tests.sql.loops import make_loop
from tests.sql.topology import diamond, graph, node, run_row, start_run

_SLOW_AGENT = 'cat > /dev/null; sleep {sleep}; printf "done"'


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Event:
    id: int
    event: str
    data: dict[str, Any]


@dataclass
class Follower:
    """One SSE client in a thread: its status, the events it received, and whether it ended."""

    status: int
    events: list[Event] = field(default_factory=list)
    comments: int = 0
    closed: bool = False
    body: str = ""
    conn: http.client.HTTPConnection | None = None
    sock: socket.socket | None = None

    def close(self) -> None:
        # Shut the socket down first: the reader thread holds the response's
        # buffer while it waits for a line, and closing the connection would
        # wait for that line (the next keepalive, seconds away).
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)
        if self.conn is not None:
            self.conn.close()


# The token of the listener serving each port (_served), which _follow presents.
_TOKENS: dict[int, str] = {}


def _follow(
    port: int,
    path: str,
    headers: dict[str, str] | None = None,
    *,
    host: str = "127.0.0.1",
    anonymous: bool = False,
) -> Follower:
    """Follow `path`; with the listener's token unless `anonymous` or headers carry their own."""
    sent = dict(headers or {})
    if not anonymous and "Authorization" not in sent and port in _TOKENS:
        sent["Authorization"] = f"Bearer {_TOKENS[port]}"
    conn = http.client.HTTPConnection(host, port, timeout=60)
    conn.request("GET", path, headers=sent)
    sock = conn.sock
    response = conn.getresponse()
    follower = Follower(status=response.status, conn=conn, sock=sock)
    if response.status != 200:
        follower.body = response.read().decode()
        follower.closed = True
        conn.close()
        return follower

    def read() -> None:
        fields: dict[str, str] = {}
        try:
            while line := response.readline():
                text = line.decode().rstrip("\n")
                if text.startswith(":"):
                    follower.comments += 1
                elif text == "":
                    if fields:
                        follower.events.append(
                            Event(int(fields["id"]), fields["event"], json.loads(fields["data"]))
                        )
                    fields = {}
                else:
                    name, _, value = text.partition(": ")
                    fields[name] = value
        except (OSError, ValueError, AttributeError, http.client.HTTPException):
            # The test closed the connection under the reader.
            pass
        follower.closed = True

    threading.Thread(target=read, daemon=True).start()
    return follower


def _no_traceback(listener: ListenerProcess) -> None:
    raw = [line["line"] for line in listener.lines if line.get("event") == "raw"]
    assert not [line for line in raw if "Traceback" in line or "Error handling request" in line]
    assert not listener.events("listener.part_crashed")


def _sql_events(conn: psycopg.Connection, run: UUID, after: int = 0) -> list[tuple]:
    return conn.execute(
        "select id, event, data from ceaseless.run_events(%s, %s, 5000)", (run, after)
    ).fetchall()


def _as_rows(events: list[Event]) -> list[tuple]:
    return [(e.id, e.event, e.data) for e in events]


@contextmanager
def _served(
    start_listener: Callable[..., ListenerProcess], *options: str, host: str = "127.0.0.1"
) -> Iterator[tuple[int, ListenerProcess]]:
    port = _free_port()
    listener = start_listener("--poll-interval", "60", "--http", f"{host}:{port}", *options)
    _TOKENS[port] = listener.http_token()
    try:
        yield port, listener
    finally:
        _TOKENS.pop(port, None)


@pytest.fixture
def slow_agent(conn: psycopg.Connection) -> str:
    return make_agent(
        conn, "noop", "command", ["sh", "-c", _SLOW_AGENT.format(sleep=0.4)], max_concurrent=50
    )


def test_a_follower_gets_the_state_then_every_transition_in_order_ending_with_the_final_status(
    conn: psycopg.Connection, slow_agent: str, start_listener: Callable[..., ListenerProcess]
) -> None:
    with _served(start_listener) as (port, _):
        run = start_run(conn, diamond())
        follower = _follow(port, f"/runs/{run}/events")
        assert follower.status == 200
        wait_until(lambda: follower.closed, 30, lambda: f"stream never ended: {follower.events}")
    snapshot, *changes = follower.events
    assert snapshot.event == "snapshot"
    assert snapshot.data["run"]["run_id"] == str(run)
    assert [n["node"] for n in snapshot.data["nodes"]] == ["A", "B", "C", "D"]
    # After the snapshot: exactly what the audit trail holds after its id, in order.
    assert changes, "the run had not ended when the follower connected"
    assert _as_rows(changes) == _sql_events(conn, run, snapshot.id)
    ids = [e.id for e in changes]
    assert ids == sorted(ids) and len(set(ids)) == len(ids) and ids[0] > snapshot.id
    assert (changes[-1].event, changes[-1].data["status"]) == ("run", "succeeded")
    # Node order as the engine ran them: D only after B and C succeeded.
    moves = [(e.data["node"], e.data["status"]) for e in changes if e.event == "node"]
    if ("D", "queued") in moves and ("B", "succeeded") in moves:
        assert moves.index(("D", "queued")) > moves.index(("B", "succeeded"))
    assert ("D", "succeeded") in moves


def test_a_late_follower_gets_the_current_state_first(
    conn: psycopg.Connection, slow_agent: str, start_listener: Callable[..., ListenerProcess]
) -> None:
    with _served(start_listener) as (port, _):
        run = start_run(conn, graph([node("A"), node("B", gate="approval")], [("A", "B")]))
        wait_until(lambda: run_row(conn, run)["status"] == "awaiting_approval", 20)
        # Mid-run, at a gate: the state holds still until somebody decides.
        follower = _follow(port, f"/runs/{run}/events")
        wait_until(lambda: len(follower.events) >= 1, 10)
        (snapshot,) = follower.events
        assert snapshot.event == "snapshot" and snapshot.data["final"] is False
        assert snapshot.data["run"]["status"] == "awaiting_approval"
        states = {n["node"]: n["status"] for n in snapshot.data["nodes"]}
        assert states == {"A": "succeeded", "B": "awaiting_approval"}
        (gate,) = snapshot.data["approvals"]
        assert gate["node"] == "B" and gate["status"] == "pending"
        assert snapshot.id == _sql_events(conn, run)[-1][0]
        conn.execute(
            "select ceaseless.decide_approval(%s, true, 'ops', 'go')", (gate["approval_id"],)
        )
        wait_until(lambda: follower.closed, 30, lambda: f"never ended: {follower.events}")
        decided = [e.data for e in follower.events if e.event == "approval"]
        assert [(d["status"], d["decided_by"]) for d in decided] == [("approved", "ops")]
        assert follower.events[-1].data["status"] == "succeeded"
        # After the end: the final state alone, and the stream closes.
        late = _follow(port, f"/runs/{run}/events")
        wait_until(lambda: late.closed, 10)
    (final,) = late.events
    assert final.event == "snapshot" and final.data["final"] is True
    assert final.data["run"]["status"] == "succeeded"
    assert {n["status"] for n in final.data["nodes"]} == {"succeeded"}


def test_last_event_id_resumes_without_gaps_or_repeats(
    conn: psycopg.Connection, slow_agent: str, start_listener: Callable[..., ListenerProcess]
) -> None:
    with _served(start_listener) as (port, listener):
        run = start_run(conn, diamond())
        first = _follow(port, f"/runs/{run}/events")
        wait_until(lambda: len(first.events) >= 3, 20, lambda: f"{first.events}")
        first.close()
        seen = list(first.events)
        # The server notices the client left and frees its follower.
        listener.wait_for_event("observer.disconnected", timeout=10)
        wait_until(lambda: run_row(conn, run)["status"] == "succeeded", 30)
        rest = _follow(port, f"/runs/{run}/events", {"Last-Event-ID": str(seen[-1].id)})
        assert rest.status == 200
        wait_until(lambda: rest.closed, 10)
        again = _follow(port, f"/runs/{run}/events", {"Last-Event-ID": str(rest.events[-1].id)})
    _no_traceback(listener)
    assert rest.events and rest.events[0].event != "snapshot"
    assert _as_rows(seen[1:] + rest.events) == _sql_events(conn, run, seen[0].id)
    assert rest.events[-1].data["status"] == "succeeded"
    # Nothing left to send: 204, which stops an EventSource from reconnecting.
    assert again.status == 204


def test_a_slow_client_is_dropped_while_others_keep_receiving(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(conn)
    with _served(start_listener, "--observer-send-timeout", "1") as (port, listener):
        # A gated node: the run waits, and nothing but this test moves it.
        run = start_run(conn, graph([node("A", gate="approval")]))
        fast = _follow(port, f"/runs/{run}/events")
        slow = socket.socket()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect(("127.0.0.1", port))
        slow.sendall(
            f"GET /runs/{run}/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {_TOKENS[port]}\r\n\r\n".encode()
        )
        wait_until(lambda: len(fast.events) >= 1, 10)
        # Both followed before the flood: the slow one's snapshot predates it.
        listener.wait_for_event("observer.connected", count=2)
        # A flood of changes for this run, far more than a client that never
        # reads can hold: the audit rows the observer streams, written directly.
        conn.execute(
            "insert into ceaseless.audit_log (entity, entity_id, action, old_state, new_state, "
            "detail) select 'topology_node', %s, 'state', 'awaiting_approval', "
            "'awaiting_approval', jsonb_build_object('node', 'A', 'error', repeat('x', 480)) "
            "from generate_series(1, 4000)",
            (run,),
        )
        conn.execute(
            "select pg_notify('ceaseless_run', json_build_object('table', 'topology_nodes', "
            "'id', %s::text)::text)",
            (str(run),),
        )
        listener.wait_for_event("observer.slow_client_dropped", timeout=20)
        approval = conn.execute(
            "select id from ceaseless.approvals where topology_run_id = %s", (run,)
        ).fetchone()
        assert approval is not None
        conn.execute("select ceaseless.decide_approval(%s, false, 'ops', 'no')", (approval[0],))
        wait_until(lambda: fast.closed, 30, lambda: f"fast follower: {len(fast.events)} events")
        slow.close()
    assert len(fast.events) > 4000
    assert _as_rows(fast.events[1:]) == _sql_events(conn, run, fast.events[0].id)
    assert fast.events[-1].data["status"] == "failed"
    dropped = listener.events("observer.disconnected")
    assert [d["reason"] for d in dropped] == ["too slow"]
    _no_traceback(listener)


def test_a_token_is_required_when_bound_beyond_loopback(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(conn)
    run = start_run(conn, graph([node("A", gate="approval")]))
    with _served(start_listener, "--http-token", "s3cret-token", host="0.0.0.0") as (port, _):
        path = f"/runs/{run}/events"
        assert _follow(port, path, anonymous=True).status == 401
        assert _follow(port, path, {"Authorization": "Bearer wrong"}).status == 401
        assert _follow(port, path, {"Authorization": "Basic s3cret-token"}).status == 401
        ok = _follow(port, path, {"Authorization": "Bearer s3cret-token"})
        assert ok.status == 200
        wait_until(lambda: len(ok.events) >= 1, 10)
        ok.close()
        # Webhooks keep their own authentication (signatures), no token.
        assert _follow(port, "/healthz", anonymous=True).status == 200


def test_without_a_given_token_the_observer_needs_the_one_made_at_start(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(conn)
    run = start_run(conn, graph([node("A", gate="approval")]))
    for host in ("0.0.0.0", "127.0.0.1"):
        with _served(start_listener, host=host) as (port, listener):
            path = f"/runs/{run}/events"
            answer = _follow(port, path, {"Authorization": "Bearer anything"})
            assert answer.status == 401 and "token is required" in answer.body
            assert _follow(port, path, anonymous=True).status == 401
            assert listener.events("http.listening")[0]["token"] == "made at start"
            ok = _follow(port, path)
            assert ok.status == 200
            wait_until(lambda ok=ok: len(ok.events) >= 1, 10)
            ok.close()


def test_a_rebound_host_name_is_refused_on_both_streams_even_with_the_token(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    """A page of another site whose name was rebound to 127.0.0.1 (DNS rebinding)."""
    make_agent(conn)
    run = start_run(conn, graph([node("A", gate="approval")]))
    loop = make_loop(conn, triggers={"cron": "0 3 * * *", "on_completion": False})
    with _served(start_listener) as (port, _):
        for path in (f"/runs/{run}/events", f"/loops/{loop}/events"):
            for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example"):
                answer = _follow(port, path, {"Host": host})
                assert answer.status == 421, (path, host, answer.status)
                assert answer.events == []
            ok = _follow(port, path, {"Host": f"localhost:{port}"})
            assert ok.status == 200
            ok.close()


def test_unknown_runs_and_loops_are_404_and_a_bad_last_event_id_400(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(conn)
    run = start_run(conn, graph([node("A", gate="approval")]))
    with _served(start_listener, "--observer-max-clients", "1") as (port, _):
        assert _follow(port, f"/runs/{UUID(int=7)}/events").status == 404
        assert _follow(port, f"/loops/{UUID(int=7)}/events").status == 404
        assert _follow(port, "/runs/not-a-uuid/events").status == 404
        bad = _follow(port, f"/runs/{run}/events", {"Last-Event-ID": "abc"})
        assert bad.status == 400
        one = _follow(port, f"/runs/{run}/events")
        assert one.status == 200
        assert _follow(port, f"/runs/{run}/events").status == 503
        one.close()


def test_a_loop_follower_sees_every_iteration_and_the_loop_stopping(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(conn, "noop", "command", ["sh", "-c", "cat > /dev/null; printf more"])
    loop = make_loop(
        conn, triggers={"on_completion": True}, policy={"kind": "iters", "spec": {"n": 3}}
    )
    with _served(start_listener, "--observer-keepalive", "1") as (port, _):
        follower = _follow(port, f"/loops/{loop}/events")
        wait_until(lambda: len(follower.events) >= 1, 10)
        conn.execute("select ceaseless.run_loop(%s)", (loop,))

        def stopped() -> bool:
            return any(e.event == "loop" and e.data.get("stopped_reason") for e in follower.events)

        wait_until(stopped, 30, lambda: f"{[(e.event, e.data) for e in follower.events]}")
        time.sleep(1.5)
        follower.close()
    snapshot, *changes = follower.events
    assert snapshot.event == "snapshot" and snapshot.data["loop"]["loop_id"] == str(loop)
    finished = [
        e.data["iteration"] for e in changes if e.event == "run" and e.data["status"] == "succeeded"
    ]
    assert finished == [1, 2, 3]
    assert {e.data["run_id"] for e in changes if e.event == "node"} == {
        e.data["run_id"] for e in changes if e.event == "run"
    }
    (stop,) = [e.data for e in changes if e.event == "loop"]
    assert stop["status"] == "disabled" and stop["stopped_reason"] == "completed"
    ids = [e.id for e in changes]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert follower.comments >= 1  # a keepalive while the loop was quiet


def test_a_listener_stops_promptly_with_streams_open(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(conn)
    run = start_run(conn, graph([node("A", gate="approval")]))
    with _served(start_listener) as (port, listener):
        follower = _follow(port, f"/runs/{run}/events")
        wait_until(lambda: len(follower.events) >= 1, 10)
        started = time.monotonic()
        assert listener.stop(timeout=20) == 0
        assert time.monotonic() - started < 10
        wait_until(lambda: follower.closed, 5)
    _no_traceback(listener)


def test_a_loop_change_that_commits_after_a_higher_id_was_sent_still_arrives(
    conn: psycopg.Connection, db_url: str, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(conn)
    loop = make_loop(conn)
    audit = (
        "insert into ceaseless.audit_log (entity, entity_id, action, old_state, new_state) "
        "values ('loop', %s, 'update', %s, %s) returning id"
    )
    notify = (
        "select pg_notify('ceaseless_run', "
        "json_build_object('table', 'loops', 'id', %s::text)::text)"
    )
    with _served(start_listener) as (port, _):
        follower = _follow(port, f"/loops/{loop}/events")
        wait_until(lambda: len(follower.events) >= 1, 10)
        # A transaction takes the lower id and commits last, as a pause racing a
        # node's move can.
        with psycopg.connect(db_url) as slow:
            early = slow.execute(audit, (loop, "enabled", "disabled")).fetchone()[0]
            later = conn.execute(audit, (loop, "disabled", "enabled")).fetchone()[0]
            conn.execute(notify, (str(loop),))
            assert later > early
            wait_until(
                lambda: any(e.data.get("old_status") == "disabled" for e in follower.events), 10
            )
            slow.commit()
            conn.execute(notify, (str(loop),))
        wait_until(lambda: len(follower.events) >= 3, 10, lambda: f"{follower.events}")
        follower.close()
        resumed = _follow(port, f"/loops/{loop}/events", {"Last-Event-ID": str(later)})
        time.sleep(1.5)
        resumed.close()
    _, on_time, late = follower.events
    assert (on_time.id, on_time.data["status"]) == (later, "enabled")
    # The late change arrives, under the high-water id: a resume repeats nothing.
    assert (late.id, late.data["status"], late.data["old_status"]) == (later, "disabled", "enabled")
    assert resumed.status == 200 and resumed.events == []
