"""Webhook signature schemes through the real HTTP ingress (spec 11).

A real listener serves POST /hooks/{path}. GitHub's documented example, requests
signed by the `standardwebhooks` library and Stripe-style headers fire their
routines and loops; tampered (401), stale (401) and replayed (409) requests
are refused per scheme.
"""

from __future__ import annotations

import base64
import json
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from uuid import UUID

import psycopg
import pytest
from standardwebhooks import Webhook

from tests.e2e.support import ROOT, ListenerProcess, wait_routine_run
from tests.factories import make_agent, make_routine
from tests.sql.loops import loop_row, make_loop, runs
from tests.sql.topology import graph, node
from tests.webhook_signing import signed_headers

SCHEMES = ("ceaseless", "github", "standard", "stripe")
GITHUB_SECRET = "It's a Secret to Everybody"
GITHUB_DIGEST = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
SECRETS = {
    "ceaseless": "a-signing-secret-of-some-length",
    "github": GITHUB_SECRET,
    "standard": "whsec_" + base64.b64encode(b"a Standard Webhooks key of 32 b.").decode(),
    "stripe": "whsec_a-stripe-endpoint-secret",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _post(port: int, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/hooks/{path}", data=body, method="POST", headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.fixture
def routines(conn: psycopg.Connection) -> dict[str, UUID]:
    """One webhook routine per scheme, at path hook-<scheme>, run by an agent that echoes."""
    echo = make_agent(conn, "echo", "command", ["cat"], max_concurrent=50)
    return {
        scheme: make_routine(
            conn,
            f"hook-{scheme}",
            "webhook",
            {"path": f"hook-{scheme}", "secret": SECRETS[scheme], "scheme": scheme},
            agent=echo,
            max_concurrent=5,
        )
        for scheme in SCHEMES
    }


@pytest.fixture
def port(
    routines: dict[str, UUID], start_listener: Callable[..., ListenerProcess]
) -> Iterator[int]:
    port = _free_port()
    listener = start_listener("--poll-interval", "60", "--http", f"127.0.0.1:{port}")
    listener.wait_for_event("http.listening")
    yield port
    raw = [line["line"] for line in listener.lines if line.get("event") == "raw"]
    assert not [line for line in raw if "Traceback" in line or "Error handling request" in line]


def test_githubs_documented_example_fires_its_routine(
    conn: psycopg.Connection, routines: dict[str, UUID], port: int
) -> None:
    headers = {
        "X-GitHub-Event": "ping",
        "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        "X-Hub-Signature-256": f"sha256={GITHUB_DIGEST}",
        "Content-Type": "application/json",
    }
    status, answer = _post(port, "hook-github", b"Hello, World!", headers)
    assert status == 202, answer
    state, summary = wait_routine_run(conn, routines["github"])
    assert state == "attention" and "Hello, World!" in summary


def test_a_standardwebhooks_signed_request_fires_its_routine(
    conn: psycopg.Connection, routines: dict[str, UUID], port: int
) -> None:
    body = b'{"type": "user.created", "data": {"id": "u_42"}}'
    msg_id = "msg_p5jXN8AQM9LWM0D4loKWxJek"
    now = datetime.now(UTC)
    headers = {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(SECRETS["standard"]).sign(msg_id, now, body.decode()),
        "Content-Type": "application/json",
    }
    status, answer = _post(port, "hook-standard", body, headers)
    assert status == 202, answer
    state, summary = wait_routine_run(conn, routines["standard"])
    assert state == "attention" and '"id": "u_42"' in summary


@pytest.mark.parametrize("scheme", SCHEMES)
def test_each_scheme_fires_its_routine_and_refuses_tampered_stale_and_replayed_requests(
    conn: psycopg.Connection, routines: dict[str, UUID], port: int, scheme: str
) -> None:
    path, secret = f"hook-{scheme}", SECRETS[scheme]
    body = f'{{"scheme": "{scheme}", "n": 1}}'.encode()
    signed = signed_headers(scheme, secret, body)

    assert _post(port, path, b'{"scheme": "forged"}', signed)[0] == 401  # tampered
    assert _post(port, path, body, signed_headers(scheme, "whsec_" + "B" * 40, body))[0] == 401
    if scheme != "github":  # GitHub signs no time
        stale = signed_headers(scheme, secret, body, at=datetime.now(UTC) - timedelta(minutes=6))
        status, answer = _post(port, path, body, stale)
        assert status == 401 and "from now" in answer

    status, answer = _post(port, path, body, signed)
    assert status == 202, answer
    run = UUID(json.loads(answer)["run_id"])
    status, answer = _post(port, path, body, signed)
    assert status == 409 and "replay" in answer
    if scheme == "github":
        # Resent under a fresh delivery id: the signature is remembered too.
        renamed = {**signed, "X-GitHub-Delivery": "another-delivery"}
        assert _post(port, path, body, renamed)[0] == 409

    state, summary = wait_routine_run(conn, routines[scheme])
    assert state == "attention" and f'"scheme": "{scheme}"' in summary
    rows = conn.execute(
        "select id from ceaseless.routine_runs where routine_id = %s", (routines[scheme],)
    ).fetchall()
    assert rows == [(run,)]


def test_a_signing_header_that_is_not_ascii_is_a_bad_request(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            b"POST /hooks/hook-github HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"X-Hub-Signature-256: sha256=\xff\xfe\r\nX-GitHub-Delivery: d\r\n"
            b"Content-Length: 2\r\n\r\n{}"
        )
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.split(b" ", 2)[1] == b"400"
    assert b"x-hub-signature-256" in answer


def test_a_loop_with_each_scheme_fires_through_the_ingress(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    agent = make_agent(conn, "echo", "command", ["cat"], max_concurrent=50)
    loops = {
        scheme: make_loop(
            conn,
            g=graph([node("A", agent)]),
            triggers={"webhook_enabled": True, "webhook_scheme": scheme},
            task=f"Triage the {scheme} alert.",
        )
        for scheme in SCHEMES
    }
    port = _free_port()
    listener = start_listener("--poll-interval", "60", "--http", f"127.0.0.1:{port}")
    listener.wait_for_event("http.listening")
    for scheme, loop in loops.items():
        hook = loop_row(conn, loop)
        token, key = hook["webhook_token"], hook["webhook_signing_key"]
        body = f'{{"alert": "{scheme}"}}'.encode()
        signed = signed_headers(scheme, key, body)
        assert _post(port, token, b"{}", signed)[0] == 401
        status, answer = _post(port, token, body, signed)
        assert status == 202, (scheme, answer)
        [row] = runs(conn, loop)
        assert str(row["id"]) == json.loads(answer)["run_id"]
        assert row["trigger_type"] == "webhook" and f'"alert": "{scheme}"' in row["task"]
        assert _post(port, token, body, signed)[0] == 409


def _doc_block(fence: str, marker: str) -> str:
    """The block of docs/webhooks.md fenced as `fence` whose first line is `marker`."""
    doc = (ROOT / "docs" / "webhooks.md").read_text()
    for block in re.findall(rf"```{fence}\n(.*?)```", doc, flags=re.S):
        if block.startswith(marker):
            return block
    raise AssertionError(f"docs/webhooks.md has no {fence} block starting {marker!r}")


@pytest.mark.parametrize(
    ("routine", "sender", "language"),
    [
        ("review-pushes", "github delivery", "sh"),
        ("new-users", "standard sender", "python"),
        ("payments", "stripe delivery", "sh"),
    ],
)
def test_the_documented_examples_run_as_written(
    conn: psycopg.Connection,
    start_listener: Callable[..., ListenerProcess],
    routine: str,
    sender: str,
    language: str,
) -> None:
    make_agent(conn, "noop")
    scheme = sender.split()[0]
    conn.execute(_doc_block("sql", f"-- Example: {scheme} routine"))
    port = _free_port()
    listener = start_listener("--poll-interval", "60", "--http", f"127.0.0.1:{port}")
    listener.wait_for_event("http.listening")
    script = _doc_block(language, f"# Example: {sender}").replace(
        "127.0.0.1:8787", f"127.0.0.1:{port}"
    )
    command = ["bash", "-euo", "pipefail", "-c", script]
    if language == "python":
        command = [sys.executable, "-c", script]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    if language == "sh":
        assert done.stdout.startswith("HTTP/1.1 202"), done.stdout + done.stderr
    row = conn.execute(
        "select r.trigger_type from ceaseless.routine_runs r "
        "join ceaseless.routines t on t.id = r.routine_id where t.name = %s",
        (routine,),
    ).fetchone()
    assert row == ("webhook",)
