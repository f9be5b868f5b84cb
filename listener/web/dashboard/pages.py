"""The dashboard's pages: server-rendered HTML from the operator views, one round trip each.

Guarantees:
- every page and action is an OPERATOR route of listener/web/access.py (the
  token, and a loopback Host on a loopback bind), checked before its handler;
  only the sign-in page and the static files are SIGN_IN routes, and they
  carry no CSRF token; every action passes access.same_origin_post (CSRF
  token and Origin);
- signing in: GET /login?token=… (the URL `ceaseless dashboard` prints and
  the listener logs) or the form's POST /login checks the token and sets it
  in the HttpOnly, SameSite=Strict cookie, then redirects, so the token
  leaves the address bar;
- a page is one read (listener/queries/dashboard.py) on the observer's pool,
  within the database deadline; a database that does not answer gives a 503
  page, never a traceback;
- output is escaped by Jinja2's autoescape; the Content-Security-Policy allows
  only this server's own script and style, and no framing (no clickjacking of
  the approve button);
- an approval is decided by decide_approval with decided_by
  `dashboard:<user>` (--dashboard-user), so the audit row and the approval
  name who decided from the dashboard; SQL refuses what may not be decided
  (CE404, CE409) and the page says why.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import jinja2
import psycopg
import psycopg_pool
from aiohttp import web

from listener import log
from listener.database import connections
from listener.enums import JobKind, JobState
from listener.errors import SqlState
from listener.queries import approvals
from listener.queries import dashboard as queries
from listener.queries.dashboard import Row
from listener.web import access
from listener.web.dashboard import graph

T = TypeVar("T")

ROUTE_PREFIX = "dashboard."
_HERE = Path(__file__).parent
_SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; "
    "frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
# A decision's note, as the form may send it; SQL bounds it again (prompt cap).
_NOTE_CHARS = 2000


class Dashboard:
    """What the pages need: the pool, the deadline, the gate, and who decides approvals."""

    def __init__(
        self,
        pool: psycopg_pool.AsyncConnectionPool,
        gate: access.Gate,
        *,
        user: str,
        db_deadline: float,
    ) -> None:
        self.pool = pool
        self.gate = gate
        self.user = user
        self.db_deadline = db_deadline
        self.templates = jinja2.Environment(
            loader=jinja2.PackageLoader("listener.web.dashboard", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.templates.filters["when"] = _when
        self.templates.filters["num"] = _num
        self.templates.filters["pretty"] = _pretty

    async def call(self, what: str, fn: Callable[[psycopg.AsyncConnection], Awaitable[T]]) -> T:
        return await connections.call(self.pool, what, fn, self.db_deadline)

    def render(
        self,
        request: web.Request,
        name: str,
        status: int = 200,
        *,
        signed_in: bool = True,
        **context: Any,
    ) -> web.Response:
        """A page; `signed_in=False` for the sign-in page, which carries no CSRF token."""
        html = self.templates.get_template(name).render(
            csrf=self.gate.csrf if signed_in else "", path=request.path, user=self.user, **context
        )
        return web.Response(
            text=html, status=status, content_type="text/html", headers=_SECURITY_HEADERS
        )


_DASHBOARD = web.AppKey("dashboard", Dashboard)


def mount(app: web.Application, dashboard: Dashboard) -> None:
    """Add the dashboard's routes (and its static files) to the listener's HTTP application.

    Every route is OPERATOR but the sign-in page and the static files.
    """
    app[_DASHBOARD] = dashboard
    add = app.router.add_route
    add("GET", "/", _queue, name=ROUTE_PREFIX + "queue")
    add("GET", "/lanes", _lanes, name=ROUTE_PREFIX + "lanes")
    add("GET", "/routines", _routines, name=ROUTE_PREFIX + "routines")
    add("GET", "/loops", _loops, name=ROUTE_PREFIX + "loops")
    add("GET", "/loops/{id}", _loop, name=ROUTE_PREFIX + "loop")
    add("GET", "/runs", _runs, name=ROUTE_PREFIX + "runs")
    add("GET", "/runs/{id}", _run, name=ROUTE_PREFIX + "run")
    add("GET", "/approvals", _approvals, name=ROUTE_PREFIX + "approvals")
    add("POST", "/approvals/{id}", _decide, name=ROUTE_PREFIX + "decide")
    add("GET", "/jobs/{id}", _job, name=ROUTE_PREFIX + "job")
    access.expose(
        app,
        access.Exposure.SIGN_IN,
        add("GET", "/login", _login_form, name=ROUTE_PREFIX + "login"),
        add("POST", "/login", _login, name=ROUTE_PREFIX + "login_post"),
        add("GET", "/static/{name}", _static, name=ROUTE_PREFIX + "static"),
    )


Handler = Callable[[web.Request, Dashboard], Awaitable[web.StreamResponse]]


def _page(handler: Handler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The database's failures, once for every page (access.py has let the request in)."""

    async def serve(request: web.Request) -> web.StreamResponse:
        dash = request.app[_DASHBOARD]
        try:
            return await handler(request, dash)
        except (psycopg.OperationalError, TimeoutError, psycopg_pool.PoolTimeout) as exc:
            log.warning("dashboard.db_error", path=request.path, error=str(exc).strip()[:200])
            return dash.render(
                request,
                "error.html",
                503,
                title="Database unavailable",
                message="The database did not answer in time; reload to retry.",
            )

    return serve


