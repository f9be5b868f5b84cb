"""The webhook ingress over real HTTP: status codes, strict headers, bounds, and replay memory.

A real listener serves POST /hooks/{path}; requests come from urllib or, for
what a well-behaved client would never send, from a raw socket.
"""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from uuid import UUID

import psycopg
import pytest

from tests.e2e.support import ListenerProcess, wait_routine_run, wait_until
from tests.factories import make_agent, make_routine
from tests.webhook_signing import sign

SECRET = "a-signing-secret-of-some-length"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _post(
    port: int,
    path: str,
    body: bytes,
    *,
    ts: int | None = None,
    signature: str | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, str]:
    stamp = int(datetime.now(UTC).timestamp()) if ts is None else ts
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/hooks/{path}",
        data=body,
        method="POST",
        headers=headers
        or {
            "X-Ceaseless-Timestamp": str(stamp),
            "X-Ceaseless-Signature": signature or sign(SECRET, stamp, body),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def _raw(port: int, request: bytes, timeout: float = 10) -> bytes:
    """Send bytes exactly as given and read the answer until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer


def _status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def _signed_request(path: str, body: bytes, ts: str, signature: str) -> bytes:
    return (
        f"POST /hooks/{path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        f"X-Ceaseless-Timestamp: {ts}\r\nX-Ceaseless-Signature: {signature}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


@contextmanager
def _listening(
    start_listener: Callable[..., ListenerProcess], *options: str
) -> Iterator[tuple[int, ListenerProcess]]:
    port = _free_port()
    listener = start_listener(
        "--poll-interval", "60", "--http", f"127.0.0.1:{port}", "--max-body", "1000", *options
    )
    listener.wait_for_event("http.listening")
    yield port, listener


@pytest.fixture
def routine(conn: psycopg.Connection) -> UUID:
    echo = make_agent(conn, "echo", "command", ["cat"], max_concurrent=50)
    return make_routine(
        conn,
        "hook",
        "webhook",
        {"path": "deploys", "secret": SECRET},
        agent=echo,
        max_concurrent=5,
    )


@pytest.fixture
def ingress(
    routine: UUID, start_listener: Callable[..., ListenerProcess]
) -> Iterator[tuple[int, ListenerProcess]]:
    with _listening(start_listener) as served:
        yield served


def _no_traceback(listener: ListenerProcess) -> None:
    raw = [line["line"] for line in listener.lines if line.get("event") == "raw"]
    assert not [line for line in raw if "Traceback" in line or "Error handling request" in line]


def test_signed_webhook_is_accepted_and_its_body_reaches_the_run(
    conn: psycopg.Connection, routine: UUID, ingress: tuple[int, ListenerProcess]
) -> None:
    port, _ = ingress
    status, body = _post(port, "deploys", b'{"ref": "main", "sha": "abc123"}')
    assert status == 202 and "run_id" in body
    state, summary = wait_routine_run(conn, routine)
    assert state == "attention" and '"sha": "abc123"' in summary


def test_webhook_refusals_map_to_status_codes(
    conn: psycopg.Connection, ingress: tuple[int, ListenerProcess]
) -> None:
    port, _ = ingress
    now = int(datetime.now(UTC).timestamp())
    assert _post(port, "deploys", b"x", signature="sha256=" + "0" * 64)[0] == 401
    assert _post(port, "deploys", b"x", ts=now - 301)[0] == 401
    assert _post(port, "nowhere", b"x")[0] == 404
    assert _post(port, "deploys", b"x" * 1001)[0] == 413
    assert _post(port, "deploys", b"once", ts=now)[0] == 202
    assert _post(port, "deploys", b"once", ts=now)[0] == 409  # replay
    conn.execute("update ceaseless.routines set enabled = false")
    assert _post(port, "deploys", b"later")[0] == 409


def test_webhook_refused_by_cooldown_is_recorded_as_skipped(
    conn: psycopg.Connection, routine: UUID, ingress: tuple[int, ListenerProcess]
) -> None:
    port, _ = ingress
    conn.execute("update ceaseless.routines set cooldown_secs = 600, last_run_at = now()")
    assert _post(port, "deploys", b"x")[0] == 409
    row = conn.execute(
        "select status, skip_reason from ceaseless.routine_runs where routine_id = %s", (routine,)
    ).fetchone()
    assert row == ("skipped", "cooldown")


def test_a_request_refused_by_a_guardrail_cannot_be_replayed_once_it_clears(
    conn: psycopg.Connection, routine: UUID, ingress: tuple[int, ListenerProcess]
) -> None:
    # The refusal used to roll back the replay record: a captured request
    # replayed after the cooldown fired the routine.
    port, _ = ingress
    now = int(datetime.now(UTC).timestamp())
    conn.execute("update ceaseless.routines set cooldown_secs = 600, last_run_at = now()")
    status, answer = _post(port, "deploys", b"captured", ts=now)
    assert status == 409 and "cooling down" in answer
    conn.execute("update ceaseless.routines set cooldown_secs = 0")
    status, answer = _post(port, "deploys", b"captured", ts=now)
    assert status == 409 and "replay" in answer
    rows = conn.execute(
        "select status from ceaseless.routine_runs where routine_id = %s", (routine,)
    ).fetchall()
    assert rows == [("skipped",)]


@pytest.mark.parametrize("timestamp", ["99999999999999", "²", "9" * 5000, "-5", "1e9", " "])
def test_a_malformed_timestamp_is_a_bad_request(
    ingress: tuple[int, ListenerProcess], timestamp: str
) -> None:
    port, listener = ingress
    answer = _raw(port, _signed_request("deploys", b"x", timestamp, "sha256=" + "0" * 64))
    assert _status_of(answer) == 400
    assert b"X-Ceaseless-Timestamp" in answer
    _no_traceback(listener)


def test_malformed_or_missing_signatures_are_refused_before_the_database(
    ingress: tuple[int, ListenerProcess],
) -> None:
    port, listener = ingress
    ts = str(int(datetime.now(UTC).timestamp()))
    assert _status_of(_raw(port, _signed_request("deploys", b"x", ts, "sha256=ZZ"))) == 400
    assert _status_of(_raw(port, _signed_request("deploys", b"x", ts, "md5=" + "0" * 64))) == 400
    no_signature = (
        "POST /hooks/deploys HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        f"X-Ceaseless-Timestamp: {ts}\r\nContent-Length: 1\r\n\r\nx"
    ).encode()
    assert _status_of(_raw(port, no_signature)) == 401
    _no_traceback(listener)


@pytest.mark.parametrize("path", ["dep%00loys", "a%2Fb", "x" * 201, "%C3%A9t%C3%A9", "..%2F.."])
def test_a_path_that_cannot_exist_is_not_found(
    ingress: tuple[int, ListenerProcess], path: str
) -> None:
    port, listener = ingress
    ts = str(int(datetime.now(UTC).timestamp()))
    answer = _raw(port, _signed_request(path, b"x", ts, sign(SECRET, int(ts), b"x")))
    assert _status_of(answer) == 404
    _no_traceback(listener)


def test_a_client_that_disconnects_mid_body_leaves_the_ingress_serving(
    ingress: tuple[int, ListenerProcess],
) -> None:
    port, listener = ingress
    ts = str(int(datetime.now(UTC).timestamp()))
    head = (
        "POST /hooks/deploys HTTP/1.1\r\nHost: x\r\n"
        f"X-Ceaseless-Timestamp: {ts}\r\nX-Ceaseless-Signature: {sign(SECRET, int(ts), b'x')}\r\n"
        "Content-Length: 900\r\n\r\n"
    ).encode()
    for _ in range(5):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(head + b"only part of it")
    assert _post(port, "deploys", b"after")[0] == 202
    _no_traceback(listener)


def test_slow_clients_are_cut_off_after_the_read_timeout(
    routine: UUID, start_listener: Callable[..., ListenerProcess]
) -> None:
    with _listening(start_listener, "--http-read-timeout", "1") as (port, listener):
        ts = str(int(datetime.now(UTC).timestamp()))
        # Headers never finished: the connection is closed, nothing answered.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"POST /hooks/deploys HTTP/1.1\r\nHost: x\r\n")
            started = time.monotonic()
            assert sock.recv(100) == b""
            assert time.monotonic() - started < 8
        # A body that never finishes arriving: 408.
        head = (
            "POST /hooks/deploys HTTP/1.1\r\nHost: x\r\n"
            f"X-Ceaseless-Timestamp: {ts}\r\nX-Ceaseless-Signature: {'sha256=' + '0' * 64}\r\n"
            "Content-Length: 500\r\n\r\n"
        ).encode()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(head + b"a little")
            assert sock.recv(100).startswith(b"HTTP/1.1 408")
        _no_traceback(listener)


def test_requests_over_the_cap_are_answered_503_at_once(
    routine: UUID, start_listener: Callable[..., ListenerProcess]
) -> None:
    with _listening(start_listener, "--http-max-requests", "3") as (port, listener):
        ts = str(int(datetime.now(UTC).timestamp()))
        head = (
            "POST /hooks/deploys HTTP/1.1\r\nHost: x\r\n"
            f"X-Ceaseless-Timestamp: {ts}\r\nX-Ceaseless-Signature: {'sha256=' + '0' * 64}\r\n"
            "Content-Length: 500\r\n\r\n"
        ).encode()
        held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(3)]
        try:
            for sock in held:
                sock.sendall(head)
            time.sleep(0.5)  # let the server take all three in hand
            assert _post(port, "deploys", b"x")[0] == 503
        finally:
            for sock in held:
                sock.close()
        wait_until(lambda: _post(port, "deploys", b"y")[0] == 202, 10, "never served again")
        _no_traceback(listener)
