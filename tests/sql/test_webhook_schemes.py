"""Webhook signature schemes in SQL (spec 11): ceaseless, github, standard, stripe.

Each scheme verifies what its real senders send (GitHub's documented example,
the `standardwebhooks` library, Stripe's header), refuses tampered, stale and
replayed requests with the documented SQLSTATEs, and is validated at INSERT.
"""

from __future__ import annotations

import base64
import json
import os
import random
import string
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
import pytest
from standardwebhooks import Webhook

from tests.factories import make_agent, make_routine, run_of
from tests.sql.loops import loop_row, make_loop, runs
from tests.webhook_signing import sign, sign_github, sign_stripe, signed_headers

SCHEMES = ("ceaseless", "github", "standard", "stripe")
# Schemes that sign a timestamp, so a stale request is refused as stale.
TIMED = ("ceaseless", "standard", "stripe")
GITHUB_SECRET = "It's a Secret to Everybody"
GITHUB_DIGEST = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
STANDARD_SECRET = "whsec_" + base64.b64encode(bytes(range(24))).decode()
SECRETS = {
    "ceaseless": "a-signing-secret-of-some-length",
    "github": GITHUB_SECRET,
    "standard": STANDARD_SECRET,
    "stripe": "whsec_a-stripe-endpoint-secret",
}


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=100)


def _hook(conn: psycopg.Connection, scheme: str, path: str | None = None) -> UUID:
    config = {"path": path or f"hook-{scheme}", "secret": SECRETS[scheme], "scheme": scheme}
    return make_routine(conn, f"hook-{scheme}", "webhook", config, max_concurrent=10)


def _receive(conn: psycopg.Connection, path: str, body: bytes, headers: dict[str, str]) -> UUID:
    row = conn.execute(
        "select ceaseless.receive_webhook(%s, %s, %s::jsonb)", (path, body, json.dumps(headers))
    ).fetchone()
    assert row is not None
    return row[0]


def _code(conn: psycopg.Connection, path: str, body: bytes, headers: dict[str, str]) -> str | None:
    with pytest.raises(psycopg.Error) as error:
        _receive(conn, path, body, headers)
    return error.value.sqlstate


def test_githubs_documented_example_verifies(conn: psycopg.Connection) -> None:
    row = conn.execute(
        "select encode(ceaseless._hmac_sha256(convert_to(%s, 'UTF8'), convert_to(%s, 'UTF8')),"
        " 'hex')",
        (GITHUB_SECRET, "Hello, World!"),
    ).fetchone()
    assert row == (GITHUB_DIGEST,)
    routine = _hook(conn, "github")
    headers = {
        "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        "X-Hub-Signature-256": f"sha256={GITHUB_DIGEST}",
    }
    run = run_of(conn, _receive(conn, "hook-github", b"Hello, World!", headers))
    assert run["routine_id"] == routine and run["trigger_type"] == "webhook"


def test_a_request_signed_by_the_standardwebhooks_library_fires_the_routine(
    conn: psycopg.Connection,
) -> None:
    routine = _hook(conn, "standard")
    body = b'{"type": "invoice.paid", "id": 7}'
    msg_id = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
    now = datetime.now(UTC)
    hook = Webhook(STANDARD_SECRET)
    headers = {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": hook.sign(msg_id, now, body.decode()),
    }
    hook.verify(body, headers)  # the library agrees with itself: the headers are its own
    run = run_of(conn, _receive(conn, "hook-standard", body, headers))
    assert run["routine_id"] == routine


def test_stripe_style_headers_fire_the_routine(conn: psycopg.Connection) -> None:
    routine = _hook(conn, "stripe")
    body = b'{"object": "event", "type": "charge.succeeded"}'
    ts = int(datetime.now(UTC).timestamp())
    # Stripe sends several signatures while a secret rolls: any v1 may match.
    header = f"t={ts},v1={'0' * 64},{sign_stripe(SECRETS['stripe'], ts, body).split(',')[1]},v0=ab"
    run = run_of(conn, _receive(conn, "hook-stripe", body, {"Stripe-Signature": header}))
    assert run["routine_id"] == routine


