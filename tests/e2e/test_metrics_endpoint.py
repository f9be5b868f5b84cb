"""GET /metrics from a real listener: every series, scraped while 20,000 noop jobs drain.

The page is parsed with prometheus_client's own parser, so what passes here is
what a Prometheus server reads.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from tests.e2e.support import ListenerProcess, wait_until
from tests.factories import make_agent, make_job, make_jobs, make_routine, pause_lane
from tests.sql.loops import loop_row, make_loop
from tests.sql.topology import graph, node
from tests.webhook_signing import sign

SECRET = "a-signing-secret-of-some-length"
JOBS = 20_000

# Every family the issue asks for, by the name a scrape shows it under.
FAMILIES = {
    # queue depth by state and lane
    "ceaseless_jobs": "gauge",
    "ceaseless_jobs_due": "gauge",
    # lane live runs against max_concurrent and the window budget
    "ceaseless_lane_live_runs": "gauge",
    "ceaseless_lane_max_concurrent": "gauge",
    "ceaseless_lane_window_started_runs": "gauge",
    "ceaseless_lane_window_budget": "gauge",
    "ceaseless_lane_paused": "gauge",
    # run duration histograms and outcome counts per agent
    "ceaseless_agent_run_duration_seconds": "histogram",
    "ceaseless_agent_runs": "counter",
    # routine fires and skips by reason
    "ceaseless_routine_fires": "counter",
    "ceaseless_routine_skips": "counter",
    # loop iterations
    "ceaseless_loop_iterations": "counter",
    # webhook responses by status
    "ceaseless_webhook_responses": "counter",
    # NOTIFY-to-claim lag
    "ceaseless_notify_to_claim_seconds": "histogram",
    # notification deliveries and failures
    "ceaseless_notifications_delivered": "counter",
    "ceaseless_notifications_failed": "counter",
    # listener reconnects
    "ceaseless_listener_reconnects": "counter",
    "ceaseless_database_up": "gauge",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _scrape(
    port: int, token: str | None = None, host: str | None = None
) -> dict[str, tuple[str, list[Sample]]]:
    """{family: (type, samples)} of one GET /metrics, read by prometheus_client's parser."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    if host is not None:
        request.add_header("Host", host)
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    return {f.name: (f.type, f.samples) for f in text_string_to_metric_families(text)}


def _value(page: dict[str, tuple[str, list[Sample]]], sample: str, **labels: str) -> float:
    # The longest family name the sample starts with: ceaseless_jobs_due, not ceaseless_jobs.
    family = max((name for name in page if sample.startswith(name)), key=len)
    found = [s.value for s in page[family][1] if s.name == sample and s.labels == labels]
    assert len(found) == 1, (sample, labels, page[family][1][:20])
    return found[0]


