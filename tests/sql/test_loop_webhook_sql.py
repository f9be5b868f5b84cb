"""receive_webhook for loops: the loop's signing key, the body in the iteration's task,
rotation, and every refusal's SQLSTATE (with the skipped run and replay record kept)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from tests.factories import make_agent, make_routine
from tests.sql.loops import iterations, loop_row, make_loop, runs
from tests.webhook_signing import sign


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn)


@pytest.fixture
def loop(conn: psycopg.Connection) -> Any:
    return make_loop(conn, triggers={"webhook_enabled": True}, task="triage this")


def _signed(
    conn: psycopg.Connection, loop: Any, body: bytes, at: datetime | None = None
) -> tuple[str, bytes, str, datetime]:
    row = loop_row(conn, loop)
    ts = int((at or datetime.now(UTC)).timestamp())
    return (
        row["webhook_token"],
        body,
        sign(row["webhook_signing_key"], ts, body),
        datetime.fromtimestamp(ts, UTC),
    )


def _receive(conn: psycopg.Connection, request: tuple) -> Any:
    row = conn.execute("select ceaseless.receive_webhook(%s, %s, %s, %s)", request).fetchone()
    assert row is not None
    return row[0]


def _code(conn: psycopg.Connection, request: tuple) -> str | None:
    with pytest.raises(psycopg.Error) as error:
        _receive(conn, request)
    return error.value.sqlstate


def test_a_signed_request_fires_an_iteration_with_the_body(
    conn: psycopg.Connection, loop: Any
) -> None:
    run = _receive(conn, _signed(conn, loop, b'{"alert": "disk full"}'))
    [row] = runs(conn, loop)
    assert row["id"] == run and row["iteration"] == 1 and row["trigger_type"] == "webhook"
    assert row["task"] == 'triage this\n\n## Webhook body\n\n{"alert": "disk full"}'
    delivery = conn.execute("select target, target_id from ceaseless.webhook_deliveries").fetchall()
    assert delivery == [("loop", loop)]


def test_a_body_that_is_not_utf8_reaches_the_task_as_hex(
    conn: psycopg.Connection, loop: Any
) -> None:
    _receive(conn, _signed(conn, loop, b"\xff\xfe"))
    assert runs(conn, loop)[0]["task"].endswith("## Webhook body\n\n\\xfffe")


def test_wrong_stale_and_replayed_requests_are_refused(conn: psycopg.Connection, loop: Any) -> None:
    token, body, signature, at = _signed(conn, loop, b"x")
    assert _code(conn, (token, body, "sha256=" + "0" * 64, at)) == "CE401"
    # Signed with the right key but over another body.
    assert _code(conn, (token, b"y", signature, at)) == "CE401"
    stale = _signed(conn, loop, b"x", datetime.now(UTC) - timedelta(seconds=301))
    assert _code(conn, stale) == "CE403"
    assert runs(conn, loop) == []
    _receive(conn, (token, body, signature, at))
    assert _code(conn, (token, body, signature, at)) == "CE413"
    assert len(runs(conn, loop)) == 1


def test_rotation_invalidates_the_old_token(conn: psycopg.Connection, loop: Any) -> None:
    old = _signed(conn, loop, b"x")
    for enabled in (False, True):
        conn.execute(
            "update ceaseless.loops set triggers = %s where id = %s",
            (json.dumps({"webhook_enabled": enabled}), loop),
        )
    assert _code(conn, old) == "CE404"
    # The old key over the new token is no better.
    new_token = loop_row(conn, loop)["webhook_token"]
    assert _code(conn, (new_token, *old[1:])) == "CE401"
    _receive(conn, _signed(conn, loop, b"x"))


def test_a_disabled_loop_is_ce410_and_a_live_iteration_ce412_both_recorded(
    conn: psycopg.Connection, loop: Any
) -> None:
    _receive(conn, _signed(conn, loop, b"first"))
    busy = _signed(conn, loop, b"second")
    assert _code(conn, busy) == "CE412"
    # _receive_webhook (what the ingress calls) returns the refusal, so the
    # skipped run and the replay record commit.
    row = conn.execute(
        "select run_id, refused_sqlstate from ceaseless._receive_webhook(%s, %s, %s, %s)", busy
    ).fetchone()
    assert row is not None and row[1] == "CE412"
    assert _code(conn, busy) == "CE413"
    conn.execute("update ceaseless.loops set enabled = false where id = %s", (loop,))
    off = _signed(conn, loop, b"third")
    row = conn.execute(
        "select run_id, refused_sqlstate, refused_message "
        "from ceaseless._receive_webhook(%s, %s, %s, %s)",
        off,
    ).fetchone()
    assert row is not None and row[1] == "CE410" and "is disabled" in row[2]
    reasons = sorted(r["skip_reason"] for r in runs(conn, loop) if r["status"] == "skipped")
    assert reasons == ["disabled", "live_iteration"]
    assert len(iterations(conn, loop)) == 1


def test_a_routine_path_cannot_shadow_a_loop_token(conn: psycopg.Connection, loop: Any) -> None:
    token = loop_row(conn, loop)["webhook_token"]
    make_routine(conn, "shadow", "webhook", {"path": token, "secret": "s" * 20})
    _receive(conn, _signed(conn, loop, b"x"))
    assert len(runs(conn, loop)) == 1
    assert conn.execute("select count(*) from ceaseless.routine_runs").fetchone() == (0,)
