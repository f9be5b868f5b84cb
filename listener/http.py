"""The webhook ingress: POST /hooks/{path} → receive_webhook, SQLSTATE → HTTP status.

Served by the listener process (`ceaseless listen --http 127.0.0.1:8787`) with
aiohttp, a maintained HTTP server: this module parses nothing by hand. It only
passes the path, the raw body and the two signature headers to the SQL function
and maps its SQLSTATEs to status codes; verification, replay protection and
guardrails are the database's.

Guarantees: a body over the limit (the webhook_max_body_bytes setting) is
refused with 413 before it reaches the database; an error answer never
includes more than the database's message; every database call has a deadline,
on a pool of the ingress's own, so a flood of requests cannot take the
connections the listener's leases depend on.
"""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
from aiohttp import web
from psycopg_pool import AsyncConnectionPool

from listener import db, log
from listener.errors import SqlState
from listener.queries import webhooks

TIMESTAMP_HEADER = "X-Ceaseless-Timestamp"
SIGNATURE_HEADER = "X-Ceaseless-Signature"

STATUS_BY_SQLSTATE: dict[str, int] = {
    SqlState.NOT_FOUND: 404,
    SqlState.BAD_SIGNATURE: 401,
    SqlState.STALE_TIMESTAMP: 401,
    SqlState.DISABLED: 409,
    SqlState.COOLDOWN: 409,
    SqlState.CONCURRENCY: 409,
    SqlState.GLOBAL_CAP: 409,
    SqlState.REPLAY: 409,
    SqlState.DUPLICATE: 409,
}

_POOL = web.AppKey("pool", AsyncConnectionPool)
_DEADLINE = web.AppKey("deadline", float)


def make_app(
    pool: AsyncConnectionPool, *, max_body: int, deadline: float = 15.0
) -> web.Application:
    app = web.Application(client_max_size=max_body)
    app[_POOL] = pool
    app[_DEADLINE] = deadline
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
    deadline = request.app[_DEADLINE]
    try:
        run_id = await db.call(
            pool,
            "receive_webhook",
            lambda conn: webhooks.receive(conn, path, body, signature, sent_at),
            deadline,
        )
    except psycopg.Error as exc:
        status = STATUS_BY_SQLSTATE.get(exc.sqlstate or "")
        if status is None:
            raise
        # The raise rolled back the refused fire's record; SQL decides whether
        # this refusal is one to record (a guardrail) and writes it.
        sqlstate = exc.sqlstate or ""
        await db.call(
            pool,
            "record_refused_webhook",
            lambda conn: webhooks.record_refusal(conn, path, sqlstate, body),
            deadline,
        )
        log.event("webhook.refused", path=path, status=status, sqlstate=exc.sqlstate)
        return web.json_response({"error": exc.diag.message_primary}, status=status)
    log.event("webhook.accepted", path=path, run=str(run_id))
    return web.json_response({"run_id": str(run_id)}, status=202)


def _timestamp(header: str | None) -> datetime | None:
    if header is None or not header.strip().isdigit():
        return None
    return datetime.fromtimestamp(int(header.strip()), UTC)


class Ingress:
    """The running ingress: its server and its own small pool."""

    def __init__(self, runner: web.AppRunner, pool: AsyncConnectionPool) -> None:
        self._runner = runner
        self._pool = pool

    async def close(self) -> None:
        await self._runner.cleanup()
        await self._pool.close(timeout=5)


async def serve(
    url: str, address: str, *, worker_id: str, max_body: int, deadline: float
) -> Ingress:
    """Serve POST /hooks/{path} on `address` (HOST:PORT) until the returned Ingress is closed.

    The ingress has a pool of its own: a flood of webhooks must not take the
    connections that renew the listener's leases.
    """
    host, _, port = address.rpartition(":")
    pool = db.pool(
        url, application_name=f"ceaseless ingress {worker_id}", size=4, deadline=deadline
    )
    await pool.open(wait=False)
    runner = web.AppRunner(make_app(pool, max_body=max_body, deadline=deadline), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host or "127.0.0.1", int(port)).start()
    log.event("http.listening", host=host or "127.0.0.1", port=int(port), max_body=max_body)
    return Ingress(runner, pool)
