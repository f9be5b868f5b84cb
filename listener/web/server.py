"""The webhook ingress: POST /hooks/{path} → _receive_webhook, SQLSTATE → HTTP status.

Served by the listener process (`ceaseless listen --http 127.0.0.1:8787`) with
aiohttp, a maintained HTTP server: this module parses nothing by hand. It only
passes the path, the raw body and the signing headers to SQL and maps
SQLSTATEs to status codes; verification under the target's signature scheme
(ceaseless, github, standard, stripe), replay protection and guardrails are
the database's. Which headers to pass is the database's word too
(_webhook_header_names(), read once at start); no others reach it.

The endpoint faces strangers, so it fails closed and is bounded:

- malformed input (an X-Ceaseless-Timestamp that is not plain digits, an
  X-Ceaseless-Signature that is not `sha256=<64 hex>`, a signing header that
  is not printable ASCII, a path outside the token grammar, a NUL) is
  answered 400/401/404 before any database round trip, never 500;
- at most `max_requests` requests are in hand at once (503 beyond); a client
  gets `read_timeout` seconds to send its headers and as long again for its
  body (408), and a body over `max_body` is refused from its Content-Length or
  as soon as it outgrows the limit (413);
- one round trip per request, on a small pool of the ingress's own, so a flood
  cannot take the connections that extend the listener's leases;
- a fire refused by a guardrail is committed as a skipped run together with
  the signature's replay record (409), so the same request replayed later is
  refused as a replay; a fire the target's overlap policy or debounce holds
  is accepted (202, `"buffered": true`) and starts later;
- log lines carry at most a bounded prefix of anything the client sent, and
  what strangers can repeat at will (refusals, malformed HTTP, answered 400
  by aiohttp and logged as a warning) is counted per interval (log.Tally),
  not written a line per request;
- who may use which route is listener/web/access.py's one rule, installed here
  as the outermost middleware: the ingress and /healthz are open to anyone,
  everything else needs the token.

The listening socket is bound by `bind` before anything else starts
(supervisor.py), so a taken port ends the listener at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import psycopg
import psycopg_pool
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from listener import log
from listener.database import connections
from listener.errors import SqlState
from listener.queries import webhooks
from listener.web import access, dashboard, metrics, observer
from listener.web import token as http_token

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

# Unix seconds as plain ASCII digits; 11 digits reach the year 5138, past
# which datetime cannot go. str.isdigit() would let "²" through.
_TIMESTAMP = re.compile(r"[0-9]{1,11}")
_SIGNATURE = re.compile(r"sha256=[0-9a-f]{64}")
# What any signing header of any scheme is made of: jsonb cannot carry a NUL,
# and undecodable bytes (surrogates) cannot be sent to the database at all.
_HEADER_VALUE = re.compile(r"[\x20-\x7e]*")
# How long the rest of an unread body is drained after an early answer.
_LINGERING_SECS = 1.0
# What a log line keeps of a client's text.
_LOGGED_CHARS = 120
# Refusals and malformed requests: a count per interval, not a line each.
_REFUSALS = log.Tally()


@dataclass(frozen=True)
class Limits:
    """What one ingress accepts: body size, requests in hand, and read time."""

    max_body: int
    max_requests: int = 256
    read_timeout: float = 10.0
    db_deadline: float = 15.0


_POOL = web.AppKey("pool", psycopg_pool.AsyncConnectionPool)
_LIMITS = web.AppKey("limits", Limits)
_TOKEN = web.AppKey("token", re.Pattern)
_HEADERS = web.AppKey("headers", frozenset)


def make_app(
    pool: psycopg_pool.AsyncConnectionPool,
    limits: Limits,
    token_pattern: str,
    hub: observer.Hub | None = None,
    *,
    gate: access.Gate,
    header_names: frozenset[str],
    dashboard_user: str | None = None,
    worker_id: str = "",
) -> web.Application:
    """The aiohttp application; `token_pattern` is SQL's _webhook_token_pattern(),
    `header_names` its _webhook_header_names() (lower case), `gate` its access rule.

    With `hub`, the run observer's routes too (listener/web/observer.py), and the
    dashboard's (listener/web/dashboard/), which reads on the observer's pool;
    GET /metrics always (listener/web/metrics.py).
    """
    app = web.Application(
        client_max_size=limits.max_body,
        # Outermost after the gate, so the in-hand cap's refusals are counted too.
        middlewares=[metrics.count_webhook_responses, _in_hand_cap(limits.max_requests)],
    )
    access.install(app, gate)
    app[_POOL] = pool
    app[_LIMITS] = limits
    app[_TOKEN] = re.compile(token_pattern)
    app[_HEADERS] = header_names
    access.expose(
        app,
        access.Exposure.ANYONE,
        app.router.add_post("/hooks/{path}", _receive),
        app.router.add_get("/healthz", _health),
    )
    if hub is not None:
        observer.mount(app, hub)
        dashboard.mount(
            app,
            dashboard.Dashboard(
                hub.pool,
                gate,
                user=dashboard_user or dashboard.default_user(),
                db_deadline=hub.limits.db_deadline,
                worker_id=worker_id,
            ),
        )
    metrics.mount(app, pool, limits.db_deadline)
    return app


def _in_hand_cap(max_requests: int) -> Callable[..., Awaitable[web.StreamResponse]]:
    """A middleware answering 503 at once when `max_requests` are already in hand.

    Refusing beats queueing: a queue of slow clients would hold memory and
    make every valid sender wait behind them. The observer's streams, open
    for as long as their clients follow, are capped by the observer itself
    and do not count here: they must not shut webhooks out.
    """
    in_hand = 0

    @web.middleware
    async def cap(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        nonlocal in_hand
        route = request.match_info.route.name
        if route is not None and route.startswith(observer.ROUTE_PREFIX):
            return await handler(request)
        if in_hand >= max_requests:
            return _error(503, "too many requests in progress; retry", headers={"Retry-After": "1"})
        in_hand += 1
        try:
            return await handler(request)
        finally:
            in_hand -= 1

    return cap


async def _health(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def _receive(request: web.Request) -> web.Response:
    path = request.match_info["path"]
    limits = request.app[_LIMITS]
    if not request.app[_TOKEN].fullmatch(path):
        return _error(404, "no webhook at this path")
    if request.content_length is not None and request.content_length > limits.max_body:
        return _error(413, f"body over {limits.max_body} bytes")
    headers, refusal = _signing_headers(request)
    if refusal is not None:
        return refusal
    try:
        async with asyncio.timeout(limits.read_timeout):
            body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return _error(413, f"body over {limits.max_body} bytes")
    except TimeoutError:
        log.warning("webhook.body_timeout", path=_shown(path), secs=limits.read_timeout)
        return _error(408, f"body not received within {limits.read_timeout:g} s")
    except ConnectionError as exc:
        # The client went away mid-body: nobody is left to answer.
        log.warning("webhook.client_gone", path=_shown(path), error=_bounded(exc))
        raise web.HTTPBadRequest() from None
    return await _verify_and_fire(request, path, body, headers)


def _signing_headers(
    request: web.Request,
) -> tuple[dict[str, str], None] | tuple[None, web.Response]:
    """The headers SQL reads (lower-case names), or the answer to give instead.

    A request signed in the ceaseless scheme has its two headers parsed
    strictly here, as before other schemes existed; the other schemes' headers
    are only checked to be printable ASCII, and SQL parses them.
    """
    if TIMESTAMP_HEADER in request.headers or SIGNATURE_HEADER in request.headers:
        refusal = _ceaseless_headers(request)
        if refusal is not None:
            return None, refusal
    headers: dict[str, str] = {}
    for name in request.app[_HEADERS]:
        value = request.headers.get(name)
        if value is None:
            continue
        if not _HEADER_VALUE.fullmatch(value):
            return None, _error(400, f"the {name} header must be printable ASCII")
        headers[name] = value
    return headers, None


def _ceaseless_headers(request: web.Request) -> web.Response | None:
    """None when the ceaseless scheme's headers are well formed, else the answer to give."""
    raw_ts = request.headers.get(TIMESTAMP_HEADER)
    if raw_ts is None or not _TIMESTAMP.fullmatch(raw_ts.strip()):
        return _error(400, f"{TIMESTAMP_HEADER} must be integer unix seconds")
    if not request.headers.get(SIGNATURE_HEADER):
        return _error(401, f"{SIGNATURE_HEADER} is missing")
    if not _SIGNATURE.fullmatch(request.headers[SIGNATURE_HEADER]):
        return _error(400, f"{SIGNATURE_HEADER} must be sha256=<64 lowercase hex digits>")
    return None