@pytest.mark.parametrize("scheme", SCHEMES)
def test_each_scheme_fires_and_the_body_reaches_the_run(
    conn: psycopg.Connection, scheme: str
) -> None:
    routine = _hook(conn, scheme)
    body = f'{{"scheme": "{scheme}"}}'.encode()
    run = run_of(
        conn, _receive(conn, f"hook-{scheme}", body, signed_headers(scheme, SECRETS[scheme], body))
    )
    assert run["routine_id"] == routine and run["status"] != "skipped"
    assert body.decode() in run["context"]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_tampered_body_is_refused(conn: psycopg.Connection, scheme: str) -> None:
    _hook(conn, scheme)
    headers = signed_headers(scheme, SECRETS[scheme], b'{"amount": 1}')
    assert _code(conn, f"hook-{scheme}", b'{"amount": 1000}', headers) == "CE401"
    assert conn.execute("select count(*) from ceaseless.routine_runs").fetchone() == (0,)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_request_signed_with_another_secret_is_refused(
    conn: psycopg.Connection, scheme: str
) -> None:
    _hook(conn, scheme)
    other = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    headers = signed_headers(scheme, other, b"{}")
    assert _code(conn, f"hook-{scheme}", b"{}", headers) == "CE401"


@pytest.mark.parametrize("scheme", TIMED)
def test_a_stale_request_is_refused_as_stale(conn: psycopg.Connection, scheme: str) -> None:
    _hook(conn, scheme)
    for skew in (timedelta(minutes=-6), timedelta(minutes=6)):
        at = datetime.now(UTC) + skew
        headers = signed_headers(scheme, SECRETS[scheme], b"{}", at=at)
        assert _code(conn, f"hook-{scheme}", b"{}", headers) == "CE403"


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_replayed_request_is_refused(conn: psycopg.Connection, scheme: str) -> None:
    _hook(conn, scheme)
    headers = signed_headers(scheme, SECRETS[scheme], b"{}")
    _receive(conn, f"hook-{scheme}", b"{}", headers)
    assert _code(conn, f"hook-{scheme}", b"{}", headers) == "CE413"
    assert conn.execute("select count(*) from ceaseless.routine_runs").fetchone() == (1,)


def test_github_refuses_a_delivery_id_seen_before_and_a_body_resent_under_a_new_id(
    conn: psycopg.Connection,
) -> None:
    _hook(conn, "github")
    first = signed_headers("github", GITHUB_SECRET, b'{"n": 1}', delivery="d-1")
    _receive(conn, "hook-github", b'{"n": 1}', first)
    # A redelivery: the same id, whatever the body.
    again = signed_headers("github", GITHUB_SECRET, b'{"n": 2}', delivery="d-1")
    assert _code(conn, "hook-github", b'{"n": 2}', again) == "CE413"
    # GitHub does not sign the delivery id: a captured request resent under a
    # fresh id is still the same signature.
    renamed = {**first, "X-GitHub-Delivery": "d-2"}
    assert _code(conn, "hook-github", b'{"n": 1}', renamed) == "CE413"
    fresh = signed_headers("github", GITHUB_SECRET, b'{"n": 3}', delivery="d-3")
    _receive(conn, "hook-github", b'{"n": 3}', fresh)


def test_standard_refuses_a_message_id_seen_before_even_signed_anew(
    conn: psycopg.Connection,
) -> None:
    _hook(conn, "standard")
    _receive(
        conn,
        "hook-standard",
        b"{}",
        signed_headers("standard", STANDARD_SECRET, b"{}", delivery="msg_1"),
    )
    later = signed_headers(
        "standard",
        STANDARD_SECRET,
        b"{}",
        at=datetime.now(UTC) + timedelta(seconds=2),
        delivery="msg_1",
    )
    assert _code(conn, "hook-standard", b"{}", later) == "CE413"


