"""How webhook senders sign requests, per scheme (spec 7 and 11), for tests that play the sender.

The standard scheme is signed by the `standardwebhooks` library itself, so a
request that verifies here is one its real users would send.
"""

from __future__ import annotations

import hashlib
import hmac
import uuid
from datetime import UTC, datetime

from standardwebhooks import Webhook


def sign(secret: str, timestamp: int, body: bytes) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + digest.hexdigest()


def sign_github(secret: str, body: bytes) -> str:
    """X-Hub-Signature-256 as GitHub computes it: HMAC-SHA256 of the raw body."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def sign_stripe(secret: str, timestamp: int, body: bytes) -> str:
    """Stripe-Signature: t=<ts>,v1=<hex of HMAC-SHA256(secret, "<ts>.<body>")>."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={digest.hexdigest()}"


def signed_headers(
    scheme: str,
    secret: str,
    body: bytes,
    *,
    at: datetime | None = None,
    delivery: str | None = None,
) -> dict[str, str]:
    """The headers a sender of `scheme` puts on `body` at time `at` (now by default).

    `delivery` is GitHub's X-GitHub-Delivery or Standard Webhooks' webhook-id
    (fresh when not given).
    """
    when = (at or datetime.now(UTC)).replace(microsecond=0)
    ts = int(when.timestamp())
    match scheme:
        case "ceaseless":
            return {
                "X-Ceaseless-Timestamp": str(ts),
                "X-Ceaseless-Signature": sign(secret, ts, body),
            }
        case "github":
            return {
                "X-GitHub-Event": "push",
                "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
                "X-Hub-Signature-256": sign_github(secret, body),
            }
        case "standard":
            msg_id = delivery or f"msg_{uuid.uuid4().hex}"
            return {
                "webhook-id": msg_id,
                "webhook-timestamp": str(ts),
                "webhook-signature": Webhook(secret).sign(msg_id, when, body.decode()),
            }
        case "stripe":
            return {"Stripe-Signature": sign_stripe(secret, ts, body)}
    raise ValueError(f"unknown scheme {scheme!r}")