async def _verify_and_fire(
    request: web.Request, path: str, body: bytes, headers: dict[str, str]
) -> web.Response:
    limits = request.app[_LIMITS]
    try:
        received = await connections.call(
            request.app[_POOL],
            "receive_webhook",
            lambda conn: webhooks.receive(conn, path, body, headers),
            limits.db_deadline,
        )
    except psycopg.Error as exc:
        status = STATUS_BY_SQLSTATE.get(exc.sqlstate or "")
        if status is None:
            log.warning(
                "webhook.db_error", path=_shown(path), sqlstate=exc.sqlstate, error=_bounded(exc)
            )
            return _error(503, "the database could not take this request; retry")
        _REFUSALS.note(
            "webhook.refused",
            {"status": status, "sqlstate": exc.sqlstate},
            level=logging.INFO,
            path=_shown(path),
        )
        return _error(status, exc.diag.message_primary or "refused")
    except (TimeoutError, psycopg_pool.PoolTimeout) as exc:
        log.warning("webhook.db_timeout", path=_shown(path), error=_bounded(exc))
        return _error(503, "the database did not answer in time; retry")
    if received.refused_sqlstate is not None:
        status = STATUS_BY_SQLSTATE[received.refused_sqlstate]
        _REFUSALS.note(
            "webhook.refused",
            {"status": status, "sqlstate": received.refused_sqlstate},
            level=logging.INFO,
            path=_shown(path),
            run=str(received.run_id),
        )
        return _error(status, received.refused_message or "refused")
    if received.held is not None:
        # Accepted, not refused: the fire waits (overlap policy or debounce) and
        # starts when fire_held lets it. A 409 would make a sender retry it.
        log.event("webhook.held", path=_shown(path), held=str(received.run_id))
        return web.json_response(
            {
                "run_id": None,
                "held_fire_id": str(received.run_id),
                "buffered": True,
                "debounced": received.held == "debounced",
            },
            status=202,
        )
    log.event("webhook.accepted", path=_shown(path), run=str(received.run_id))
    return web.json_response({"run_id": str(received.run_id)}, status=202)


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers)