def _post(port: int, path: str, body: bytes, *, signature: str | None = None) -> int:
    ts = int(time.time())
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/hooks/{path}",
        data=body,
        method="POST",
        headers={
            "X-Ceaseless-Timestamp": str(ts),
            "X-Ceaseless-Signature": signature or sign(SECRET, ts, body),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def _count(conn: psycopg.Connection, query: str, params: tuple[Any, ...] = ()) -> int:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return int(row[0])


def _scenario(conn: psycopg.Connection, port: int, listener: ListenerProcess) -> UUID:
    """A routine fire and a skip, refused webhooks, a loop's iterations, notifications
    delivered and failed, a paused lane and a lost LISTEN: one of every counted thing.
    Returns the webhook routine."""
    routine = make_routine(
        conn, "hook", "webhook", {"path": "deploys", "secret": SECRET}, agent="noop"
    )
    assert _post(port, "deploys", b"fire") == 202
    assert _post(port, "deploys", b"x", signature="sha256=" + "0" * 64) == 401
    assert _post(port, "nowhere", b"x") == 404
    conn.execute(
        "update ceaseless.routines set cooldown_secs = 600, last_run_at = now() where id = %s",
        (routine,),
    )
    assert _post(port, "deploys", b"too soon") == 409

    make_agent(
        conn, "answer", "command", ["sh", "-c", "cat > /dev/null; printf answer"], max_concurrent=5
    )
    loop = make_loop(
        conn,
        g=graph([node("A", "answer")]),
        triggers={"on_completion": True},
        policy={"kind": "iters", "spec": {"n": 2}},
    )
    conn.execute("select ceaseless.run_loop(%s)", (loop,))
    wait_until(lambda: loop_row(conn, loop)["stopped_reason"] is not None, 30, "loop never ended")

    conn.execute(
        "update ceaseless.settings set value = %s where key = 'notification_sinks'",
        (json.dumps({"default": {"type": "pg", "channel": "ops_alerts"}}),),
    )
    conn.execute(
        "insert into ceaseless.notifications (source_table, source_id, kind, channel, subject) "
        "values ('routine_runs', gen_random_uuid(), 'failure', null, 'delivered'), "
        "       ('routine_runs', gen_random_uuid(), 'failure', 'no-such-sink', 'fails')"
    )
    wait_until(
        lambda: (
            _count(conn, "select count(*) from ceaseless.notifications where status = 'pending'")
            == 0
        ),
        30,
        "the outbox never settled",
    )

    make_agent(conn, "resting", window_budget=10)
    pause_lane(conn, "resting", datetime.now(UTC) + timedelta(hours=1))

    killed = _count(
        conn,
        "select count(pg_terminate_backend(pid)) from pg_stat_activity "
        "where application_name = %s and datname = current_database()",
        (f"ceaseless listen {listener.worker_id}",),
    )
    assert killed == 1
    listener.wait_for_event("listen.subscribed", count=2, timeout=30)
    return routine


@pytest.mark.slow
def test_a_scrape_during_a_drain_of_20000_jobs_returns_every_series(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(conn, "noop", max_concurrent=500, window_budget=1_000_000)
    port = _free_port()
    listener = start_listener("--poll-interval", "60", "--http", f"127.0.0.1:{port}")
    token = listener.http_token()
    hook = _scenario(conn, port, listener)

    # Scrape as fast as the page comes while the jobs drain.
    during: list[dict[str, tuple[str, list[Sample]]]] = []
    done = threading.Event()

    def scrape_loop() -> None:
        while not done.is_set():
            during.append(_scrape(port, token))

    scraper = threading.Thread(target=scrape_loop, daemon=True)
    scraper.start()
    wait_until(lambda: len(during) >= 1, 10, "no scrape answered")
    make_jobs(conn, JOBS)
    wait_until(
        lambda: (
            _count(conn, "select count(*) from ceaseless.job where state = 'delivered'") >= JOBS
        ),
        120,
        "the drain never finished",
    )
    done.set()
    scraper.join(timeout=15)

    # Scrapes that saw the queue neither empty nor untouched: mid-drain.
    mid = [
        page
        for page in during
        if 0 < _value(page, "ceaseless_jobs", lane="noop", state="pending") < JOBS
    ]
    assert mid, f"no scrape landed during the drain ({len(during)} scrapes)"
    for page in mid:
        assert {name: page[name][0] for name in FAMILIES if name in page} == FAMILIES, sorted(
            set(FAMILIES) - set(page)
        )

    page = _scrape(port, token)
    assert _value(page, "ceaseless_database_up") == 1
    assert _value(page, "ceaseless_jobs", lane="noop", state="pending") == 0
    assert _value(page, "ceaseless_agent_runs_total", lane="noop", outcome="succeeded") >= JOBS
    assert _value(page, "ceaseless_agent_run_duration_seconds_count", lane="noop") >= JOBS
    assert _value(page, "ceaseless_routine_fires_total", trigger="webhook") == 1
    refused = {"routine": "hook", "routine_id": str(hook), "trigger": "webhook"}
    assert _value(page, "ceaseless_routine_skips_total", **refused, reason="cooldown") == 1
    assert _value(page, "ceaseless_loop_iterations_total", status="succeeded") == 2
    assert _value(page, "ceaseless_webhook_responses_total", status="202") == 1
    assert _value(page, "ceaseless_webhook_responses_total", status="401") == 1
    assert _value(page, "ceaseless_webhook_responses_total", status="404") == 1
    assert _value(page, "ceaseless_webhook_responses_total", status="409") == 1
    # The routine's and the loop's own notifications are delivered on "default" too.
    assert _value(page, "ceaseless_notifications_delivered_total", channel="default") >= 1
    assert _value(page, "ceaseless_notifications_failed_total", channel="no-such-sink") == 1
    assert _value(page, "ceaseless_lane_paused", lane="resting") == 1
    assert _value(page, "ceaseless_lane_window_budget", lane="resting") == 10
    assert _value(page, "ceaseless_listener_reconnects_total") == 1
    assert _value(page, "ceaseless_notify_to_claim_seconds_count") >= 1


def test_metrics_off_loopback_need_the_token(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(conn)
    port = _free_port()
    listener = start_listener(
        "--poll-interval", "60", "--http", f"0.0.0.0:{port}", "--http-token", "s3cret"
    )
    listener.wait_for_event("http.listening")
    try:
        _scrape(port)
        raise AssertionError("an unauthenticated scrape was served")
    except urllib.error.HTTPError as error:
        assert error.code == 401
    try:
        _scrape(port, token="wrong")
        raise AssertionError("a wrong token was accepted")
    except urllib.error.HTTPError as error:
        assert error.code == 401
    assert "ceaseless_jobs" in _scrape(port, token="s3cret")


def test_metrics_on_loopback_need_the_token_and_a_loopback_host(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(conn)
    port = _free_port()
    listener = start_listener("--poll-interval", "60", "--http", f"127.0.0.1:{port}")
    token = listener.http_token()
    for given, host, status in [
        (None, None, 401),
        ("wrong", None, 401),
        # A page of another site whose name was rebound to 127.0.0.1 (DNS rebinding).
        (token, "evil.example", 421),
        (token, f"evil.example:{port}", 421),
    ]:
        try:
            _scrape(port, given, host)
            raise AssertionError(f"served to token={given is not None} host={host}")
        except urllib.error.HTTPError as error:
            assert error.code == status, (given is not None, host, error.code)
    assert "ceaseless_jobs" in _scrape(port, token)
    assert "ceaseless_jobs" in _scrape(port, token, f"localhost:{port}")


def _page(port: int, token: str) -> str:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=10) as answer:
        return str(answer.read().decode())


def _le(sample: Sample) -> float:
    return float(sample.labels["le"])


def test_a_fresh_page_is_what_prometheus_reads_right(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    """Before much has happened: every counter at 0, every bucket of every histogram in numeric
    order, the lane labelled `lane` everywhere, no `_created` series, blocked jobs and a routine's
    last success served; `promtool check metrics` finds nothing to say when it is installed."""
    make_agent(conn, "noop")
    make_agent(conn, "idle")
    make_job(conn, "idle", state="blocked", finished_at=datetime.now(UTC), attempts=1)
    nightly = make_routine(conn, "nightly", "cron", {"schedule": "0 3 * * *"})
    done = datetime(2026, 1, 2, 3, 5, tzinfo=UTC)
    conn.execute(
        "insert into ceaseless.routine_runs (routine_id, trigger_type, status, completed_at) "
        "values (%s, 'cron', 'ok', %s)",
        (nightly, done),
    )
    port = _free_port()
    listener = start_listener("--poll-interval", "60", "--http", f"127.0.0.1:{port}")
    token = listener.http_token()
    # One run, so the lane's histogram has an observation in one bucket and none below it.
    make_job(conn, "noop")
    wait_until(
        lambda: _count(conn, "select count(*) from ceaseless.job where state = 'delivered'") == 1,
        30,
        "the job never ran",
    )
    conn.execute("select ceaseless._metrics_fold()")

    text = _page(port, token)
    families = list(text_string_to_metric_families(text))
    page = {f.name: (f.type, f.samples) for f in families}

    # No `_created` series, from the process's counters or the database's.
    assert not [s.name for f in families for s in f.samples if s.name.endswith("_created")]
    # A lane is `lane` in every series; `agent` in none.
    assert not [s.name for f in families for s in f.samples if "agent" in s.labels]
    assert {s.labels["lane"] for s in page["ceaseless_agent_runs"][1]} == {"noop", "idle"}

    # Counters at 0 from the start.
    assert _value(page, "ceaseless_agent_runs_total", lane="idle", outcome="failed") == 0
    assert _value(page, "ceaseless_agent_runs_total", lane="noop", outcome="succeeded") == 1
    assert _value(page, "ceaseless_routine_fires_total", trigger="webhook") == 0
    assert _value(page, "ceaseless_loop_iterations_total", status="failed") == 0
    assert _value(page, "ceaseless_notifications_failed_total", channel="default") == 0
    assert _value(page, "ceaseless_webhook_responses_total", status="409") == 0
    refused = {"routine": "nightly", "routine_id": str(nightly), "trigger": "cron"}
    assert _value(page, "ceaseless_routine_skips_total", **refused, reason="cooldown") == 0

    # Histograms: per label set, every bucket, by numeric le, +Inf last and equal to _count.
    for name, (kind, samples) in page.items():
        if kind != "histogram":
            continue
        sets: dict[tuple[tuple[str, str], ...], list[Sample]] = {}
        for s in samples:
            if s.name == f"{name}_bucket":
                base = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
                sets.setdefault(base, []).append(s)
        assert sets, name
        bounds = {tuple(_le(s) for s in buckets) for buckets in sets.values()}
        assert len(bounds) == 1, (name, bounds)  # the same buckets for every label set
        for base, buckets in sets.items():
            les = [_le(s) for s in buckets]
            assert les == sorted(les) and les[-1] == float("inf"), (name, base, les)
            values = [s.value for s in buckets]
            assert values == sorted(values), (name, base, values)
            assert values[-1] == _value(page, f"{name}_count", **dict(base)), (name, base)
    assert _value(page, "ceaseless_agent_run_duration_seconds_bucket", lane="idle", le="+Inf") == 0
    assert _value(page, "ceaseless_agent_run_duration_seconds_bucket", lane="noop", le="+Inf") == 1

    # Blocked jobs, and the last success of each routine that has one.
    assert _value(page, "ceaseless_jobs_blocked", lane="idle") == 1
    assert _value(page, "ceaseless_jobs_blocked", lane="noop") == 0
    assert page["ceaseless_routine_last_success_timestamp_seconds"][0] == "gauge"
    last = "ceaseless_routine_last_success_timestamp_seconds"
    assert _value(page, last, routine="nightly", routine_id=str(nightly)) == done.timestamp()

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0 and not checked.stdout.strip(), checked.stdout + checked.stderr
