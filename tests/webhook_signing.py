"""How a webhook sender signs a request (spec 7), for tests that play the sender."""

from __future__ import annotations

import hashlib
import hmac


def sign(secret: str, timestamp: int, body: bytes) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + digest.hexdigest()