def _key(request: web.Request) -> UUID:
    try:
        return UUID(request.match_info["id"])
    except ValueError:
        raise web.HTTPNotFound(text="no such id") from None


def _choice(request: web.Request, name: str, allowed: list[str]) -> str | None:
    value = request.query.get(name) or None
    return value if value in allowed else None


@_page
async def _queue(request: web.Request, dash: Dashboard) -> web.StreamResponse:
    async def read(conn: psycopg.AsyncConnection) -> dict[str, Any]:
        lanes = await queries.lane_names(conn)
        state = _choice(request, "state", [s.value for s in JobState])
        lane = _choice(request, "lane", lanes)
        kind = _choice(request, "kind", [k.value for k in JobKind])
        return {
            "lanes": lanes,
            "states": [s.value for s in JobState],
            "kinds": [k.value for k in JobKind],
            "chosen": {"state": state, "lane": lane, "kind": kind},
            "jobs": await queries.jobs(conn, state, lane, kind),
            "counts": await queries.live_counts(conn),
            "limit": queries.PAGE_ROWS,
        }

    return dash.render(
        request, "queue.html", title="Queue", **await dash.call("dashboard queue", read)
    )


def _listing(
    name: str, title: str, read: Callable[[psycopg.AsyncConnection], Awaitable[list[Row]]]
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """A page of rows: template `<name>.html`, which finds them under `name`."""

    @_page
    async def serve(request: web.Request, dash: Dashboard) -> web.StreamResponse:
        rows = await dash.call(f"dashboard {name}", read)
        return dash.render(request, f"{name}.html", title=title, **{name: rows})

    return serve


def _detail(
    name: str,
    what: str,
    read_row: Callable[[psycopg.AsyncConnection, UUID], Awaitable[Row | None]],
    read_rows: Callable[[psycopg.AsyncConnection, UUID], Awaitable[list[Row]]],
    context: Callable[[UUID, Row, list[Row]], dict[str, Any]],
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The page of one row found by the id in its path and its rows (a run's nodes, a job's
    runs), read in one call; a 404 page when there is no such `what`. Template `<name>.html`,
    with the title and context `context` makes of them."""

    @_page
    async def serve(request: web.Request, dash: Dashboard) -> web.StreamResponse:
        key = _key(request)

        async def read(conn: psycopg.AsyncConnection) -> tuple[Row | None, list[Row]]:
            return await read_row(conn, key), await read_rows(conn, key)

        row, rows = await dash.call(f"dashboard {name}", read)
        if row is None:
            return _not_found(request, dash, what, key)
        return dash.render(request, f"{name}.html", **context(key, row, rows))

    return serve


def _loop_page(key: UUID, loop: Row, chain: list[Row]) -> dict[str, Any]:
    return {"title": f"Loop {loop['title'] or key}", "loop": loop, "chain": chain}


def _run_page(key: UUID, run: Row, nodes: list[Row]) -> dict[str, Any]:
    by_id = {n["node"]: n for n in nodes}
    return {"title": f"Run {key}", "run": run, "nodes": by_id, "layout": graph.layout(run["graph"])}


def _job_page(key: UUID, job: Row, runs: list[Row]) -> dict[str, Any]:
    return {"title": f"Job {key}", "job": job, "runs": runs}


_lanes = _listing("lanes", "Lanes", queries.lanes)
_routines = _listing("routines", "Routines", queries.routines)
_loops = _listing("loops", "Loops", queries.loops)
_runs = _listing("runs", "Topology runs", queries.runs)
_approvals = _listing("approvals", "Approvals", queries.pending_approvals)
_loop = _detail("loop", "loop", queries.loop, queries.iterations, _loop_page)
_run = _detail("run", "topology run", queries.run, queries.run_nodes, _run_page)
_job = _detail("job", "job", queries.job, queries.job_runs, _job_page)


@_page
async def _decide(request: web.Request, dash: Dashboard) -> web.StreamResponse:
    key = _key(request)
    form = await request.post()
    csrf = form.get("csrf")
    if not access.same_origin_post(request, dash.gate, csrf if isinstance(csrf, str) else None):
        access.refused("csrf", request, 403)
        return _plain(403, "refused: not a form of this dashboard (CSRF token or Origin)")
    decision = form.get("decision")
    if decision not in ("approve", "reject"):
        return _plain(422, f"decision must be approve or reject; got {str(decision)[:40]!r}")
    note = form.get("note")
    note_text = note.strip()[:_NOTE_CHARS] if isinstance(note, str) and note.strip() else None
    who = f"dashboard:{dash.user}"
    try:
        await dash.call(
            "dashboard decide",
            lambda c: approvals.decide(c, key, decision == "approve", who, note_text),
        )
    except psycopg.Error as exc:
        status = {SqlState.NOT_FOUND: 404, SqlState.INVALID_STATE: 409}.get(exc.sqlstate or "", 0)
        if status == 0 and exc.sqlstate != SqlState.INVALID_ARGUMENT:
            raise
        message = exc.diag.message_primary or "refused"
        log.event("dashboard.decision_refused", approval=str(key), sqlstate=exc.sqlstate)
        if _wants_json(request):
            return web.json_response({"error": message}, status=status or 422)
        return dash.render(
            request, "error.html", status or 422, title="Not decided", message=message
        )
    log.event("dashboard.decided", approval=str(key), decision=decision, by=who)
    if _wants_json(request):
        return web.json_response({"approval_id": str(key), "decision": decision, "by": who})
    back = form.get("next")
    target = (
        back
        if isinstance(back, str) and back.startswith("/") and not back.startswith("//")
        else "/approvals"
    )
    raise web.HTTPSeeOther(target)


async def _login_form(request: web.Request) -> web.StreamResponse:
    """The sign-in form; with ?token=… (the printed sign-in URL), the sign-in itself."""
    dash = request.app[_DASHBOARD]
    if "token" in request.query:
        return _signed_in(request, dash, request.query.get("token"))
    return dash.render(request, "login.html", title="Sign in", signed_in=False, failed=False)


async def _login(request: web.Request) -> web.StreamResponse:
    dash = request.app[_DASHBOARD]
    form = await request.post()
    given = form.get("token")
    return _signed_in(request, dash, given if isinstance(given, str) else None)


def _signed_in(request: web.Request, dash: Dashboard, given: str | None) -> web.StreamResponse:
    """Check the token once and keep it in an HttpOnly, SameSite=Strict cookie."""
    if not access.token_matches(given, dash.gate):
        access.refused("sign_in", request, 401)
        return dash.render(
            request, "login.html", 401, title="Sign in", signed_in=False, failed=True
        )
    response = web.HTTPSeeOther("/")
    response.set_cookie(
        dash.gate.cookie,
        str(given),
        httponly=True,
        samesite="Strict",
        secure=request.secure,
        path="/",
    )
    raise response


async def _static(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    types = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}
    if name not in types:
        raise web.HTTPNotFound()
    return web.Response(
        body=(_HERE / "static" / name).read_bytes(),
        content_type=types[name],
        headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"},
    )


def _not_found(request: web.Request, dash: Dashboard, what: str, key: UUID) -> web.Response:
    return dash.render(request, "error.html", 404, title="Not found", message=f"No {what} {key}.")


def _wants_json(request: web.Request) -> bool:
    return "application/json" in request.headers.get("Accept", "")


def _plain(status: int, message: str) -> web.Response:
    return web.Response(status=status, text=message + "\n", headers=_SECURITY_HEADERS)


def _when(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S %Z").strip()
    if isinstance(value, timedelta):
        secs = int(value.total_seconds())
        sign, secs = ("-" if secs < 0 else ""), abs(secs)
        if secs >= 86400:
            return f"{sign}{secs // 86400}d {secs % 86400 // 3600}h"
        if secs >= 3600:
            return f"{sign}{secs // 3600}h {secs % 3600 // 60}m"
        if secs >= 60:
            return f"{sign}{secs // 60}m {secs % 60}s"
        return f"{sign}{secs}s"
    return str(value)


def _num(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, Decimal):
        return f"{value.normalize():f}"
    return str(value)


def _pretty(value: object) -> str:
    return json.dumps(value, sort_keys=True, default=str)
