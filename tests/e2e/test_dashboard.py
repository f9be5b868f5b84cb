"""The dashboard in a real headless Chromium, served by a real listener.

Playwright drives a Chromium: CEASELESS_CHROMIUM when set, else the system's (Debian's
`chromium`, which .ci/run installs, or one on PATH), else Playwright's own, downloaded once
with `playwright install chromium` when missing (as the tests fetch GitHub's API description),
so the README's test command needs nothing but Python. Every page loads with its data and
without a console error, an approval decided from a run's page lets the run finish while its
nodes turn green over SSE with no reload, and forged posts decide nothing. Every browser
signs in first, on loopback too, with the sign-in URL the listener logs; a local client
without the token (what an agent that reached 127.0.0.1 would be) reads and decides nothing.

With CEASELESS_DASHBOARD_SCREENSHOTS=DIR the page test saves a screenshot of
each page there (docs/dashboard/ holds the ones in the docs).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID

import psycopg
import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, expect, sync_playwright

from tests.e2e.support import ListenerProcess, wait_until
from tests.factories import make_agent, make_job, make_routine, pause_lane
from tests.sql.loops import make_loop
from tests.sql.topology import graph, node, run_row, start_run

_SYSTEM_CHROMIUMS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
USER = "dana"
# A command agent that takes a moment, so a test sees nodes run.
_AGENT = 'cat > /dev/null; sleep 0.3; printf "all done"'


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _system_chromium() -> str | None:
    given = os.environ.get("CEASELESS_CHROMIUM")
    if given:
        assert Path(given).exists(), f"CEASELESS_CHROMIUM={given} does not exist"
        return given
    for name in _SYSTEM_CHROMIUMS:
        if found := shutil.which(name):
            return found
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = _system_chromium()
    with sync_playwright() as p:
        if executable is None and not Path(p.chromium.executable_path).exists():
            # No system browser: Playwright's own, fetched once into its cache.
            fetched = subprocess.run(
                [sys.executable, "-m", "playwright", "install", "chromium"],
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert fetched.returncode == 0, (
                "no Chromium here and `playwright install chromium` failed (install Debian's "
                f"chromium, or set CEASELESS_CHROMIUM): {fetched.stderr[-500:]}"
            )
        chromium = p.chromium.launch(executable_path=executable, headless=True)
        yield chromium
        chromium.close()


class Console:
    """Every console error and uncaught exception of a page."""

    def __init__(self, page: Page) -> None:
        self.errors: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(f"{message.text} at {message.location}")


@contextmanager
def _page(
    browser: Browser, listener: ListenerProcess | None = None
) -> Iterator[tuple[Page, Console]]:
    """A fresh browser; signed in with `listener`'s logged sign-in URL when given."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    console = Console(page)
    if listener is not None:
        page.goto(listener.events("http.listening")[0]["sign_in"])
        expect(page).to_have_url(re.compile(r"/$"))
    try:
        yield page, console
    finally:
        context.close()


@contextmanager
def _served(
    start_listener: Callable[..., ListenerProcess], *options: str, host: str = "127.0.0.1"
) -> Iterator[tuple[str, ListenerProcess]]:
    port = _free_port()
    listener = start_listener(
        "--poll-interval", "60", "--http", f"{host}:{port}", "--dashboard-user", USER, *options
    )
    listener.wait_for_event("http.listening")
    yield f"http://127.0.0.1:{port}", listener


@pytest.fixture
def echo(conn: psycopg.Connection) -> str:
    return make_agent(conn, "echo", "command", ["sh", "-c", _AGENT], max_concurrent=4)


def _gated_run(conn: psycopg.Connection) -> UUID:
    return start_run(
        conn,
        graph(
            [node("plan", "echo"), node("review", "echo", gate="approval"), node("ship", "echo")],
            [("plan", "review"), ("review", "ship")],
        ),
        task="release 1.4",
    )


def _awaiting(conn: psycopg.Connection, run: UUID) -> None:
    wait_until(lambda: run_row(conn, run)["status"] == "awaiting_approval", 30)


def _no_traceback(listener: ListenerProcess) -> None:
    raw = [line["line"] for line in listener.lines if line.get("event") == "raw"]
    assert not [line for line in raw if "Traceback" in line or "Error handling request" in line]


