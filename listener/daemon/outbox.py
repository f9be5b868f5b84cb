"""Deliver due notifications from the outbox through their sinks.

One round of `deliver_due` claims a batch (claim_notifications), delivers the
rows the database hands over — log sinks as one structured log line, webhook
sinks as concurrent HTTP POSTs — and reports every outcome in one call
(finish_notifications). Whether a failure is retried, when, and when to give
up is decided in SQL (functions/60_notifications.sql); this module only moves
notifications to their sinks and results back. `pg` sinks never reach it: the
claim delivers them in SQL.

Guarantees:
- at-least-once: a batch that is claimed but never finished (crash, lost
  connection, cancellation) comes due again when its 60 s lease passes, so a
  receiver may see a notification twice and should deduplicate on its id;
- a sink failure never raises: it becomes a failed attempt with its reason;
  only database errors propagate, and the caller retries the round;
- each webhook POST ends within its sink's `timeout_secs` (at most 30, checked
  in SQL), well inside the lease;
- a webhook's body is in its sink's `format` (checked in SQL): `generic`, the
  notification as JSON; `slack`, a non-empty `text` and section blocks within
  Slack's limits; `discord`, a non-empty `content` within Discord's 2,000
  characters, mentioning nobody. A text too long for its field is cut to fit,
  with a marker saying how much was cut, never refused;
- a failure's text (stored in last_error, shown in views, logged) names the
  receiver by origin only and holds none of the sink's credentials: its URL
  beyond the origin and its header values are replaced by "(hidden)" wherever
  they occur, a receiver quoting the request back included.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit
from uuid import UUID

import aiohttp
from psycopg_pool import AsyncConnectionPool

from listener import log
from listener.database import connections
from listener.queries import outbox
from listener.queries.outbox import ClaimedNotification

NOTIFICATION_CHANNEL = "ceaseless_notification"

_DEFAULT_TIMEOUT_SECS = 10.0
# Enough of a refusing receiver's answer to explain itself in last_error.
_ERROR_BODY_BYTES = 300
HIDDEN = "(hidden)"
# Path segments at least this long are treated as credentials on their own
# (Slack's /services/T…/B…/<secret>), so a receiver quoting one is scrubbed too.
_SECRET_SEGMENT_CHARS = 8


@dataclass(frozen=True)
class Result:
    id: UUID
    attempt: int
    ok: bool
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"id": str(self.id), "attempt": self.attempt, "ok": self.ok, "error": self.error}


async def deliver_due(
    pool: AsyncConnectionPool,
    worker: str,
    *,
    http: aiohttp.ClientSession,
    limit: int = 100,
    deadline: float = 15.0,
) -> int:
    """Claim, deliver and finish one batch of due notifications; returns how many it handled.

    Raises only psycopg errors (the database is away or refused a call, or a
    call outlived `deadline` seconds); every sink failure is recorded as a
    failed attempt instead.
    """
    claimed = await connections.call(
        pool, "claim_notifications", lambda conn: outbox.claim(conn, worker, limit), deadline
    )
    for settled in claimed:
        if settled.state != "claimed":
            _log_settled(settled)
    to_deliver = [n for n in claimed if n.state == "claimed"]
    if not to_deliver:
        return len(claimed)

    results = await asyncio.gather(*(_deliver(n, http) for n in to_deliver))
    finished = await connections.call(
        pool,
        "finish_notifications",
        lambda conn: outbox.finish(conn, worker, [r.as_json() for r in results]),
        deadline,
    )
    sinks = {n.id: n.sink_name for n in to_deliver}
    for settled in finished:
        if settled.status not in ("pending", "failed"):
            continue
        # A failed attempt: retried at next_attempt_at (pending), or given up (failed).
        retried = settled.status == "pending"
        when = {"next_attempt_at": settled.next_attempt_at.isoformat()} if retried else {}
        log.warning(
            "notification.retry_scheduled" if retried else "notification.failed",
            id=str(settled.id),
            sink=sinks.get(settled.id),
            attempts=settled.attempts,
            **when,
            error=settled.last_error,
        )
    return len(claimed)


def _log_settled(n: ClaimedNotification) -> None:
    if n.state == "delivered":
        log.debug("notification.delivered", id=str(n.id), sink=n.sink_name, type="pg")
    else:
        log.warning("notification.failed", id=str(n.id), sink=n.sink_name, error=n.last_error)


async def _deliver(n: ClaimedNotification, http: aiohttp.ClientSession) -> Result:
    sink = n.sink or {}
    kind = sink.get("type")
    try:
        if kind == "log":
            _deliver_log(n)
        elif kind == "webhook":
            error = await _post(n, sink, http)
            if error is not None:
                return Result(n.id, n.attempts, False, error)
            log.debug("notification.delivered", id=str(n.id), sink=n.sink_name, type="webhook")
        else:
            return Result(
                n.id, n.attempts, False, f"this listener cannot deliver sink type {kind!r}"
            )
    except Exception as exc:  # a sink's failure is a failed attempt, never a crash
        return Result(n.id, n.attempts, False, scrub(f"{type(exc).__name__}: {exc}", sink))
    return Result(n.id, n.attempts, True)


def _credentials(sink: dict[str, Any]) -> list[str]:
    """Every text of a sink that is, or may contain, a credential: longest first."""
    found: list[str] = []
    url = sink.get("url")
    if isinstance(url, str) and url:
        found.append(url)
        try:
            parts = urlsplit(url)
        except ValueError:
            parts = None
        if parts is not None:
            tail = url[len(url_origin(url)) :] if url.startswith(url_origin(url)) else ""
            found += [tail, parts.path, unquote(parts.path), parts.query, unquote(parts.query)]
            found += [parts.username or "", parts.password or ""]
            found += [p for p in parts.path.split("/") if len(p) >= _SECRET_SEGMENT_CHARS]
            for _, value in parse_qsl(parts.query, keep_blank_values=True):
                found.append(value)
    headers = sink.get("headers")
    if isinstance(headers, dict):
        for value in headers.values():
            text = str(value)
            # "Bearer <token>": the token alone is quoted as often as the whole.
            found += [text, *text.split()[1:]]
    return sorted({f for f in found if f and f != "/"}, key=len, reverse=True)


def scrub(text: str, sink: dict[str, Any]) -> str:
    """The text with every credential of the sink (URL beyond its origin, header values) hidden."""
    for secret in _credentials(sink):
        text = text.replace(secret, HIDDEN)
    return text


def _deliver_log(n: ClaimedNotification) -> None:
    log.event(
        "notification.delivered",
        id=str(n.id),
        sink=n.sink_name,
        type="log",
        kind=n.kind,
        recipient=n.recipient,
        subject=n.subject,
        body=n.body,
        source_table=n.source_table,
        source_id=str(n.source_id),
        attempt=n.attempts,
    )


def url_origin(url: str) -> str:
    """scheme://host[:port] of a URL: no userinfo, path or query, where credentials live."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # a port that is not a number
        return "(not a URL)"
    if not parts.scheme or not parts.hostname:
        return "(not a URL)"
    return f"{parts.scheme}://{parts.hostname}{port}"


