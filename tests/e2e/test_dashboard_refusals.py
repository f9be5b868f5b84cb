"""What a flood of refused requests costs the log: a count per interval, not a line each.

A real listener is sent thousands of requests it must refuse (no token, a rebound
Host, a bad webhook signature, malformed HTTP); its log stays a handful of lines,
each kind logged at once the first time, and malformed HTTP is a warning, not an error.
"""

from __future__ import annotations

import http.client
import socket
import time
from collections.abc import Callable

import psycopg
import pytest

from tests.e2e.support import ListenerProcess, wait_until
from tests.factories import make_agent, make_routine

REQUESTS_PER_KIND = 1500
MALFORMED = 200


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _flood(port: int, method: str, path: str, headers: dict[str, str], count: int) -> set[int]:
    """`count` requests on one keep-alive connection; the statuses answered."""
    seen: set[int] = set()
    client = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    body = b"x" if method == "POST" else None
    for _ in range(count):
        client.request(method, path, body=body, headers=headers)
        answer = client.getresponse()
        answer.read()
        seen.add(answer.status)
        if answer.will_close:
            client.close()
            client = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    client.close()
    return seen


@pytest.mark.slow
def test_a_flood_of_refused_requests_writes_a_bounded_log(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(conn)
    make_routine(conn, "hook", "webhook", {"path": "deploys", "secret": "s" * 32}, agent="noop")
    port = _free_port()
    listener = start_listener("--poll-interval", "60", "--http", f"127.0.0.1:{port}")
    listener.wait_for_event("http.listening")
    before = len(listener.lines)
    began = time.monotonic()
    bad_signature = {
        "X-Ceaseless-Timestamp": str(int(time.time())),
        "X-Ceaseless-Signature": "sha256=" + "0" * 64,
    }
    floods = [
        ("GET", "/metrics", {}, {401}),
        ("GET", "/approvals", {"Accept": "application/json"}, {401}),
        (
            "GET",
            "/runs/00000000-0000-0000-0000-000000000000/events",
            {"Host": "evil.example"},
            {421},
        ),
        ("POST", "/hooks/deploys", bad_signature, {401}),
    ]
    for method, path, headers, statuses in floods:
        assert _flood(port, method, path, headers, REQUESTS_PER_KIND) == statuses, path
    for _ in range(MALFORMED):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            raw.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n")
            assert raw.recv(100).split(b" ")[1] == b"400"
    took = time.monotonic() - began
    # Every kind was logged the first time it came, at once.
    wait_until(lambda: len(listener.events("http.bad_request")) >= 1, 10)
    written = listener.lines[before:]
    kinds = {(line["event"], line.get("reason"), line.get("status")) for line in written}
    assert ("http.refused", "token", 401) in kinds
    assert ("http.refused", "host", 421) in kinds
    assert ("webhook.refused", None, 401) in kinds
    # Two lines per kind and interval at most: the first, and the count after it.
    intervals = int(took // 10) + 2
    assert len(written) <= 2 * 5 * intervals, [line["event"] for line in written][:50]
    assert len(written) < 60
    bad = listener.events("http.bad_request")
    assert bad and {line["level"] for line in bad} == {"warning"}
    assert not [line for line in written if line.get("level") == "error"]
    assert [line for line in written if line.get("event") == "raw"] == []

    def counted(event: str, **key: object) -> int:
        lines = [
            line for line in listener.events(event) if all(line.get(k) == v for k, v in key.items())
        ]
        return sum(int(line.get("repeated", 1)) for line in lines)

    # Nothing is lost: once the interval ends, the counts add up to every request.
    wait_until(
        lambda: counted("http.refused", reason="token") == 2 * REQUESTS_PER_KIND,
        15,
        lambda: f"counted {counted('http.refused', reason='token')}",
    )
    wait_until(lambda: counted("http.refused", reason="host") == REQUESTS_PER_KIND, 15)
    wait_until(lambda: counted("webhook.refused", status=401) == REQUESTS_PER_KIND, 15)
    wait_until(lambda: counted("http.bad_request") == MALFORMED, 15)