@pytest.mark.parametrize(
    ("scheme", "headers", "sqlstate"),
    [
        (
            "github",
            {"X-Hub-Signature-256": "sha256=" + sign_github(GITHUB_SECRET, b"{}")[7:]},
            "CE401",
        ),  # no delivery id
        ("github", {"X-GitHub-Delivery": "d"}, "CE401"),
        ("github", {"X-Hub-Signature-256": "sha1=abc", "X-GitHub-Delivery": "d"}, "CE401"),
        ("standard", {"webhook-id": "m", "webhook-signature": "v1,x"}, "CE403"),
        ("standard", {"webhook-id": "m", "webhook-timestamp": "NOW"}, "CE403"),
        ("stripe", {"Stripe-Signature": "v1=" + "0" * 64}, "CE403"),
        ("stripe", {"Stripe-Signature": "t=,v1="}, "CE403"),
        ("ceaseless", {"X-Ceaseless-Signature": "sha256=" + "0" * 64}, "CE403"),
        ("ceaseless", {}, "CE403"),
    ],
)
def test_missing_or_malformed_headers_are_refused(
    conn: psycopg.Connection, scheme: str, headers: dict[str, str], sqlstate: str
) -> None:
    _hook(conn, scheme)
    assert _code(conn, f"hook-{scheme}", b"{}", headers) == sqlstate


def test_a_routine_of_one_scheme_refuses_another_schemes_signature(
    conn: psycopg.Connection,
) -> None:
    _hook(conn, "github")
    ceaseless = signed_headers("ceaseless", GITHUB_SECRET, b"{}")
    assert _code(conn, "hook-github", b"{}", ceaseless) == "CE401"


@pytest.mark.parametrize("scheme", SCHEMES)
def test_garbage_headers_only_ever_refuse_as_unauthenticated(
    conn: psycopg.Connection, scheme: str
) -> None:
    # Whatever a stranger puts in the headers, the answer is CE401, CE403 or
    # CE413: never a cast error. Only the one valid request can pass, once.
    _hook(conn, scheme)
    rng = random.Random(11)
    names = [
        "X-Ceaseless-Timestamp",
        "X-Ceaseless-Signature",
        "X-Hub-Signature-256",
        "X-GitHub-Delivery",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "Stripe-Signature",
    ]
    valid = signed_headers(scheme, SECRETS[scheme], b"{}")
    pieces = [
        *("t=", "v1=", "v1,", "sha256=", ",", " ", "=", "9" * 12, "-1", "é", "\\"),
        *("0" * 64, "A" * 43 + "=", str(int(datetime.now(UTC).timestamp()))),
    ]
    accepted = 0
    for _ in range(150):
        headers = {**valid} if rng.random() < 0.5 else {}
        for name in rng.sample(names, rng.randint(1, 4)):
            headers[name] = "".join(
                rng.choice(pieces + list(string.printable)) for _ in range(rng.randint(0, 12))
            )
        try:
            _receive(conn, f"hook-{scheme}", b"{}", headers)
            accepted += 1
        except psycopg.Error as error:
            assert error.sqlstate in ("CE401", "CE403", "CE413"), (headers, error)
    assert accepted <= 1
    assert conn.execute("select count(*) from ceaseless.routine_runs").fetchone() == (accepted,)


def test_the_four_argument_form_is_the_ceaseless_scheme(conn: psycopg.Connection) -> None:
    _hook(conn, "ceaseless")
    ts = int(datetime.now(UTC).timestamp())
    row = conn.execute(
        "select ceaseless.receive_webhook('hook-ceaseless', %s, %s, %s)",
        (b"{}", sign(SECRETS["ceaseless"], ts, b"{}"), datetime.fromtimestamp(ts, UTC)),
    ).fetchone()
    assert row is not None and row[0] is not None
    # Replayed through the header form: the same request, remembered once.
    headers = {
        "x-ceaseless-timestamp": str(ts),
        "x-ceaseless-signature": sign(SECRETS["ceaseless"], ts, b"{}"),
    }
    assert _code(conn, "hook-ceaseless", b"{}", headers) == "CE413"


# Validation at INSERT ------------------------------------------------------


def _refusal(conn: psycopg.Connection, config: dict[str, Any]) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as error:
        make_routine(conn, "bad", "webhook", config)
    assert error.value.sqlstate == "CE422"
    return error.value


