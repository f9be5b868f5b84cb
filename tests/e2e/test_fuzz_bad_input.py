"""10,000 generated bad inputs: routines, jobs, events and webhooks.

Each input is a valid one with one or two things broken: a wrong JSON type, a
missing or extra key, a huge or blank or strange string, an out-of-range
number. What must hold, on every server the suite runs on:

- no internal error (SQLSTATE XX000) and no error outside the classes a bad
  input may cause (data exceptions, integrity violations, our CE codes);
- no half-valid row: every row the database accepted is one the listener can
  use (its configuration re-validates, its cron schedule computes, its
  pattern compiles, its job can be claimed);
- the listener serving the webhook ingress answers every request with a
  status below 500 (503 only when it sheds load) and never crashes.
"""

from __future__ import annotations

import json
import random
import re
import socket
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from croniter import croniter

from tests.e2e.support import ListenerProcess
from tests.factories import make_agent
from tests.webhook_signing import sign

pytestmark = pytest.mark.slow

SEED = 20261201
INPUTS = {"routine": 4000, "job": 2500, "event": 2000, "webhook_sql": 1000, "webhook_http": 500}
# Classes a refusal of bad input may use: data exceptions, integrity
# violations, our own codes, and a privilege or a missing function (a
# misspelt column in a generated input is the caller's error, not ours).
ALLOWED_CLASSES = ("22", "23", "CE")
SECRET = "fuzz-secret-0123456789"

_STRANGE = [
    "",
    " ",
    "\u00a0\u2003",
    "x" * 70_000,
    "é" * 5_000,
    "\\1",
    "(a*)*$",
    "[",
    "*/5 * * * *",
    "61 25 32 13 8",
    "@reboot",
    "0 0 30 2 *",
    ",".join(str(i % 60) for i in range(50_000)),
    "Europe/Nowhere",
    "../../etc/shadow",
    "/etc/passwd",
    "ROUTINE_OK",
    "Claude AI usage limit reached|253402300799",
    "--dangerously-skip-permissions",
    "💥" * 100,
    "\x7f\x1b[31m",
    "0" * 400,
    "-1",
    "9" * 30,
]
_VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    2**31,
    2**63 - 1,
    1.5,
    float("1e308"),
    [],
    {},
    [1, "a", None],
    {"nested": {"deep": [1, 2, {"x": None}]}},
    *_STRANGE,
]


def _strange(rng: random.Random) -> Any:
    return rng.choice(_VALUES)


def _mutate(rng: random.Random, obj: dict[str, Any]) -> dict[str, Any]:
    """A copy of obj with one or two keys broken, dropped or added."""
    out = dict(obj)
    for _ in range(rng.randint(1, 2)):
        action = rng.random()
        if action < 0.6 and out:
            out[rng.choice(sorted(out))] = _strange(rng)
        elif action < 0.8 and out:
            out.pop(rng.choice(sorted(out)))
        else:
            out[rng.choice(["extra", "secret", "pattern", "schedule", "path", "channel"])] = (
                _strange(rng)
            )
    return out


_TRIGGERS: dict[str, dict[str, Any]] = {
    "cron": {"schedule": "*/5 * * * *", "timezone": "UTC"},
    "event": {"pattern": "deploy (done|failed)", "channel": "ci"},
    "webhook": {"path": "hook", "secret": SECRET},
    "manual": {},
}
_ACTIONS: dict[str, dict[str, Any]] = {
    "lightweight": {"prompt": "check", "context_paths": ["notes.md"], "max_tokens": 1000},
    "full_job": {"title": "t", "description": "d", "max_iterations": 5},
}


def _routine_input(rng: random.Random, n: int) -> tuple[str, list[Any]]:
    trigger_type = rng.choice([*_TRIGGERS, "sometimes", None])
    action_type = rng.choice([*_ACTIONS, "nothing"])
    trigger = _TRIGGERS.get(trigger_type or "", {"schedule": "* * * * *"})
    if trigger_type == "webhook":
        trigger = {**trigger, "path": f"hook-{n}"}
    action = _ACTIONS.get(action_type, {"prompt": "x"})
    columns: dict[str, Any] = {
        "name": f"r{n}",
        "user_id": "fuzz",
        "trigger_type": trigger_type,
        "trigger_config": _mutate(rng, trigger) if rng.random() < 0.8 else trigger,
        "action_type": action_type,
        "action_config": _mutate(rng, action) if rng.random() < 0.8 else action,
        "agent": "noop",
        "cooldown_secs": 0,
    }
    if rng.random() < 0.3:
        key = rng.choice(
            ["name", "user_id", "agent", "cooldown_secs", "max_concurrent", "dedup_window_secs"]
        )
        columns[key] = _strange(rng)
    return _insert_sql("routines", columns)


