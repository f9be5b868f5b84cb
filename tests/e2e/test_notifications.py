"""The notifications outbox end to end: rows in, deliver_due, sinks out, rows marked.

Each test inserts notifications directly, configures sinks in ceaseless.settings,
and runs `deliver_due` against a real pool; webhook receivers are real aiohttp
servers on 127.0.0.1. Time is driven through next_attempt_at and p_now, never slept.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import aiohttp
import psycopg
import pytest
from aiohttp import web
from psycopg_pool import AsyncConnectionPool

from listener.daemon.outbox import NOTIFICATION_CHANNEL, deliver_due
from tests.e2e import chat_stubs

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# -- helpers ------------------------------------------------------------------


def _insert(
    conn: psycopg.Connection, count: int = 1, *, channel: str | None = None, subject: str = "s"
) -> list[UUID]:
    rows = conn.execute(
        "insert into ceaseless.notifications "
        "  (source_table, source_id, kind, channel, recipient, subject, body) "
        "select 'routine_runs', gen_random_uuid(), 'failure', %s, 'ops@example.com', "
        "       %s || ' ' || g, 'the body of ' || g "
        "from generate_series(1, %s) g "
        "returning id",
        (channel, subject, count),
    ).fetchall()
    return [row[0] for row in rows]


def _set_sinks(conn: psycopg.Connection, sinks: dict[str, Any]) -> None:
    conn.execute(
        "update ceaseless.settings set value = %s where key = 'notification_sinks'",
        (json.dumps(sinks),),
    )


def _set_max_attempts(conn: psycopg.Connection, attempts: int) -> None:
    conn.execute(
        "update ceaseless.settings set value = %s where key = 'notification_max_attempts'",
        (json.dumps(attempts),),
    )


def _row(conn: psycopg.Connection, id_: UUID) -> dict[str, Any]:
    cur = conn.execute(
        "select *, extract(epoch from next_attempt_at - now())::float8 as due_in "
        "from ceaseless.notifications where id = %s",
        (id_,),
    )
    row = cur.fetchone()
    assert row is not None and cur.description is not None
    return {col.name: value for col, value in zip(cur.description, row, strict=True)}


def _make_due(conn: psycopg.Connection) -> None:
    conn.execute(
        "update ceaseless.notifications set next_attempt_at = now() where status = 'pending'"
    )


@asynccontextmanager
async def _session(db_url: str) -> AsyncIterator[tuple[AsyncConnectionPool, aiohttp.ClientSession]]:
    pool = AsyncConnectionPool(
        db_url, min_size=1, max_size=2, kwargs={"autocommit": True}, open=False
    )
    async with pool, aiohttp.ClientSession() as http:
        yield pool, http


async def _round(db_url: str, worker: str = "listener-1", limit: int = 100) -> int:
    async with _session(db_url) as (pool, http):
        return await deliver_due(pool, worker, http=http, limit=limit)


@asynccontextmanager
async def _receiver(handler: Handler) -> AsyncIterator[str]:
    """An HTTP server on a random local port; yields the URL of its /hook endpoint."""
    app = web.Application()
    app.router.add_post("/hook", handler)
    runner = web.AppRunner(app, shutdown_timeout=1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}/hook"
    finally:
        await runner.cleanup()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def events(self, name: str) -> list[dict[str, Any]]:
        return [getattr(r, "fields", {}) for r in self.records if r.getMessage() == name]


@pytest.fixture
def logged() -> Iterator[_Records]:
    logger = logging.getLogger("ceaseless")
    handler, level = _Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


# -- log sink -----------------------------------------------------------------


def test_log_sink_writes_one_structured_line_and_marks_the_row_delivered(
    conn: psycopg.Connection, db_url: str, logged: _Records
) -> None:
    [id_] = _insert(conn, subject="disk full")

    assert asyncio.run(_round(db_url)) == 1

    row = _row(conn, id_)
    assert row["status"] == "delivered" and row["delivered_at"] is not None
    assert row["attempts"] == 1 and row["last_error"] is None
    [line] = logged.events("notification.delivered")
    assert line["id"] == str(id_) and line["sink"] == "default" and line["type"] == "log"
    assert line["subject"] == "disk full 1" and line["body"] == "the body of 1"
    assert line["recipient"] == "ops@example.com" and line["kind"] == "failure"


def test_missing_sinks_setting_falls_back_to_the_default_log_sink(
    conn: psycopg.Connection, db_url: str
) -> None:
    conn.execute("delete from ceaseless.settings where key = 'notification_sinks'")
    [id_] = _insert(conn)

    asyncio.run(_round(db_url))

    assert _row(conn, id_)["status"] == "delivered"


def test_nothing_due_is_a_quiet_round(conn: psycopg.Connection, db_url: str) -> None:
    assert asyncio.run(_round(db_url)) == 0


# -- pg sink ------------------------------------------------------------------


def test_pg_sink_notifies_the_users_channel_with_ids_and_subject_and_marks_delivered(
    conn: psycopg.Connection, db_url: str
) -> None:
    _set_sinks(conn, {"default": {"type": "log"}, "ops": {"type": "pg", "channel": "ops_alerts"}})
    with psycopg.connect(db_url, autocommit=True) as listening:
        listening.execute("listen ops_alerts")
        [id_] = _insert(conn, channel="ops", subject="build broke")

        assert asyncio.run(_round(db_url)) == 1

        received = [json.loads(n.payload) for n in listening.notifies(timeout=2, stop_after=1)]
    row = _row(conn, id_)
    assert received == [
        {
            "id": str(id_),
            "source_table": "routine_runs",
            "source_id": str(row["source_id"]),
            "kind": "failure",
            "subject": "build broke 1",
        }
    ]
    assert row["status"] == "delivered" and row["attempts"] == 1


def test_pg_sink_notify_is_sent_only_if_the_claim_commits(
    conn: psycopg.Connection, db_url: str
) -> None:
    _set_sinks(conn, {"default": {"type": "pg", "channel": "ops_alerts"}})
    [id_] = _insert(conn)
    with psycopg.connect(db_url, autocommit=True) as listening:
        listening.execute("listen ops_alerts")
        with psycopg.connect(db_url) as claimer:
            claimed = claimer.execute(
                "select state from ceaseless.claim_notifications('listener-1', 10)"
            ).fetchall()
            assert claimed == [("delivered",)]
            claimer.rollback()

        assert list(listening.notifies(timeout=0.5)) == []
    assert _row(conn, id_)["status"] == "pending"


# -- webhook sink -------------------------------------------------------------


def test_webhook_sink_posts_the_notification_document_and_marks_delivered(
    conn: psycopg.Connection, db_url: str
) -> None:
    received: list[tuple[dict[str, Any], str | None]] = []

    async def hook(request: web.Request) -> web.Response:
        received.append((await request.json(), request.headers.get("X-Token")))
        return web.Response(status=204)

    async def scenario() -> int:
        async with _receiver(hook) as url:
            _set_sinks(
                conn,
                {"hooks": {"type": "webhook", "url": url, "headers": {"X-Token": "s3cret"}}},
            )
            return await _round(db_url)

    [id_] = _insert(conn, channel="hooks", subject="deploy done")

    assert asyncio.run(scenario()) == 1

    row = _row(conn, id_)
    assert row["status"] == "delivered" and row["attempts"] == 1
    [(document, token)] = received
    assert token == "s3cret"
    assert document == {
        "id": str(id_),
        "kind": "failure",
        "subject": "deploy done 1",
        "body": "the body of 1",
        "recipient": "ops@example.com",
        "source_table": "routine_runs",
        "source_id": str(row["source_id"]),
        "created_at": row["created_at"].isoformat(),
    }


def test_webhook_answering_500_is_retried_with_growing_backoff_then_failed(
    conn: psycopg.Connection, db_url: str
) -> None:
    _set_max_attempts(conn, 3)
    calls = Counter[str]()
    seen: list[dict[str, Any]] = []
    urls: list[str] = []

    async def hook(request: web.Request) -> web.Response:
        calls[(await request.json())["id"]] += 1
        return web.Response(status=500, text="upstream exploded")

    async def scenario() -> None:
        async with _receiver(hook) as url:
            urls.append(url)
            _set_sinks(conn, {"default": {"type": "webhook", "url": url}})
            for _ in range(3):
                assert await _round(db_url) == 1
                seen.append(_row(conn, id_))
                # Not due again until the backoff passes: the next round is empty.
                assert await _round(db_url) == 0
                _make_due(conn)

    [id_] = _insert(conn)
    asyncio.run(scenario())

    first, second, last = seen
    assert (first["status"], first["attempts"]) == ("pending", 1)
    assert (second["status"], second["attempts"]) == ("pending", 2)
    # retry_base_secs (10) doubled per attempt, plus up to 25% jitter.
    assert 8 < first["due_in"] < 13.5
    assert 18 < second["due_in"] < 26
    origin = urls[0].removesuffix("/hook")
    assert first["last_error"] == f"webhook {origin} answered HTTP 500: upstream exploded"
    assert (last["status"], last["attempts"]) == ("failed", 3)
    assert "HTTP 500" in last["last_error"] and last["delivered_at"] is None
    assert calls == {str(id_): 3}


def test_refused_connection_is_a_failed_attempt_with_the_error(
    conn: psycopg.Connection, db_url: str
) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/hook"
    _set_sinks(conn, {"default": {"type": "webhook", "url": url}})
    [id_] = _insert(conn)

    assert asyncio.run(_round(db_url)) == 1

    row = _row(conn, id_)
    assert row["status"] == "pending" and row["attempts"] == 1 and row["due_in"] > 5
    origin = url.removesuffix("/hook")
    assert row["last_error"].startswith(f"webhook {origin} failed: ClientConnectorError")


def test_a_sink_url_is_never_kept_or_logged_beyond_its_origin(
    conn: psycopg.Connection, db_url: str, logged: _Records
) -> None:
    # Slack- and Discord-style hooks carry their credential in the path: the
    # URL is as secret as a Bearer token, and last_error is shown in views.
    port = _closed_port()
    _set_max_attempts(conn, 1)
    for url in [
        f"http://user:pw-SEKRIT@127.0.0.1:{port}/services/T0/B0/SEKRIT?token=SEKRIT",
        f"http://127.0.0.1:{port}:notaport/SEKRIT",
    ]:
        _set_sinks(conn, {"default": {"type": "webhook", "url": url}})
        [id_] = _insert(conn)
        assert asyncio.run(_round(db_url)) == 1
        row = _row(conn, id_)
        assert row["status"] == "failed" and row["last_error"]
        assert "SEKRIT" not in row["last_error"], row["last_error"]
    assert logged.records and not [
        r for r in logged.records if "SEKRIT" in r.getMessage() + str(getattr(r, "fields", ""))
    ]


def test_a_receiver_that_quotes_the_request_back_leaks_no_credential(
    conn: psycopg.Connection, db_url: str, logged: _Records
) -> None:
    # A receiver refusing a request often quotes it: its headers, its path. The
    # credential is in both (a Bearer header, a Slack-style hook path), and
    # last_error is shown in views and logged.
    async def quoting(request: web.Request) -> web.Response:
        quoted = f"bad token {request.headers.get('Authorization')} for {request.path_qs}"
        return web.Response(status=401, text=quoted + " " + request.headers.get("X-Key", ""))

    async def scenario() -> int:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", quoting)
        runner = web.AppRunner(app, shutdown_timeout=1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        _set_sinks(
            conn,
            {
                "default": {
                    "type": "webhook",
                    "url": f"http://{host}:{port}/services/T0SEKRITPATH/B0?token=SEKRITQUERY",
                    "headers": {"Authorization": "Bearer SEKRITBEARER", "X-Key": "SEKRITKEY"},
                }
            },
        )
        try:
            return await _round(db_url)
        finally:
            await runner.cleanup()

    _set_max_attempts(conn, 1)
    [id_] = _insert(conn)
    assert asyncio.run(scenario()) == 1
    row = _row(conn, id_)
    assert row["status"] == "failed"
    assert "answered HTTP 401" in row["last_error"] and "(hidden)" in row["last_error"]
    assert "SEKRIT" not in row["last_error"], row["last_error"]
    assert logged.records and not [
        r for r in logged.records if "SEKRIT" in r.getMessage() + str(getattr(r, "fields", ""))
    ]


def test_webhook_slower_than_its_timeout_is_a_failed_attempt(
    conn: psycopg.Connection, db_url: str
) -> None:
    release = asyncio.Event()

    async def hook(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response()

    async def scenario() -> None:
        async with _receiver(hook) as url:
            _set_sinks(conn, {"default": {"type": "webhook", "url": url, "timeout_secs": 0.3}})
            await _round(db_url)
            release.set()

    [id_] = _insert(conn)
    asyncio.run(scenario())

    row = _row(conn, id_)
    assert row["status"] == "pending" and row["attempts"] == 1
    assert row["last_error"].endswith("did not answer within 0.3 s")


# -- sinks that cannot deliver ------------------------------------------------


@pytest.mark.parametrize(
    ("sinks", "channel", "error"),
    [
        (
            {"default": {"type": "log"}},
            "pager",
            "unknown notification sink 'pager': add it to ceaseless.settings key "
            "notification_sinks (configured sinks: 'default')",
        ),
        (
            {"default": {"type": "webhook"}},
            None,
            "notification sink 'default' (type webhook) needs \"url\"",
        ),
        (
            {"default": {"type": "pg", "channel": ""}},
            None,
            "notification sink 'default' (type pg) needs \"channel\"",
        ),
        (
            {"default": {"type": "webhook", "url": "http://x.test/", "timeout_secs": 120}},
            None,
            '"timeout_secs" must be a number of seconds above 0 and at most 30',
        ),
        (
            {"default": {"type": "webhook", "url": "http://x.test/", "timeout_secs": "10"}},
            None,
            '"timeout_secs" must be a number of seconds above 0 and at most 30',
        ),
        (
            {"default": {"type": "webhook", "url": "http://x.test/", "headers": ["X-A: b"]}},
            None,
            '"headers" must be an object of strings',
        ),
        ({"default": {"type": "email"}}, None, 'has type "email"; use "log", "pg" or "webhook"'),
        ({"default": {"kind": "log"}}, None, 'has type (none); use "log", "pg" or "webhook"'),
        (["not", "an", "object"], None, "setting notification_sinks must be a JSON object"),
    ],
    ids=[
        "unknown",
        "webhook-without-url",
        "pg-empty-channel",
        "long-timeout",
        "text-timeout",
        "list-headers",
        "bad-type",
        "no-type",
        "array",
    ],
)
def test_sink_that_cannot_deliver_fails_at_once_with_a_clear_error(
    conn: psycopg.Connection, db_url: str, sinks: Any, channel: str | None, error: str
) -> None:
    # Malformed sinks are refused when written (tests/sql/test_settings_validation.py); one
    # that got past that check (written with triggers off) still fails at delivery.
    conn.execute("set session_replication_role = replica")
    conn.execute(
        "update ceaseless.settings set value = %s where key = 'notification_sinks'",
        (json.dumps(sinks),),
    )
    conn.execute("set session_replication_role = default")
    [id_] = _insert(conn, channel=channel)

    assert asyncio.run(_round(db_url)) == 1

    row = _row(conn, id_)
    assert row["status"] == "failed" and row["attempts"] == 1
    assert error in row["last_error"]
    status = conn.execute(
        "select status, notifications, sink_problem from ceaseless.notification_status"
    ).fetchall()
    assert status == [("failed", 1, row["last_error"])]


# -- claims, leases and concurrency ------------------------------------------


def test_two_concurrent_deliverers_deliver_each_notification_exactly_once(
    conn: psycopg.Connection, db_url: str
) -> None:
    received = Counter[str]()

    async def hook(request: web.Request) -> web.Response:
        received[(await request.json())["id"]] += 1
        await asyncio.sleep(0)
        return web.Response()

    async def drain(pool: AsyncConnectionPool, http: aiohttp.ClientSession, worker: str) -> int:
        handled = 0
        while n := await deliver_due(pool, worker, http=http, limit=15):
            handled += n
        return handled

    async def scenario() -> list[int]:
        async with (
            _receiver(hook) as url,
            _session(db_url) as (pool_a, http_a),
            _session(db_url) as (pool_b, http_b),
        ):
            _set_sinks(conn, {"default": {"type": "webhook", "url": url}})
            return await asyncio.gather(
                drain(pool_a, http_a, "listener-a"), drain(pool_b, http_b, "listener-b")
            )

    ids = _insert(conn, 200)
    handled = asyncio.run(scenario())

    assert sum(handled) == 200 and all(handled), handled
    assert received == dict.fromkeys(map(str, ids), 1)
    assert conn.execute(
        "select status, count(*), max(attempts) from ceaseless.notifications group by status"
    ).fetchall() == [("delivered", 200, 1)]


def _claim(conn: psycopg.Connection, worker: str, now: datetime) -> list[tuple[Any, ...]]:
    return conn.execute(
        "select id, state, attempts, last_error from ceaseless.claim_notifications(%s, 10, %s)",
        (worker, now),
    ).fetchall()


def _finish(
    conn: psycopg.Connection, worker: str, results: list[dict[str, Any]], now: datetime
) -> list[tuple[Any, ...]]:
    return conn.execute(
        "select id, status, attempts from ceaseless.finish_notifications(%s, %s, %s)",
        (worker, json.dumps(results, default=str), now),
    ).fetchall()


def test_claimed_notification_is_hidden_for_its_lease_then_comes_back(
    conn: psycopg.Connection,
) -> None:
    [id_] = _insert(conn)
    t0 = datetime.now(UTC)

    assert _claim(conn, "listener-a", t0) == [(id_, "claimed", 1, None)]
    assert _claim(conn, "listener-b", t0 + timedelta(seconds=59)) == []
    # listener-a died without reporting: the row comes back (at-least-once).
    assert _claim(conn, "listener-b", t0 + timedelta(seconds=61)) == [(id_, "claimed", 2, None)]


def test_failure_reported_by_a_superseded_claim_is_ignored_but_a_success_counts(
    conn: psycopg.Connection,
) -> None:
    [id_] = _insert(conn)
    t0 = datetime.now(UTC)
    _claim(conn, "listener-a", t0)
    _claim(conn, "listener-b", t0 + timedelta(seconds=61))
    late = t0 + timedelta(seconds=62)

    stale = [{"id": id_, "ok": False, "error": "late", "attempt": 1}]
    assert _finish(conn, "listener-a", stale, late) == []
    assert _row(conn, id_)["last_error"] is None

    assert _finish(conn, "listener-a", [{"id": id_, "ok": True, "attempt": 1}], late) == [
        (id_, "delivered", 2)
    ]
    # listener-b's report on an already delivered row changes nothing.
    assert _finish(conn, "listener-b", [{"id": id_, "ok": True, "attempt": 2}], late) == []


def test_claims_that_never_report_use_up_the_attempts_and_fail(conn: psycopg.Connection) -> None:
    _set_max_attempts(conn, 2)
    _insert(conn)
    t0 = datetime.now(UTC)

    _claim(conn, "listener-a", t0)
    _claim(conn, "listener-b", t0 + timedelta(seconds=61))
    [(_, state, attempts, error)] = _claim(conn, "listener-c", t0 + timedelta(seconds=122))

    assert (state, attempts) == ("failed", 2)
    assert error == (
        "gave up after 2 attempts (notification_max_attempts = 2); "
        "the last claim expired without a report"
    )


def test_claim_refuses_a_nameless_worker_and_a_zero_limit(conn: psycopg.Connection) -> None:
    for worker, limit in (("", 10), ("listener-1", 0)):
        with pytest.raises(psycopg.Error) as caught:
            conn.execute("select * from ceaseless.claim_notifications(%s, %s)", (worker, limit))
        assert caught.value.sqlstate == "CE422"


# -- wake-up NOTIFY -----------------------------------------------------------


def test_multi_row_insert_sends_one_wake_up_notify_with_the_count(
    conn: psycopg.Connection, db_url: str
) -> None:
    with psycopg.connect(db_url, autocommit=True) as listening:
        listening.execute(f"listen {NOTIFICATION_CHANNEL}")
        _insert(conn, 3)
        _insert(conn, 1)

        received = [(n.channel, json.loads(n.payload)) for n in listening.notifies(timeout=0.5)]

    assert received == [(NOTIFICATION_CHANNEL, {"count": 3}), (NOTIFICATION_CHANNEL, {"count": 1})]


def test_status_view_counts_per_sink_and_status(conn: psycopg.Connection, db_url: str) -> None:
    _set_sinks(conn, {"default": {"type": "log"}, "ops": {"type": "pg", "channel": "ops"}})
    _insert(conn, 2)
    _insert(conn, 1, channel="ops")
    asyncio.run(_round(db_url, limit=1))

    rows = conn.execute(
        "select sink, sink_type, status, notifications, due, oldest_pending_age is not null "
        "from ceaseless.notification_status"
    ).fetchall()

    assert rows == [
        ("default", "log", "delivered", 1, 0, False),
        ("default", "log", "pending", 1, 1, True),
        ("ops", "pg", "pending", 1, 1, True),
    ]


# -- webhook formats: Slack and Discord ----------------------------------------


def _chat_round(conn: psycopg.Connection, db_url: str, fmt: str, url: str) -> None:
    _set_sinks(conn, {"chat": {"type": "webhook", "url": url, "format": fmt}})
    assert asyncio.run(_round(db_url)) == 1


def test_a_slack_sink_sends_text_and_blocks_slack_accepts_with_a_long_body_cut(
    conn: psycopg.Connection, db_url: str
) -> None:
    with chat_stubs.serve(chat_stubs.slack) as stub:
        [short] = _insert(conn, channel="chat", subject="deploy <!channel> done")
        _chat_round(conn, db_url, "slack", stub.url)
        conn.execute(
            "update ceaseless.notifications set body = repeat('x', 50000) where id = %s",
            (_insert(conn, channel="chat", subject="long")[0],),
        )
        _chat_round(conn, db_url, "slack", stub.url)

    assert stub.answers == [(200, "ok"), (200, "ok")]
    first, long = stub.received
    assert _row(conn, short)["status"] == "delivered"
    # Slack's control sequences are escaped: the subject pings nobody.
    assert first["text"] == "*deploy &lt;!channel&gt; done 1*\nthe body of 1"
    assert [b["type"] for b in first["blocks"]] == ["section", "section", "context"]
    assert str(short) in first["blocks"][-1]["elements"][0]["text"]
    # Cut to fit, with a marker, never refused or left to Slack to truncate.
    assert len(long["text"]) <= 40_000 and long["text"].endswith("more characters]")
    assert all(len(b["text"]["text"]) <= 3000 for b in long["blocks"] if b["type"] == "section")
    assert long["blocks"][1]["text"]["text"].endswith("more characters]")


def test_a_discord_sink_sends_content_discord_accepts_cut_to_2000_characters(
    conn: psycopg.Connection, db_url: str
) -> None:
    with chat_stubs.serve(chat_stubs.discord) as stub:
        [id_] = _insert(conn, channel="chat", subject="deploy done")
        conn.execute(
            "update ceaseless.notifications set body = repeat('é😀', 3000) || ' @everyone' "
            "where id = %s",
            (id_,),
        )
        _chat_round(conn, db_url, "discord", stub.url)

    assert stub.answers == [(204, "")]
    assert _row(conn, id_)["status"] == "delivered"
    [document] = stub.received
    content = document["content"]
    assert content.startswith("**deploy done 1**\né😀")
    assert len(content.encode("utf-16-le")) // 2 <= 2000 and content.endswith("more characters]")
    assert document["allowed_mentions"] == {"parse": []}


def test_the_generic_document_is_what_slack_and_discord_refuse(
    conn: psycopg.Connection, db_url: str
) -> None:
    # Why a sink names its format: the notification as JSON has no text.
    for judge, refusal in ((chat_stubs.slack, "no_text"), (chat_stubs.discord, "50006")):
        with chat_stubs.serve(judge) as stub:
            [id_] = _insert(conn, channel="chat")
            _chat_round(conn, db_url, "generic", stub.url)
        row = _row(conn, id_)
        assert row["status"] == "pending" and refusal in row["last_error"]
        conn.execute("delete from ceaseless.notifications")


@pytest.mark.parametrize("fmt", ["teams", 7, ""])
def test_a_webhook_format_other_than_generic_slack_or_discord_is_refused(
    conn: psycopg.Connection, fmt: Any
) -> None:
    with pytest.raises(psycopg.Error) as error:
        _set_sinks(conn, {"chat": {"type": "webhook", "url": "https://x.test", "format": fmt}})
    assert error.value.sqlstate == "CE422"
    assert (
        'notification sink \'chat\' (type webhook): "format" must be "generic" (the notification '
        'as JSON), "slack" (text and blocks) or "discord" (content); got '
        f"{json.dumps(fmt)}" in str(error.value)
    )