@pytest.mark.parametrize("scheme", ["GitHub", "svix", "", 1, ["github"]])
def test_an_unknown_scheme_is_refused_naming_the_field(
    conn: psycopg.Connection, scheme: object
) -> None:
    error = _refusal(conn, {"path": "p", "secret": SECRETS["ceaseless"], "scheme": scheme})
    assert "trigger_config.scheme" in str(error)
    assert "ceaseless, github, standard, stripe" in str(error)


@pytest.mark.parametrize(
    "secret",
    [
        "a-signing-secret-of-some-length",  # no prefix
        "whsec_not base64 at all!",
        "whsec_" + base64.b64encode(b"sixteen bytes!!!").decode(),  # fewer than 24 bytes
        "whsec_" + base64.b64encode(bytes(65)).decode(),  # more than 64
    ],
)
def test_a_standard_secret_must_be_whsec_base64(conn: psycopg.Connection, secret: str) -> None:
    error = _refusal(conn, {"path": "p", "secret": secret, "scheme": "standard"})
    assert "trigger_config.secret" in str(error) and "whsec_" in str(error)
    assert secret not in str(error)  # a secret never reaches an error message


def test_a_scheme_cannot_be_changed_to_one_its_secret_cannot_sign(
    conn: psycopg.Connection,
) -> None:
    routine = _hook(conn, "ceaseless")
    with pytest.raises(psycopg.Error) as error:
        conn.execute(
            "update ceaseless.routines set trigger_config = trigger_config || "
            '\'{"scheme": "standard"}\' where id = %s',
            (routine,),
        )
    assert error.value.sqlstate == "CE422" and "trigger_config.secret" in str(error.value)


def test_absent_scheme_means_ceaseless(conn: psycopg.Connection) -> None:
    make_routine(conn, "plain", "webhook", {"path": "plain", "secret": SECRETS["ceaseless"]})
    _receive(conn, "plain", b"{}", signed_headers("ceaseless", SECRETS["ceaseless"], b"{}"))


# Loops ------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_loop_with_each_scheme_fires(conn: psycopg.Connection, scheme: str) -> None:
    loop = make_loop(conn, triggers={"webhook_enabled": True, "webhook_scheme": scheme})
    row = loop_row(conn, loop)
    key = row["webhook_signing_key"]
    if scheme == "standard":
        assert key.startswith("whsec_") and len(base64.b64decode(key[6:])) == 32
    else:
        assert len(key) == 64
    body = b'{"alert": "disk full"}'
    run = _receive(conn, row["webhook_token"], body, signed_headers(scheme, key, body))
    [iteration] = runs(conn, loop)
    assert iteration["id"] == run and iteration["trigger_type"] == "webhook"
    assert "disk full" in iteration["task"]
    tampered = signed_headers(scheme, key, b"{}")
    assert _code(conn, row["webhook_token"], body, tampered) == "CE401"


def test_a_loops_new_scheme_rotates_its_key_and_keeps_its_token(
    conn: psycopg.Connection,
) -> None:
    loop = make_loop(conn, triggers={"webhook_enabled": True})
    before = loop_row(conn, loop)
    conn.execute(
        'update ceaseless.loops set triggers = triggers || \'{"webhook_scheme": "standard"}\' '
        "where id = %s",
        (loop,),
    )
    after = loop_row(conn, loop)
    assert after["webhook_token"] == before["webhook_token"]
    assert after["webhook_signing_key"] != before["webhook_signing_key"]
    assert after["webhook_signing_key"].startswith("whsec_")
    # The old key signs nothing any more.
    old = signed_headers("ceaseless", before["webhook_signing_key"], b"{}")
    assert _code(conn, after["webhook_token"], b"{}", old) == "CE401"


def test_a_loops_unknown_scheme_is_refused_naming_the_field(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as error:
        make_loop(conn, triggers={"webhook_enabled": True, "webhook_scheme": "hmac"})
    assert error.value.sqlstate == "CE422"
    assert "loops.triggers.webhook_scheme" in str(error.value)
