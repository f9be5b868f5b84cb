"""A webhook flood while agents run: leases keep being extended and valid senders are served.

The ingress has a pool, a cap and read timeouts of its own; this shows they
are enough. 500 hostile requests (headers that never end, bodies that never
end, bodies far over the limit, forged signatures) arrive while 20 agents run on 2-second leases.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from datetime import UTC, datetime

import psycopg
import pytest

from tests.e2e.support import ListenerProcess, wait_until
from tests.e2e.test_webhook_ingress import SECRET, _free_port, _post
from tests.factories import make_agent, make_routine
from tests.webhook_signing import sign

pytestmark = pytest.mark.slow

AGENTS = 20
HOSTILE = 500


def _hostile(port: int, kind: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    ts = int(datetime.now(UTC).timestamp())
    head = (
        "POST /hooks/deploys HTTP/1.1\r\nHost: x\r\n"
        f"X-Ceaseless-Timestamp: {ts}\r\nX-Ceaseless-Signature: {sign(SECRET, ts, b'x')}\r\n"
    )
    if kind == 0:  # headers that never end
        sock.sendall(head.encode())
    elif kind == 1:  # a body that never ends
        sock.sendall(f"{head}Content-Length: 900\r\n\r\npart of it".encode())
    elif kind == 2:  # far over the limit
        sock.sendall(f"{head}Content-Length: 50000000\r\n\r\n".encode() + b"x" * 65536)
    else:  # complete, well formed, and forged: each costs a database round trip
        sock.sendall(f"{head}Content-Length: 1\r\n\r\ny".encode())
    return sock


def test_a_flood_of_slow_and_oversized_webhooks_kills_no_agent_and_blocks_no_sender(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    sleeper = make_agent(
        conn,
        "sleeper",
        "command",
        ["sh", "-c", "cat >/dev/null; sleep 8; echo done"],
        max_concurrent=AGENTS,
    )
    echo = make_agent(conn, "echo", "command", ["cat"], max_concurrent=50)
    make_routine(
        conn,
        "hook",
        "webhook",
        {"path": "deploys", "secret": SECRET},
        agent=echo,
        max_concurrent=50,
    )
    port = _free_port()
    listener = start_listener(
        "--poll-interval",
        "60",
        "--lease-secs",
        "2",
        "--concurrency",
        "100",
        "--http",
        f"127.0.0.1:{port}",
        "--max-body",
        "1000",
        "--http-read-timeout",
        "5",
    )
    listener.wait_for_event("http.listening")
    conn.execute(
        "insert into ceaseless.job (kind, agent, prompt) "
        "select 'task', %s, 'sleep ' || g from generate_series(1, %s) g",
        (sleeper, AGENTS),
    )
    wait_until(
        lambda: (
            conn.execute(
                "select count(*) from ceaseless.job where agent = %s and state = 'running'",
                (sleeper,),
            ).fetchone()
            == (AGENTS,)
        ),
        15,
        "the agents never all started",
    )

    hostile = [_hostile(port, i % 4) for i in range(HOSTILE)]
    try:
        served = [_post(port, "deploys", f"valid {i}".encode())[0] for i in range(20)]
    finally:
        for sock in hostile:
            sock.close()
    assert served == [202] * 20

    wait_until(
        lambda: (
            conn.execute(
                "select count(*) from ceaseless.job where agent = %s and state = 'delivered'",
                (sleeper,),
            ).fetchone()
            == (AGENTS,)
        ),
        60,
        lambda: f"not every agent finished: {listener.lines[-10:]}",
    )
    # Each job ran once, on its first attempt: no lease ran out, no agent was killed.
    rows = conn.execute(
        "select j.attempts, count(r.id) from ceaseless.job j "
        "join ceaseless.agent_run r on r.job_id = j.id where j.agent = %s "
        "group by j.id, j.attempts",
        (sleeper,),
    ).fetchall()
    assert rows == [(1, 1)] * AGENTS
    assert not listener.events("job.no_longer_held")
    assert not listener.events("lease.renewal_failed")