def _shown(path: str) -> str:
    """A webhook path as logged: a loop's token (`loop_…`) is the capability to call it, so
    only its first characters are shown, enough to tell two loops apart."""
    return path[:11] + "…" if path.startswith("loop_") else _bounded(path)


def _bounded(value: object) -> str:
    text = str(value)
    return text if len(text) <= _LOGGED_CHARS else text[:_LOGGED_CHARS] + "…"


class _OneLineProtocolErrors(logging.Filter):
    """aiohttp's own reports of malformed HTTP (answered 400 by aiohttp), counted.

    aiohttp logs them as errors with a traceback that quotes the client's
    bytes: a stranger could fill the log with multi-line text of its choosing.
    A client's malformed request is not this server's error: each kind is a
    warning, and a flood of them is a count per interval (log.Tally).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        kind = _bounded(type(error).__name__ if error else "unknown")
        if isinstance(error, HttpProcessingError):
            _REFUSALS.note("http.bad_request", {"error": kind})
        else:
            # A handler that raised: this server's fault, still one line.
            _REFUSALS.note("http.handler_error", {"error": kind}, level=logging.ERROR)
        return False


_PROTOCOL_LOG = logging.getLogger("ceaseless.http")
_PROTOCOL_LOG.addFilter(_OneLineProtocolErrors())


@dataclass(frozen=True)
class Bound:
    """A listening socket, bound before the listener starts anything else."""

    host: str
    port: int
    sock: socket.socket = dataclasses.field(repr=False)


def bind(address: str) -> Bound:
    """Bind HOST:PORT and listen on it now; raises OSError (the address is taken, say).

    Listening at once, not at serve(): on Linux two sockets with SO_REUSEADDR
    may both bind one port until one listens, so only listen() proves the
    port is ours. Connections that arrive before serve() wait in the backlog.
    """
    host, _, port_text = address.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    port = int(port_text)
    family, kind, proto, _, sockaddr = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return Bound(host, sock.getsockname()[1], sock)


class Ingress:
    """The running HTTP server: its runner, the two pools' owners, and its token file."""

    def __init__(
        self,
        runner: web.AppRunner,
        pool: psycopg_pool.AsyncConnectionPool,
        hub: observer.Hub,
        token_file: http_token.SignIn | None,
    ) -> None:
        self._runner = runner
        self._pool = pool
        self.hub = hub
        self._token_file = token_file

    async def close(self) -> None:
        # The observer's streams first: they would hold the runner's cleanup.
        self.hub.close()
        await self._runner.cleanup()
        await self._pool.close(timeout=5)
        await self.hub.pool.close(timeout=5)
        if self._token_file is not None:
            with contextlib.suppress(OSError):
                http_token.remove(self._token_file)