def _job_input(rng: random.Random, n: int) -> tuple[str, list[Any]]:
    columns: dict[str, Any] = {
        "kind": "task",
        "agent": "noop",
        "prompt": f"job {n}",
        "payload": {"context_paths": ["a.md"]},
    }
    for _ in range(rng.randint(1, 2)):
        key = rng.choice(
            [
                "kind",
                "agent",
                "prompt",
                "payload",
                "max_attempts",
                "max_turns",
                "dedup_key",
                "resume_session_id",
                "state",
                "attempts",
                "forge",
                "number",
                "run_after",
            ]
        )
        columns[key] = _strange(rng)
    return _insert_sql("job", columns)


def _event_input(rng: random.Random, n: int) -> tuple[str, list[Any]]:
    columns: dict[str, Any] = {
        "user_id": "fuzz",
        "channel": "ci",
        "content": f"deploy done {n}",
        "payload": {},
    }
    for _ in range(rng.randint(1, 2)):
        columns[rng.choice(sorted(columns))] = _strange(rng)
    return _insert_sql("events", columns)


def _as_text(value: Any) -> str | None:
    if value is None:
        return None
    return str(value).lower() if isinstance(value, bool) else str(value)


def _insert_sql(table: str, columns: dict[str, Any]) -> tuple[str, list[Any]]:
    names = ", ".join(columns)
    marks = ", ".join(["%s"] * len(columns))
    # JSON columns get JSON; every other value goes as untyped text, as psql
    # would send it, so the server (not the driver) decides what it means.
    values = [
        json.dumps(v)
        if isinstance(v, (dict, list)) or k.endswith("config") or k == "payload"
        else _as_text(v)
        for k, v in columns.items()
    ]
    return f"insert into ceaseless.{table} ({names}) values ({marks})", values


def _webhook_input(rng: random.Random) -> tuple[str, bytes, str, datetime]:
    now = datetime.now(UTC).replace(microsecond=0)
    token = rng.choice(["hook-ok", "nowhere", "", "x" * 300, "a/b", "hook-ok\n"])
    body = rng.choice([b"{}", b"", b"\xff\xfe\x00", b"x" * 100_000, "é".encode()])
    sent_at = rng.choice([now, now - timedelta(hours=1), now + timedelta(days=400), now])
    signature = rng.choice(
        [
            sign(SECRET, int(sent_at.timestamp()), body),
            sign("another-secret-xxxxxx", int(sent_at.timestamp()), body),
            "sha256=" + "0" * 64,
            "",
            "sha256=" + "G" * 64,
            "x" * 5_000,
        ]
    )
    return token, body, signature, sent_at


def _refusal_is_clean(error: psycopg.Error, what: str) -> None:
    state = error.sqlstate or ""
    assert state != "XX000", f"internal error on {what}: {error}"
    assert state.startswith(ALLOWED_CLASSES), f"{state} on {what}: {error}"


def _fuzz(
    conn: psycopg.Connection,
    count: int,
    make: Callable[[random.Random, int], tuple[str, list[Any]]],
    rng: random.Random,
) -> int:
    accepted = 0
    for n in range(count):
        query, params = make(rng, n)
        try:
            with conn.transaction():
                conn.execute(query, params)
            accepted += 1
        except psycopg.Error as error:
            _refusal_is_clean(error, f"{query} {str(params)[:300]}")
    return accepted


@pytest.fixture
def fuzz_db(conn: psycopg.Connection) -> psycopg.Connection:
    make_agent(conn, max_concurrent=10_000)
    conn.execute(
        "insert into ceaseless.routines (name, user_id, trigger_type, trigger_config, "
        "action_type, action_config, agent) values ('ok', 'fuzz', 'webhook', %s, "
        "'lightweight', '{\"prompt\": \"p\"}', 'noop')",
        (json.dumps({"path": "hook-ok", "secret": SECRET}),),
    )
    # Generated inputs may be large: keep any one of them from holding the test.
    conn.execute("set statement_timeout = '10s'")
    conn.commit()
    return conn


def test_ten_thousand_bad_inputs_leave_no_half_valid_row_and_no_internal_error(
    fuzz_db: psycopg.Connection,
) -> None:
    conn = fuzz_db
    rng = random.Random(SEED)
    _fuzz(conn, INPUTS["routine"], _routine_input, rng)
    _fuzz(conn, INPUTS["job"], _job_input, rng)
    _fuzz(conn, INPUTS["event"], _event_input, rng)
    for _ in range(INPUTS["webhook_sql"]):
        token, body, signature, sent_at = _webhook_input(rng)
        try:
            with conn.transaction():
                conn.execute(
                    "select * from ceaseless._receive_webhook(%s, %s, %s, %s)",
                    (token, body, signature, sent_at),
                )
        except psycopg.Error as error:
            _refusal_is_clean(error, f"webhook {token[:50]!r}")
    _assert_every_accepted_row_is_usable(conn)


