"""Who may use the dashboard, and which form posts are its own.

Guarantees:
- the same rule as the run observer: open when the server binds to loopback;
  bound anywhere else, a request needs the --http-token, presented as
  `Authorization: Bearer <token>` or as the HttpOnly, SameSite=Strict cookie
  that POST /login sets after checking the token (compared in constant time).
  With no token configured, a non-loopback dashboard answers 401 to everything;
- on a loopback bind the Host header must name a loopback address: a page of
  another site whose name was rebound to 127.0.0.1 (DNS rebinding) reads and
  posts nothing;
- an action (a POST) is carried out only when it carries this process's CSRF
  token (a random secret, made at start, in a hidden field of every form) and
  its Origin (or, lacking one, Referer) is this server's own. A page of
  another origin can neither read the token nor forge the Origin.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from aiohttp import web

COOKIE = "ceaseless_dashboard"


@dataclass(frozen=True)
class Access:
    """The dashboard's gate: loopback or not, the token, and this process's CSRF secret."""

    loopback: bool
    token: str | None
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32), repr=False)


def presented_token(request: web.Request) -> str | None:
    """The token a request presents: its bearer header, else the dashboard's cookie."""
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and given.strip():
        return given.strip()
    return request.cookies.get(COOKIE) or None


def token_matches(given: str | None, token: str | None) -> bool:
    if not given or not token:
        return False
    return hmac.compare_digest(given.encode(), token.encode())


def host_allowed(request: web.Request, access: Access) -> bool:
    """On a loopback bind, only requests addressed to a loopback name (DNS rebinding)."""
    if not access.loopback:
        return True
    host = urlsplit(f"//{request.host}").hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def authorized(request: web.Request, access: Access) -> bool:
    if not host_allowed(request, access):
        return False
    return access.loopback or token_matches(presented_token(request), access.token)


def same_origin_post(request: web.Request, access: Access, form_csrf: str | None) -> bool:
    """A POST from one of the dashboard's own pages: the CSRF token and a same-origin header."""
    if not form_csrf or not hmac.compare_digest(form_csrf.encode(), access.csrf.encode()):
        return False
    if request.headers.get("Sec-Fetch-Site", "same-origin") not in ("same-origin", "none"):
        return False
    source = request.headers.get("Origin") or request.headers.get("Referer")
    if not source or source == "null":
        return False
    parts = urlsplit(source)
    return parts.scheme in ("http", "https") and parts.netloc == request.host