async def serve(
    url: str,
    bound: Bound,
    *,
    worker_id: str,
    limits: Limits,
    token_pattern: str,
    observer_limits: observer.ObserverLimits,
    header_names: frozenset[str],
    http_token_given: str | None = None,
    dashboard_user: str | None = None,
    pooled: bool = False,
) -> Ingress:
    """Serve POST /hooks/{path}, the observer, /metrics and the dashboard on `bound` until closed.

    The ingress has a pool of its own: a flood of webhooks must not take the
    connections that renew the listener's leases; the observer has another.
    `token_pattern` is SQL's _webhook_token_pattern() and `header_names` its
    _webhook_header_names(), read once by the caller. Everything but the
    ingress and /healthz needs the token: `http_token_given`, else one made
    now (listener/web/token.py), written to its 0600 file. `pooled`: `url` goes through a
    pooler (listener/database/pooler.py).
    """
    token, made = http_token.make(http_token_given)
    gate = access.Gate(token, loopback=access.is_loopback(bound.host), port=bound.port)
    observer_limits = dataclasses.replace(observer_limits, db_deadline=limits.db_deadline)
    hub = observer.Hub(
        observer.pool(url, worker_id=worker_id, deadline=limits.db_deadline, pooled=pooled),
        observer_limits,
    )
    await hub.pool.open(wait=False)
    pool = connections.pool(
        url,
        application_name=f"ceaseless ingress {worker_id}",
        size=4,
        deadline=limits.db_deadline,
        pooled=pooled,
    )
    await pool.open(wait=False)
    # keepalive_timeout also bounds the wait for a request's headers: aiohttp
    # closes a connection that has not delivered a whole request by then.
    # lingering_time: after an early answer (404, 413) aiohttp reads and drops
    # the rest of the unread body before closing, 10 s by default; a client
    # announcing a body it never sends would hold the connection that long.
    runner = web.AppRunner(
        make_app(
            pool,
            limits,
            token_pattern,
            hub,
            gate=gate,
            header_names=header_names,
            dashboard_user=dashboard_user,
            worker_id=worker_id,
        ),
        access_log=None,
        # Streams end as soon as the hub closes; nothing else is long.
        shutdown_timeout=5,
        keepalive_timeout=limits.read_timeout,
        lingering_time=_LINGERING_SECS,
        logger=_PROTOCOL_LOG,
    )
    await runner.setup()
    await web.SockSite(runner, bound.sock).start()
    token_file = _write_token(bound, token, worker_id)
    base = http_token.base_url(bound.host, bound.port)
    log.event(
        "http.listening",
        host=bound.host,
        port=bound.port,
        max_body=limits.max_body,
        max_requests=limits.max_requests,
        read_timeout=limits.read_timeout,
        token="made at start" if made else "--http-token",
        token_file=str(token_file.path) if token_file else None,
        # A token the operator gave is theirs already; a made one is shown
        # once, as Jupyter does, and is in the file for `ceaseless dashboard`.
        sign_in=http_token.sign_in_url(base, token) if made else f"{base}/login",
    )
    return Ingress(runner, pool, hub, token_file)


def _write_token(bound: Bound, token: str, worker_id: str) -> http_token.SignIn | None:
    try:
        return http_token.write(bound.host, bound.port, token, worker_id)
    except OSError as exc:
        log.warning(
            "http.token_file_failed",
            error=str(exc),
            problem="`ceaseless dashboard` cannot print the sign-in URL; the log's "
            "http.listening line has it, or set CEASELESS_HOME to a directory the listener "
            "may write",
        )
        return None