def webhook_document(n: ClaimedNotification, fmt: str = "generic") -> dict[str, Any]:
    """The JSON body a webhook of format `fmt` receives (see the module docstring)."""
    if fmt == "slack":
        return _slack_document(n)
    if fmt == "discord":
        return _discord_document(n)
    return {
        "id": str(n.id),
        "kind": n.kind,
        "subject": n.subject,
        "body": n.body,
        "recipient": n.recipient,
        "source_table": n.source_table,
        "source_id": str(n.source_id),
        "created_at": n.created_at.isoformat(),
    }


# Slack's incoming webhooks: `text` past 40,000 characters is truncated by
# Slack (we cut first, with a marker), a section's text is at most 3,000, and
# a message holds at most 50 blocks (we send three).
SLACK_TEXT_CHARS = 40_000
SLACK_BLOCK_CHARS = 3_000
# Discord's webhooks refuse (400) a `content` that is empty or past 2,000.
DISCORD_CONTENT_CHARS = 2_000


def cut(text: str, limit: int) -> str:
    """The text within `limit` characters (UTF-16 units, as JavaScript counts them, which is
    never fewer than code points), ending with a marker of how much was cut when it was."""
    if _units(text) <= limit:
        return text
    head = text[:limit]
    while True:
        marker = f"… [cut: {len(text) - len(head)} more characters]"
        over = _units(head) + _units(marker) - limit
        if over <= 0:
            return head + marker
        head = head[: len(head) - over]


