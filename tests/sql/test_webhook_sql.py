"""receive_webhook: HMAC-SHA256 in SQL, the time window, replays, and every refusal's SQLSTATE."""

from __future__ import annotations

import hashlib
import hmac
import re
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factories import make_agent, make_routine, run_of
from tests.webhook_signing import sign

SECRET = "a-signing-secret-of-some-length"


@pytest.fixture(autouse=True)
def hook(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=100)
    make_routine(conn, "hook", "webhook", {"path": "deploys", "secret": SECRET}, max_concurrent=10)


def _receive(
    conn: psycopg.Connection,
    body: bytes,
    *,
    path: str = "deploys",
    at: datetime | None = None,
    signature: str | None = None,
) -> object:
    sent = at or datetime.now(UTC)
    ts = int(sent.timestamp())
    sig = signature if signature is not None else sign(SECRET, ts, body)
    row = conn.execute(
        "select ceaseless.receive_webhook(%s, %s, %s, %s)",
        (path, body, sig, datetime.fromtimestamp(ts, UTC)),
    ).fetchone()
    assert row is not None
    return row[0]


def _code(conn: psycopg.Connection, body: bytes, **kw: object) -> str | None:
    with pytest.raises(psycopg.Error) as error:
        _receive(conn, body, **kw)  # type: ignore[arg-type]
    return error.value.sqlstate


def test_sql_hmac_equals_pythons(conn: psycopg.Connection) -> None:
    # The connection is shared by every example on purpose: the function is
    # immutable, so examples cannot affect each other through the database.
    @settings(max_examples=80, deadline=None)
    @given(key=st.binary(max_size=150), message=st.binary(max_size=300))
    def same_digest(key: bytes, message: bytes) -> None:
        row = conn.execute("select ceaseless._hmac_sha256(%s, %s)", (key, message)).fetchone()
        assert row == (hmac.new(key, message, hashlib.sha256).digest(),)

    same_digest()


def test_signed_request_fires_the_routine_with_the_body_as_context(
    conn: psycopg.Connection,
) -> None:
    run = run_of(conn, _receive(conn, b'{"ref": "main"}'))  # type: ignore[arg-type]
    assert run["status"] == "running" and run["trigger_type"] == "webhook"
    prompt = conn.execute(
        "select prompt from ceaseless.job where id = %s", (run["job_id"],)
    ).fetchone()
    assert prompt is not None and '{"ref": "main"}' in prompt[0]


def test_wrong_signature_is_refused(conn: psycopg.Connection) -> None:
    assert _code(conn, b"x", signature="sha256=" + "0" * 64) == "CE401"
    assert _code(conn, b"x", signature="not-a-signature") == "CE401"
    assert _code(conn, b"x", signature="") == "CE401"


def test_stale_or_future_timestamp_is_refused(conn: psycopg.Connection) -> None:
    assert _code(conn, b"x", at=datetime.now(UTC) - timedelta(seconds=301)) == "CE403"
    assert _code(conn, b"x", at=datetime.now(UTC) + timedelta(seconds=301)) == "CE403"


def test_replayed_signature_is_refused(conn: psycopg.Connection) -> None:
    at = datetime.now(UTC)
    _receive(conn, b"once", at=at)
    assert _code(conn, b"once", at=at) == "CE413"


def test_unknown_path_is_refused(conn: psycopg.Connection) -> None:
    assert _code(conn, b"x", path="nowhere") == "CE404"


def test_disabled_routine_is_refused_after_authentication(conn: psycopg.Connection) -> None:
    conn.execute("update ceaseless.routines set enabled = false")
    assert _code(conn, b"x") == "CE410"
    assert _code(conn, b"y", signature="sha256=" + "0" * 64) == "CE401"


def test_cooldown_and_concurrency_refusals(conn: psycopg.Connection) -> None:
    conn.execute("update ceaseless.routines set cooldown_secs = 600, last_run_at = now()")
    assert _code(conn, b"a") == "CE411"
    conn.execute("update ceaseless.routines set cooldown_secs = 0, max_concurrent = 1")
    _receive(conn, b"b")
    assert _code(conn, b"c") == "CE412"


def _receive_keeping_refusals(
    conn: psycopg.Connection, body: bytes, at: datetime
) -> tuple[object, str | None]:
    ts = int(at.timestamp())
    row = conn.execute(
        "select run_id, refused_sqlstate from ceaseless._receive_webhook('deploys', %s, %s, %s)",
        (body, sign(SECRET, ts, body), datetime.fromtimestamp(ts, UTC)),
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def test_a_refused_fire_keeps_its_replay_record_so_the_request_cannot_fire_later(
    conn: psycopg.Connection,
) -> None:
    # A captured request refused by a guardrail used to roll its replay record
    # back with the raise: replayed once the cooldown cleared, it fired.
    at = datetime.now(UTC)
    conn.execute("update ceaseless.routines set cooldown_secs = 600, last_run_at = now()")
    run, refused = _receive_keeping_refusals(conn, b"captured", at)
    assert refused == "CE411"
    assert run_of(conn, run)["skip_reason"] == "cooldown"  # type: ignore[arg-type]
    conn.execute("update ceaseless.routines set cooldown_secs = 0")
    assert _code(conn, b"captured", at=at) == "CE413"


def test_the_public_form_raises_each_guardrail_refusal(conn: psycopg.Connection) -> None:
    conn.execute("update ceaseless.routines set cooldown_secs = 600, last_run_at = now()")
    with pytest.raises(psycopg.Error) as error:
        _receive(conn, b"x")
    assert error.value.sqlstate == "CE411"
    assert error.value.diag.message_primary == "routine hook is cooling down"


def test_the_token_grammar_is_the_one_routine_paths_are_validated_against(
    conn: psycopg.Connection,
) -> None:
    row = conn.execute("select ceaseless._webhook_token_pattern()").fetchone()
    assert row is not None
    assert re.fullmatch(row[0], "deploys") and not re.fullmatch(row[0], "a/b")
    with pytest.raises(psycopg.Error) as error:
        make_routine(conn, "bad", "webhook", {"path": "a/b", "secret": SECRET})
    assert "trigger_config.path" in str(error.value)


def test_a_missing_body_fails_verification_instead_of_passing_it(conn: psycopg.Connection) -> None:
    # HMAC of NULL is NULL, and `if not NULL` does not raise: a request with
    # no body and any well-formed signature used to fire the routine.
    ts = int(datetime.now(UTC).timestamp())
    with pytest.raises(psycopg.Error) as error:
        conn.execute(
            "select ceaseless.receive_webhook('deploys', NULL, %s, %s)",
            ("sha256=" + "0" * 64, datetime.fromtimestamp(ts, UTC)),
        )
    assert error.value.sqlstate == "CE401"
    conn.rollback()
    assert conn.execute("select count(*) from ceaseless.routine_runs").fetchone() == (0,)


def test_a_caller_cannot_bring_its_own_clock(conn: psycopg.Connection) -> None:
    # With a p_now of its choosing, a caller could replay a captured request
    # long after its window, and clear the replay memory by passing a time
    # far ahead.
    ts = int(datetime.now(UTC).timestamp()) - 3600
    body = b"captured an hour ago"
    with pytest.raises(psycopg.errors.UndefinedFunction):
        conn.execute(
            "select ceaseless.receive_webhook('deploys', %s, %s, %s, %s)",
            (
                body,
                sign(SECRET, ts, body),
                datetime.fromtimestamp(ts, UTC),
                datetime.fromtimestamp(ts, UTC),
            ),
        )