def _shot(page: Page, name: str) -> None:
    target = os.environ.get("CEASELESS_DASHBOARD_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(target) / f"{name}.png"), full_page=True)


def test_every_page_loads_with_its_data_and_no_console_error(
    conn: psycopg.Connection,
    echo: str,
    browser: Browser,
    start_listener: Callable[..., ListenerProcess],
) -> None:
    make_agent(conn, "claude", "command", ["cat"], max_concurrent=2, window_budget=40)
    conn.execute("update ceaseless.agents set enabled = false where name = 'claude'")
    make_agent(conn, "opencode", "command", ["cat"], max_concurrent=3)
    pause_lane(conn, "opencode", datetime.now(UTC) + timedelta(minutes=42), "rate limit")
    delivered = make_job(conn, "echo", prompt="Summarise yesterday's failing CI runs.")
    make_routine(
        conn,
        "nightly-triage",
        "cron",
        {"schedule": "0 3 * * *", "timezone": "Europe/Berlin"},
        agent="echo",
    )
    make_routine(
        conn, "weekly-deps", "cron", {"schedule": "0 9 * * 1", "timezone": "UTC"}, agent="echo"
    )
    loop = make_loop(
        conn,
        title="docs gardener",
        triggers={"cron": "*/30 * * * *", "on_completion": False},
        policy={"kind": "iters", "spec": {"n": 5}},
        g=graph([node("A", "echo")]),
    )
    with _served(start_listener) as (base, listener):
        wait_until(
            lambda: (
                conn.execute(
                    "select state from ceaseless.job where id = %s", (delivered,)
                ).fetchone()[0]
                == "delivered"
            ),
            30,
        )
        # Two iterations of the loop, the second chained to the first.
        for _ in range(2):
            conn.execute("select ceaseless.run_loop(%s)", (loop,))
            wait_until(
                lambda: conn.execute(
                    "select live_run_id is null from ceaseless.loop_status where id = %s", (loop,)
                ).fetchone()[0],
                30,
            )
        run = _gated_run(conn)
        _awaiting(conn, run)
        # A routine fire refused by its guardrail: a skip with its reason.
        conn.execute("update ceaseless.routines set enabled = false where name = 'nightly-triage'")
        routine = conn.execute(
            "select id from ceaseless.routines where name = 'nightly-triage'"
        ).fetchone()[0]
        conn.execute(
            "insert into ceaseless.routine_runs (routine_id, trigger_type, status, skip_reason, "
            "completed_at) values (%s, 'cron', 'skipped', 'disabled', now())",
            (routine,),
        )
        make_job(conn, "claude", prompt="waits: its lane is disabled")

        pages: list[tuple[str, str, list[str]]] = [
            ("queue", "/", ["Summarise yesterday", "delivered", "waits: its lane is disabled"]),
            ("queue-filtered", "/?state=pending&lane=claude&kind=task", ["waits: its lane"]),
            ("lanes", "/lanes", ["echo", "claude", "0 / 4", "rate limit"]),
            (
                "routines",
                "/routines",
                ["nightly-triage", "0 3 * * *", "disabled: 1", "weekly-deps"],
            ),
            ("loops", "/loops", ["docs gardener", "*/30 * * * *"]),
            ("loop", f"/loops/{loop}", ["#1", "#2", "Iteration chain"]),
            ("runs", "/runs", ["release 1.4", "awaiting_approval"]),
            ("run", f"/runs/{run}", ["plan", "review", "ship", "awaits approval"]),
            ("approvals", "/approvals", ["review", "Approve", "Reject"]),
            ("job", f"/jobs/{delivered}", ["Final message", "all done", "succeeded"]),
        ]
        with _page(browser, listener) as (page, console):
            for name, path, texts in pages:
                response = page.goto(base + path)
                assert response is not None and response.status == 200, (path, response)
                for text in texts:
                    expect(page.locator("main")).to_contain_text(text)
                if name == "queue-filtered":
                    assert page.locator("#jobs tr[data-job]").count() == 1
                if name == "run":
                    expect(page.locator("#live")).to_have_text("live")
                    node_b = page.locator('#graph g.node[data-node="review"]')
                    expect(node_b).to_have_class(re.compile(r"state-awaiting_approval"))
                _shot(page, name)
            assert console.errors == []
    _no_traceback(listener)


def test_approving_a_gated_node_from_the_page_turns_the_nodes_green_without_a_reload(
    conn: psycopg.Connection,
    echo: str,
    browser: Browser,
    start_listener: Callable[..., ListenerProcess],
) -> None:
    with _served(start_listener) as (base, listener):
        run = _gated_run(conn)
        with _page(browser, listener) as (page, console):
            page.goto(f"{base}/runs/{run}")
            expect(page.locator("#live")).to_have_text("live")
            # The gate arrives over SSE: the page was loaded before it.
            review = page.locator('#graph g.node[data-node="review"]')
            expect(review).to_have_class(re.compile(r"state-awaiting_approval"), timeout=30_000)
            page.evaluate("window.__notReloaded = true")
            gate = page.locator('#run-approvals .gate[data-node="review"]')
            gate.locator('input[name="note"]').fill("looks right")
            gate.locator("button.approve").click()
            for name in ("plan", "review", "ship"):
                expect(page.locator(f'#graph g.node[data-node="{name}"]')).to_have_class(
                    re.compile(r"state-succeeded"), timeout=30_000
                )
            expect(page.locator("#run-status")).to_have_text("succeeded")
            expect(page.locator("#live")).to_have_text("finished: succeeded")
            expect(page.locator("#run-approvals .gate")).to_have_count(0)
            assert page.evaluate("window.__notReloaded") is True
            assert console.errors == []
    decided = conn.execute(
        "select a.decision, a.decided_by, a.note from ceaseless.approvals a "
        "where a.topology_run_id = %s",
        (run,),
    ).fetchone()
    assert decided == ("approved", f"dashboard:{USER}", "looks right")
    audited = conn.execute(
        "select detail ->> 'decided_by' from ceaseless.audit_log "
        "where entity = 'approval' and new_state = 'approved' "
        "and entity_id = (select id from ceaseless.approvals where topology_run_id = %s)",
        (run,),
    ).fetchone()
    assert audited == (f"dashboard:{USER}",)
    _no_traceback(listener)


def test_rejecting_from_the_approvals_page_fails_the_run(
    conn: psycopg.Connection,
    echo: str,
    browser: Browser,
    start_listener: Callable[..., ListenerProcess],
) -> None:
    with _served(start_listener) as (base, listener):
        run = _gated_run(conn)
        _awaiting(conn, run)
        with _page(browser, listener) as (page, console):
            page.goto(f"{base}/approvals")
            row = page.locator("#approvals tr[data-approval]")
            expect(row).to_have_count(1)
            row.locator("button.reject").click()
            expect(row.locator(".result")).to_have_text(f"rejected by dashboard:{USER}")
            assert console.errors == []
        wait_until(lambda: run_row(conn, run)["status"] == "failed", 20)
        assert f"rejected by dashboard:{USER}" in run_row(conn, run)["error"]


def _post(base: str, path: str, fields: dict[str, str], headers: dict[str, str]) -> tuple[int, str]:
    parts = urllib.parse.urlsplit(base)
    client = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    body = urllib.parse.urlencode(fields)
    client.request(
        "POST",
        path,
        body=body,
        headers={"Content-Type": "application/x-www-form-urlencoded", **headers},
    )
    response = client.getresponse()
    text = response.read().decode()
    client.close()
    return response.status, text


def _get(base: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    parts = urllib.parse.urlsplit(base)
    client = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    client.request("GET", path, headers=headers or {})
    response = client.getresponse()
    text = response.read().decode()
    client.close()
    return response.status, text


def _csrf(html: str) -> str:
    found = _csrf_or_none(html)
    assert found
    return found


def _csrf_or_none(html: str) -> str | None:
    found = re.search(r'name="csrf-token" content="([^"]*)"', html)
    return found.group(1) if found else None


def _approval(conn: psycopg.Connection, run: UUID) -> UUID:
    return conn.execute(
        "select id from ceaseless.approvals where topology_run_id = %s", (run,)
    ).fetchone()[0]


def test_a_forged_post_decides_nothing(
    conn: psycopg.Connection, echo: str, start_listener: Callable[..., ListenerProcess]
) -> None:
    with _served(start_listener) as (base, listener):
        run = _gated_run(conn)
        _awaiting(conn, run)
        approval = _approval(conn, run)
        # A signed-in operator's browser, which another origin's page tries to use.
        auth = listener.auth()
        status, html = _get(base, "/approvals", auth)
        assert status == 200
        token = _csrf(html)
        path = f"/approvals/{approval}"
        fields = {"decision": "approve", "csrf": token}
        attempts: list[tuple[dict[str, str], dict[str, str]]] = [
            # No CSRF token: another site's form.
            ({"decision": "approve"}, {"Origin": base}),
            # A wrong token.
            ({**fields, "csrf": "x" * len(token)}, {"Origin": base}),
            # The right token from another origin, or with no origin at all.
            (fields, {"Origin": "http://evil.example"}),
            (fields, {}),
            (fields, {"Origin": base, "Sec-Fetch-Site": "cross-site"}),
        ]
        for form, headers in attempts:
            status, text = _post(base, path, form, {**auth, **headers})
            assert status == 403, (form, headers, status, text)
        # A page of another site whose name resolves to 127.0.0.1 (DNS rebinding).
        status, _ = _get(base, "/approvals", {**auth, "Host": "evil.example"})
        assert status == 421
        status, _ = _post(
            base, path, fields, {**auth, "Origin": "http://evil.example", "Host": "evil.example"}
        )
        assert status == 421
        assert conn.execute(
            "select decision from ceaseless.approvals where id = %s", (approval,)
        ).fetchone() == (None,)
        # The same post from the dashboard's own origin decides it, once.
        own = {**auth, "Origin": base, "Accept": "application/json"}
        status, _ = _post(base, path, fields, own)
        assert status == 200
        status, text = _post(base, path, fields, own)
        assert status == 409 and "already approved" in json.loads(text)["error"]


def test_a_local_client_without_the_token_reads_no_prompt_and_decides_no_approval(
    conn: psycopg.Connection, echo: str, start_listener: Callable[..., ListenerProcess]
) -> None:
    """What an agent that reached 127.0.0.1 would do: fetch the pages, scrape the CSRF
    token, POST approve with the server's own Origin, follow the run's stream."""
    secret_prompt = "the prompt of another user: DEPLOY TO PROD with key hunter2"
    make_job(conn, "echo", prompt=secret_prompt)
    with _served(start_listener) as (base, listener):
        run = _gated_run(conn)
        _awaiting(conn, run)
        approval = _approval(conn, run)
        bodies = []
        for path in ("/", "/approvals", f"/runs/{run}", "/runs", "/lanes", "/metrics"):
            for headers in ({}, {"Accept": "text/html"}, {"Authorization": "Bearer guess"}):
                status, text = _get(base, path, headers)
                assert status in (401, 303), (path, headers, status)
                bodies.append(text)
        # The sign-in page is open, and carries no CSRF token to scrape.
        status, login = _get(base, "/login")
        assert status == 200
        assert _csrf_or_none(login) in (None, "")
        bodies.append(login)
        assert not [b for b in bodies if secret_prompt in b or "DEPLOY" in b]
        stream_status, _ = _get(base, f"/runs/{run}/events", {"Accept": "text/event-stream"})
        assert stream_status == 401
        # The CSRF token a signed-in page would carry, were it scraped some other way,
        # still decides nothing without the token.
        signed_in = listener.auth()
        csrf = _csrf(_get(base, "/approvals", signed_in)[1])
        for headers in ({}, {"Cookie": "ceaseless_dashboard=guess"}):
            status, _ = _post(
                base,
                f"/approvals/{approval}",
                {"decision": "approve", "csrf": csrf},
                {"Origin": base, "Accept": "application/json", **headers},
            )
            assert status == 401
        status, _ = _post(base, "/login", {"token": "guess"}, {"Origin": base})
        assert status == 401
        assert conn.execute(
            "select decision from ceaseless.approvals where id = %s", (approval,)
        ).fetchone() == (None,)
        assert run_row(conn, run)["status"] == "awaiting_approval"
        # With the token, the same client reads the prompt.
        status, html = _get(base, "/", signed_in)
        assert status == 200 and secret_prompt in html


def test_the_sign_in_url_sets_the_cookie_and_a_wrong_one_is_refused(
    start_listener: Callable[..., ListenerProcess],
) -> None:
    with _served(start_listener) as (base, listener):
        line = listener.events("http.listening")[0]
        token = listener.http_token()
        assert line["sign_in"] == f"{base}/login?token={token}"
        assert oct(Path(line["token_file"]).stat().st_mode & 0o777) == "0o600"
        assert oct(Path(line["token_file"]).parent.stat().st_mode & 0o777) == "0o700"
        status, _ = _get(base, "/login?token=wrong")
        assert status == 401
        parts = urllib.parse.urlsplit(base)
        client = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        client.request("GET", f"/login?token={token}")
        response = client.getresponse()
        response.read()
        assert response.status == 303 and response.getheader("Location") == "/"
        cookie = response.getheader("Set-Cookie") or ""
        assert f"ceaseless_dashboard_{parts.port}={token}" in cookie
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        client.close()
        assert (
            _get(base, "/lanes", {"Cookie": f"ceaseless_dashboard_{parts.port}={token}"})[0] == 200
        )
        # The file goes with the listener.
        listener.proc.send_signal(signal.SIGTERM)
        assert listener.proc.wait(30) == 0
        assert not Path(line["token_file"]).exists()


def test_a_token_is_required_when_bound_beyond_loopback(
    conn: psycopg.Connection,
    echo: str,
    browser: Browser,
    start_listener: Callable[..., ListenerProcess],
) -> None:
    with _served(start_listener, "--http-token", "s3cret-token", host="0.0.0.0") as (base, _):
        run = _gated_run(conn)
        assert _get(base, "/lanes")[0] == 401
        assert _get(base, "/lanes", {"Authorization": "Bearer wrong"})[0] == 401
        assert _get(base, "/lanes", {"Authorization": "Bearer s3cret-token"})[0] == 200
        with _page(browser) as (page, console):
            page.goto(f"{base}/runs/{run}")
            # A browser is sent to sign in, and the cookie then carries it, SSE included.
            expect(page).to_have_url(re.compile(r"/login$"))
            page.fill('input[name="token"]', "wrong")
            page.click('button[type="submit"]')
            expect(page.locator("main")).to_contain_text("is not the listener's --http-token")
            console.errors.clear()  # the 401 answer to the wrong token is logged by Chromium
            page.fill('input[name="token"]', "s3cret-token")
            page.click('button[type="submit"]')
            expect(page).to_have_url(re.compile(r"/$"))
            page.goto(f"{base}/runs/{run}")
            expect(page.locator("#live")).to_have_text("live")
            expect(page.locator('#graph g.node[data-node="review"]')).to_have_class(
                re.compile(r"state-awaiting_approval"), timeout=30_000
            )
            assert console.errors == []


def test_every_page_answers_on_an_empty_database_and_unknown_ids_are_404(
    start_listener: Callable[..., ListenerProcess],
) -> None:
    with _served(start_listener) as (base, listener):
        auth = listener.auth()
        for path in ("/", "/lanes", "/routines", "/loops", "/runs", "/approvals"):
            status, html = _get(base, path, auth)
            assert status == 200, (path, html)
        status, html = _get(base, "/?state=nonsense&lane=nobody&kind=%3Cscript%3E", auth)
        assert status == 200 and "<script>" not in html.split("</head>")[1]
        unknown = "00000000-0000-0000-0000-000000000000"
        for path in (f"/jobs/{unknown}", f"/runs/{unknown}", f"/loops/{unknown}", "/jobs/nope"):
            assert _get(base, path, auth)[0] == 404, path
        assert _get(base, "/static/nope.js")[0] == 404
    _no_traceback(listener)


def test_routine_and_loop_pages_show_their_held_fires(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(conn, "noop", "noop")
    # The first iteration's job waits, so the loop's second fire stays held.
    pause_lane(conn, "noop", datetime.now(UTC) + timedelta(hours=1))
    routine = make_routine(
        conn,
        "held-demo",
        "event",
        {"pattern": "deploy"},
        debounce_secs=3600,
        debounce_max_secs=7200,
    )
    loop = make_loop(conn, overlap_policy="buffer_all")
    conn.execute("insert into ceaseless.events (user_id, content) values ('alice', 'deploy 1')")
    conn.execute("insert into ceaseless.events (user_id, content) values ('alice', 'deploy 2')")
    conn.execute("select ceaseless.run_loop(%s)", (loop,))
    conn.execute("select ceaseless.run_loop(%s)", (loop,))
    conn.commit()
    with _served(start_listener) as (base, listener):
        auth = listener.auth()
        status, html = _get(base, f"/routines/{routine}", auth)
        assert status == 200
        assert "Held fires" in html and "debounced" in html and "debounce 3600 s" in html
        assert "<td>2</td>" in html  # two events collapsed into the one held fire
        status, html = _get(base, f"/loops/{loop}", auth)
        assert status == 200
        assert "buffer_all" in html and "live_iteration" in html and "when a run ends" in html
    _no_traceback(listener)


def test_the_run_page_shows_a_node_skipped_at_its_approval_s_expiry(
    conn: psycopg.Connection, echo: str, start_listener: Callable[..., ListenerProcess]
) -> None:
    with _served(start_listener) as (base, listener):
        run = start_run(
            conn,
            graph(
                [node("plan", "echo"),
                 node("review", "echo", gate="approval", approval_timeout_secs=3600,
                      on_expiry="skip"),
                 node("ship", "echo")],
                [("plan", "review"), ("review", "ship")],
            ),
            task="release 1.5",
        )  # fmt: skip
        _awaiting(conn, run)
        conn.execute("select ceaseless.expire_approvals(now() + interval '2 hours')")
        wait_until(lambda: run_row(conn, run)["status"] == "succeeded", 30)
        status, html = _get(base, f"/runs/{run}", listener.auth())
        assert status == 200
        assert '<span class="state state-skipped">skipped</span>' in html
        assert "(skipped: its approval expired)" in html
        assert 'class="node state-skipped"' in html
        _no_traceback(listener)