def _units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _slack_escape(text: str) -> str:
    """Slack's mrkdwn control characters escaped: `<!channel>` in an agent's text pings nobody."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack_document(n: ClaimedNotification) -> dict[str, Any]:
    subject, body = _slack_escape(n.subject), _slack_escape(n.body)
    footer = f"{n.kind} · {n.source_table} {n.source_id} · notification {n.id}"
    text = cut(f"*{subject}*" + (f"\n{body}" if body else ""), SLACK_TEXT_CHARS)
    # A section's text may not be empty (invalid_blocks): a body-less
    # notification is a subject alone.
    blocks: list[dict[str, Any]] = [_slack_section(f"*{subject}*")]
    if body.strip():
        blocks.append(_slack_section(body))
    blocks.append(
        {
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": cut(footer, SLACK_BLOCK_CHARS)}],
        }
    )
    return {"text": text, "blocks": blocks}


def _slack_section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": cut(text, SLACK_BLOCK_CHARS)}}


def _discord_document(n: ClaimedNotification) -> dict[str, Any]:
    content = f"**{n.subject}**" + (f"\n{n.body}" if n.body else "")
    return {
        "content": cut(content, DISCORD_CONTENT_CHARS),
        # An agent's text may say @everyone: the notification pings nobody.
        "allowed_mentions": {"parse": []},
    }


async def _post(
    n: ClaimedNotification, sink: dict[str, Any], http: aiohttp.ClientSession
) -> str | None:
    """POST the notification; None when the receiver answered 2xx, else why not."""
    url = str(sink["url"])
    # Errors are kept in notifications.last_error, shown in views and logged:
    # they name the receiver by origin only, since hooks of the Slack and
    # Discord kind carry their credential in the path.
    origin = url_origin(url)
    timeout = float(sink.get("timeout_secs", _DEFAULT_TIMEOUT_SECS))
    headers = {"Content-Type": "application/json", **sink.get("headers", {})}
    try:
        # asyncio.timeout bounds the whole exchange, including waiting for a
        # free connection and reading the answer, so the lease is never outlived.
        async with asyncio.timeout(timeout):
            async with http.post(
                url,
                data=json.dumps(webhook_document(n, str(sink.get("format", "generic")))).encode(),
                headers=headers,
                # A redirected POST may be replayed as a GET and answer 200
                # without anyone receiving the notification.
                allow_redirects=False,
            ) as response:
                if 200 <= response.status < 300:
                    return None
                excerpt = await response.content.read(_ERROR_BODY_BYTES)
                text = scrub(excerpt.decode("utf-8", "replace").strip(), sink)
                return f"webhook {origin} answered HTTP {response.status}" + (
                    f": {text}" if text else ""
                )
    except TimeoutError:
        return f"webhook {origin} did not answer within {timeout:g} s"
    except aiohttp.ClientError as exc:
        return f"webhook {origin} failed: {type(exc).__name__}: {scrub(str(exc), sink)}"
    except ValueError as exc:  # yarl's refusal of a malformed URL quotes it whole
        return f"webhook {origin} failed: {type(exc).__name__}"
