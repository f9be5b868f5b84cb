"""Who may use the listener's HTTP server: one rule, applied to every route before its handler.

`gate()` is the outermost middleware of the application http.make_app builds;
the ingress, the run observer, GET /metrics and the dashboard declare how
exposed each of their routes is (`expose`) and check nothing themselves. A
route is one of:

- ANYONE: the webhook ingress (POST /hooks/{path}, whose signature SQL
  verifies) and GET /healthz. No Host check: a reverse proxy may pass its own
  Host, and a signed request is no less signed for it;
- SIGN_IN: the dashboard's sign-in page and its two static files: the Host
  check, no token;
- OPERATOR: every other route, and any route nobody declared (the dashboard's
  pages and actions, the observer's streams, GET /metrics): the Host check and
  the token.

Guarantees:
- there is always a token: --http-token (CEASELESS_HTTP_TOKEN), else one made
  at start (http_token.py), so an OPERATOR request is refused 401 without it
  on a loopback bind too: a local process that is not the operator (an agent
  that reached 127.0.0.1) reads no prompt and decides no approval. The token
  is presented as `Authorization: Bearer <token>` or in the HttpOnly,
  SameSite=Strict sign-in cookie (named for the port: two listeners on one
  host do not sign each other out), compared in constant time;
- on a loopback bind, a SIGN_IN or OPERATOR request whose Host header names
  anything but a loopback address is refused 421: a page of another site whose
  name was rebound to 127.0.0.1 (DNS rebinding) reaches none of them;
- an action (a dashboard POST) also needs this process's CSRF token and its
  own Origin (`same_origin_post`): a page of another origin cannot forge it
  even in a signed-in browser;
- refusals are logged through a log.Tally: the first of each reason at once,
  then one line per interval with the count, so a flood of refused requests
  writes a bounded log.
"""

from __future__ import annotations

import enum
import hmac
import ipaddress
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from aiohttp import web

from listener import log

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# A refused request's path as logged.
_LOGGED_PATH = 80
_REFUSALS = log.Tally()


class Exposure(enum.Enum):
    ANYONE = "anyone"
    SIGN_IN = "sign_in"
    OPERATOR = "operator"


@dataclass(frozen=True)
class Gate:
    """The server's access rule: its token, whether it binds to loopback, its CSRF secret."""

    token: str = field(repr=False)
    loopback: bool
    port: int
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)

    @property
    def cookie(self) -> str:
        """The sign-in cookie's name; cookies ignore ports, so the port is in the name."""
        return f"ceaseless_dashboard_{self.port}"


_GATE = web.AppKey("gate", Gate)
_EXPOSED = web.AppKey("exposed", dict)


def install(app: web.Application, gate: Gate) -> None:
    """Make `gate` the rule of `app`: call before any route is added."""
    app[_GATE] = gate
    app[_EXPOSED] = {}
    app.middlewares.insert(0, _middleware)


def expose(app: web.Application, exposure: Exposure, *routes: web.AbstractRoute) -> None:
    """Declare how exposed `routes` are; a route never declared is OPERATOR."""
    for route in routes:
        app[_EXPOSED][route] = exposure


def gate_of(request: web.Request) -> Gate:
    return request.app[_GATE]


def is_loopback(host: str) -> bool:
    """True for a name or address only this host can reach (127.0.0.0/8, ::1, localhost)."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # any other name: it may resolve to anything


def presented_token(request: web.Request, gate: Gate) -> str | None:
    """The token a request presents: its bearer header, else the sign-in cookie."""
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and given.strip():
        return given.strip()
    return request.cookies.get(gate.cookie) or None


def token_matches(given: str | None, gate: Gate) -> bool:
    if not given:
        return False
    return hmac.compare_digest(given.encode(), gate.token.encode())


def host_allowed(request: web.Request, gate: Gate) -> bool:
    """On a loopback bind, only requests addressed to a loopback name (DNS rebinding)."""
    if not gate.loopback:
        return True
    return is_loopback(urlsplit(f"//{request.host}").hostname or "")


def signed_in(request: web.Request, gate: Gate) -> bool:
    """The OPERATOR rule: an allowed Host and this server's token."""
    return host_allowed(request, gate) and token_matches(presented_token(request, gate), gate)


def same_origin_post(request: web.Request, gate: Gate, form_csrf: str | None) -> bool:
    """A POST from one of the dashboard's own pages: the CSRF token and a same-origin header."""
    if not form_csrf or not hmac.compare_digest(form_csrf.encode(), gate.csrf.encode()):
        return False
    if request.headers.get("Sec-Fetch-Site", "same-origin") not in ("same-origin", "none"):
        return False
    source = request.headers.get("Origin") or request.headers.get("Referer")
    if not source or source == "null":
        return False
    parts = urlsplit(source)
    return parts.scheme in ("http", "https") and parts.netloc == request.host


def refused(reason: str, request: web.Request, status: int) -> None:
    """Log a refusal, counted per reason and interval rather than one line each."""
    _REFUSALS.note(
        "http.refused",
        {"reason": reason, "status": status},
        method=request.method,
        path=request.path[:_LOGGED_PATH],
    )


@web.middleware
async def _middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    match = request.match_info
    if match.http_exception is not None:
        # No route: the 404 or 405 below says nothing that needs guarding.
        return await handler(request)
    gate = request.app[_GATE]
    exposure = request.app[_EXPOSED].get(match.route, Exposure.OPERATOR)
    if exposure is Exposure.ANYONE:
        return await handler(request)
    if not host_allowed(request, gate):
        refused("host", request, 421)
        return _plain(421, "this server answers only to a loopback host name")
    if exposure is Exposure.SIGN_IN or token_matches(presented_token(request, gate), gate):
        return await handler(request)
    refused("token", request, 401)
    if request.method == "GET" and "text/html" in request.headers.get("Accept", ""):
        raise web.HTTPSeeOther("/login")
    return _plain(
        401,
        "a token is required: Authorization: Bearer <token>, or sign in at /login "
        "(`ceaseless dashboard` prints the sign-in URL)",
    )


def _plain(status: int, message: str) -> web.Response:
    return web.Response(
        status=status,
        text=message + "\n",
        headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"},
    )
