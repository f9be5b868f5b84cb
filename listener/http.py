"""The webhook ingress: POST /hooks/{path} → receive_webhook, SQLSTATE → HTTP status.

Served by the listener process (`ceaseless listen --http 127.0.0.1:8787`) with
aiohttp, a maintained HTTP server: this module parses nothing by hand. It only
passes the path, the raw body and the two signature headers to the SQL function
and maps its SQLSTATEs to status codes; verification, replay protection and
guardrails are the database's.

Guarantees: a body over the limit is refused with 413 before it reaches the
database; an error answer never includes more than the database's message.
"""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
from aiohttp import web
from psycopg_pool import AsyncConnectionPool

from listener import log
from listener.errors import SqlState

DEFAULT_MAX_BODY = 1 << 20
TIMESTAMP_HEADER = "X-Ceaseless-Timestamp"
SIGNATURE_HEADER = "X-Ceaseless-Signature"

STATUS_BY_SQLSTATE: dict[str, int] = {
    SqlState.NOT_FOUND: 404,
    SqlState.BAD_SIGNATURE: 401,
    SqlState.STALE_TIMESTAMP: 401,
    SqlState.DISABLED: 409,
    SqlState.COOLDOWN: 409,
    SqlState.CONCURRENCY: 409,
    SqlState.REPLAY: 409,
    SqlState.DUPLICATE: 409,
}

_POOL = web.AppKey("pool", AsyncConnectionPool)


def make_app(pool: AsyncConnectionPool, *, max_body: int = DEFAULT_MAX_BODY) -> web.Application:
    app = web.Application(client_max_size=max_body)
    app[_POOL] = pool
    app.router.add_post("/hooks/{path}", _receive)
    app.router.add_get("/healthz", _health)
    return app


async def _health(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def _receive(request: web.Request) -> web.Response:
    path = request.match_info["path"]
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        log.warning("webhook.too_large", path=path)
        return web.json_response({"error": "body too large"}, status=413)
    sent_at = _timestamp(request.headers.get(TIMESTAMP_HEADER))
    if sent_at is None:
        return web.json_response(
            {"error": f"{TIMESTAMP_HEADER} must be integer unix seconds"}, status=401
        )
    signature = request.headers.get(SIGNATURE_HEADER, "")
    pool = request.app[_POOL]
    try:
        async with pool.connection() as conn:
            cur = await conn.execute(
                "select ceaseless.receive_webhook(%s, %s, %s, %s)", (path, body, signature, sent_at)
            )
            row = await cur.fetchone()
    except psycopg.Error as exc:
        status = STATUS_BY_SQLSTATE.get(exc.sqlstate or "")
        if status is None:
            raise
        # The raise rolled back the refused fire's record; SQL decides whether
        # this refusal is one to record (a guardrail) and writes it.
        async with pool.connection() as conn:
            await conn.execute(
                "select ceaseless._record_refused_webhook(%s, %s, %s)",
                (path, exc.sqlstate, body),
            )
        log.event("webhook.refused", path=path, status=status, sqlstate=exc.sqlstate)
        return web.json_response({"error": exc.diag.message_primary}, status=status)
    run_id = row[0] if row else None
    log.event("webhook.accepted", path=path, run=str(run_id))
    return web.json_response({"run_id": str(run_id)}, status=202)


def _timestamp(header: str | None) -> datetime | None:
    if header is None or not header.strip().isdigit():
        return None
    return datetime.fromtimestamp(int(header.strip()), UTC)


async def serve(pool: AsyncConnectionPool, host: str, port: int, max_body: int) -> web.AppRunner:
    """Start the ingress; the caller keeps the runner and calls cleanup() to stop."""
    runner = web.AppRunner(make_app(pool, max_body=max_body), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    log.event("http.listening", host=host, port=port, max_body=max_body)
    return runner