def _assert_every_accepted_row_is_usable(conn: psycopg.Connection) -> None:
    # Re-validation: the triggers accept every stored routine again unchanged.
    conn.execute("update ceaseless.routines set trigger_config = trigger_config")
    now = datetime.now(UTC)
    for schedule, zone in conn.execute(
        "select trigger_config ->> 'schedule', trigger_config ->> 'timezone' "
        "from ceaseless.routines where trigger_type = 'cron'"
    ).fetchall():
        assert zone
        croniter(schedule, now, second_at_beginning=False).get_next(datetime)
    # Every stored pattern compiles, and matching is bounded.
    conn.execute("set local statement_timeout = '5s'")
    conn.execute(
        "select count(*) from ceaseless.routines "
        "where trigger_type = 'event' "
        "and repeat('deploy done ', 50) ~ (trigger_config ->> 'pattern')"
    )
    webhooks = conn.execute(
        "select count(*) from ceaseless.routines where trigger_type = 'webhook' and "
        "(trigger_config ->> 'path' is null or length(trigger_config ->> 'secret') < 16)"
    ).fetchone()
    assert webhooks == (0,)
    jobs = conn.execute(
        "select count(*) from ceaseless.job where state = 'pending' and "
        "(agent is null or prompt is null or not exists "
        " (select from ceaseless.agents a where a.name = job.agent))"
    ).fetchone()
    assert jobs == (0,)
    conn.commit()
    # And every pending job can be claimed.
    pending = conn.execute(
        "select count(*) from ceaseless.job where state = 'pending' and run_after <= now()"
    ).fetchone()
    claimed = conn.execute("select count(*) from ceaseless.claim_jobs('fuzz', 100000)").fetchone()
    assert pending is not None and claimed == pending


@pytest.fixture
def ingress(
    fuzz_db: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> Iterator[tuple[int, ListenerProcess]]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    listener = start_listener(
        "--poll-interval", "60", "--http", f"127.0.0.1:{port}", "--http-read-timeout", "2"
    )
    listener.wait_for_event("http.listening")
    yield port, listener


def _raw_request(rng: random.Random) -> bytes:
    token, body, signature, sent_at = _webhook_input(rng)
    ts = rng.choice([str(int(sent_at.timestamp())), "²", "9" * 5000, "-1", "", "1e9"])
    path = rng.choice([token or "x", "%00", "a%2Fb", "..%2F", "%ZZ", "é", "hook-ok?x=1"])
    headers = [
        f"X-Ceaseless-Timestamp: {ts}",
        f"X-Ceaseless-Signature: {signature}",
        rng.choice(
            [
                f"Content-Length: {len(body)}",
                "Transfer-Encoding: chunked",
                "Content-Length: -1",
                "Content-Length: 99999999999",
            ]
        ),
    ]
    rng.shuffle(headers)
    if "chunked" in headers[-1] or any("chunked" in h for h in headers):
        payload = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    else:
        payload = body
    head = f"POST /hooks/{path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + "\r\n".join(headers)
    return head.encode("utf-8", "surrogateescape") + b"\r\n\r\n" + payload


def _read_answer(sock: socket.socket) -> bytes:
    """One HTTP answer: its head and as much body as it announces, or up to the close.

    Read by length rather than to the close: after an early answer to a
    request whose announced body never came, aiohttp lingers a second
    draining it before closing.
    """
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(65536)
        if not chunk:
            return answer
        answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    while length and len(body) < int(length.group(1)):
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def _status_of(answer: bytes) -> int:
    assert re.match(rb"HTTP/1\.[01] ", answer), f"no answer: {answer[:80]!r}"
    return int(answer.split(b" ", 2)[1])


def test_five_hundred_bad_webhook_requests_never_crash_the_listener(
    ingress: tuple[int, ListenerProcess],
) -> None:
    port, listener = ingress
    rng = random.Random(SEED + 1)
    statuses: list[int] = []
    for _ in range(INPUTS["webhook_http"]):
        with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
            sock.sendall(_raw_request(rng))
            # Not shut down for writing: aiohttp closes a half-closed
            # connection at once, dropping the answer it was writing.
            statuses.append(_status_of(_read_answer(sock)))
    assert len(statuses) == INPUTS["webhook_http"]
    assert all(status < 500 or status == 503 for status in statuses), sorted(set(statuses))
    assert listener.proc.poll() is None, "the listener died"
    raw = [line["line"] for line in listener.lines if line.get("event") == "raw"]
    assert not [line for line in raw if "Traceback" in line], raw[:20]
