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
  (CE404, CE409) and the page says why;
- every other action (cancel, retry or reply to a job, raise its spend
  ceiling, run a routine or loop now,
  enable or disable one, pause or resume a lane) is one call of the SQL API
  (queries.ACTIONS): no rule of it is written here. Its transaction sets
  `ceaseless.actor` to `<worker id> dashboard:<user>`, which audit_log.worker
  records for the listener's role only, so every audit row of the action
  names the listener and the dashboard user; a refusal (CE404, CE409, CE422,
  …) is shown as the database phrased it;
- times are sent as UTC (`<time datetime>`, UTC in its title) and the
  script shows them in the viewer's zone.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import jinja2
import psycopg
import psycopg_pool
from aiohttp import web
from markupsafe import Markup

from listener import cron, log
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
# reply_job's bound on a reply.
_REPLY_CHARS = 16000


class Dashboard:
    """What the pages need: the pool, the deadline, the gate, and who decides approvals."""

    def __init__(
        self,
        pool: psycopg_pool.AsyncConnectionPool,
        gate: access.Gate,
        *,
        user: str,
        db_deadline: float,
        worker_id: str = "",
    ) -> None:
        self.pool = pool
        self.gate = gate
        self.user = user
        self.db_deadline = db_deadline
        # Who the dashboard's actions are audited as (audit_log.worker).
        self.actor = f"{worker_id} dashboard:{user}".strip()
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
    add("GET", "/routines/{id}", _routine, name=ROUTE_PREFIX + "routine")
    for path, action in _ACTIONS.items():
        add("POST", path, _acting(action), name=ROUTE_PREFIX + action.name)
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
    return _uuid_key(request.match_info["id"])


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


# Fires shown on a routine's page: next_fire_at and the slots after it.
_NEXT_FIRES = 5


def _routine_page(key: UUID, routine: Row, runs: list[Row]) -> dict[str, Any]:
    """A routine with its runs; its next fires from next_fire_at on, as the listener computes
    them (listener/cron.py), when it is enabled on a schedule that has one."""
    fires: list[datetime] = []
    first = routine["next_fire_at"]
    if first is not None and routine["schedule"]:
        fires.append(first)
        try:
            while len(fires) < _NEXT_FIRES:
                fires.append(
                    cron.next_fire(routine["schedule"], routine["timezone"] or "UTC", fires[-1])
                )
        except cron.CronError:
            pass
    return {
        "title": f"Routine {routine['name']}",
        "routine": routine,
        "runs": runs,
        "fires": fires,
    }


_lanes = _listing("lanes", "Lanes", queries.lanes)
_routines = _listing("routines", "Routines", queries.routines)
_loops = _listing("loops", "Loops", queries.loops)
_runs = _listing("runs", "Topology runs", queries.runs)
_approvals = _listing("approvals", "Approvals", queries.pending_approvals)
_loop = _detail("loop", "loop", queries.loop, queries.iterations, _loop_page)
_run = _detail("run", "topology run", queries.run, queries.run_nodes, _run_page)
_job = _detail("job", "job", queries.job, queries.job_runs, _job_page)
_routine = _detail("routine", "routine", queries.routine, queries.routine_runs, _routine_page)


class _BadForm(ValueError):
    """A form field the action cannot read (not what SQL refuses: that is its own message)."""


@dataclass(frozen=True)
class _Action:
    """A dashboard action: the SQL API statement it runs (queries.ACTIONS), its parameters
    from the key in the path and the form, and what the page says once it is done."""

    name: str
    what: str
    statement: str
    params: Callable[[str, Any], tuple[Any, ...]]
    said: Callable[[Row, str], str]


def _uuid_key(raw: str) -> UUID:
    try:
        return UUID(raw)
    except ValueError:
        raise web.HTTPNotFound(text="no such id") from None


def _field(form: Any, name: str, chars: int) -> str:
    value = form.get(name)
    return value.strip()[:chars] if isinstance(value, str) else ""


def _minutes(form: Any) -> int:
    raw = _field(form, "minutes", 12)
    try:
        return int(raw)
    except ValueError:
        raise _BadForm(f"minutes must be a whole number; got {raw!r}") from None


def _reply(form: Any) -> str:
    # One character past reply_job's bound, so an over-long reply is refused
    # by the database, in its words, never cut short here.
    return _field(form, "reply", _REPLY_CHARS + 1)


def _usd(form: Any) -> Decimal:
    raw = _field(form, "usd", 24)
    try:
        amount = Decimal(raw)
    except ArithmeticError:
        amount = Decimal("NaN")
    if not amount.is_finite():
        raise _BadForm(f"usd must be an amount in USD, e.g. 5 or 2.50; got {raw!r}")
    return amount


def _fired(row: Row, who: str) -> str:
    if row["status"] == "skipped":
        return f"fired by {who}: skipped ({row['skip_reason']})"
    return f"fired by {who}: {row['status']}"


def _by_id(key: str, form: Any) -> tuple[Any, ...]:
    return (_uuid_key(key),)


def _enabling(what: str, enabled: bool) -> _Action:
    # Disabling is enable_<what> with false: the tables' triggers do what either means.
    verb = "enable" if enabled else "disable"
    return _Action(
        f"{verb}_{what}",
        what,
        f"enable_{what}",
        lambda k, f: (enabled, _uuid_key(k)),
        lambda r, who: f"{verb}d by {who}",
    )


def _triggered(what: str) -> dict[str, _Action]:
    """Run now, enable and disable: a routine's and a loop's, as one trigger layer fires both."""
    return {
        f"/{what}s/{{id}}/run": _Action(f"run_{what}", what, f"run_{what}", _by_id, _fired),
        f"/{what}s/{{id}}/enable": _enabling(what, True),
        f"/{what}s/{{id}}/disable": _enabling(what, False),
    }


def _on_job(name: str, said: Callable[[Row, str], str], *form: Callable[[Any], Any]) -> _Action:
    """A job's action: the statement `name` on the job's id, then what `form` reads."""
    return _Action(
        name, "job", name, lambda k, f: (_uuid_key(k), *(read(f) for read in form)), said
    )


_ACTIONS: dict[str, _Action] = {
    "/jobs/{id}/cancel": _on_job("cancel_job", lambda r, who: f"cancelled by {who}"),
    "/jobs/{id}/retry": _on_job("retry_job", lambda r, who: f"retried by {who}"),
    "/jobs/{id}/reply": _on_job(
        "reply_job",
        lambda r, who: f"replied by {who}: the job resumes its session with the reply",
        _reply,
    ),
    "/jobs/{id}/raise-budget": _on_job(
        "raise_job_budget", lambda r, who: f"ceiling raised by {who}", _usd
    ),
    **_triggered("routine"),
    **_triggered("loop"),
    "/lanes/{id}/pause": _Action(
        "pause_lane",
        "lane",
        "pause_lane",
        lambda k, f: (k, _minutes(f), _field(f, "reason", _NOTE_CHARS)),
        lambda r, who: f"paused by {who} until {_when_text(r['paused_until'])}",
    ),
    "/lanes/{id}/resume": _Action(
        "resume_lane",
        "lane",
        "resume_lane",
        lambda k, f: (k,),
        lambda r, who: f"resumed by {who}",
    ),
}

# How a refusal of the SQL API reaches the page: its SQLSTATE's HTTP status,
# and the database's own words.
_REFUSED = {
    SqlState.NOT_FOUND: 404,
    SqlState.INVALID_ARGUMENT: 422,
    "42501": 403,
}


def _refusal_status(exc: psycopg.Error) -> int:
    """The status of a refusal, 0 for an error that is no refusal (the database failing)."""
    state = exc.sqlstate or ""
    if state in _REFUSED:
        return _REFUSED[state]
    # CE409-CE415 (a state, a disabled row, a cap), a live-job unique index.
    if state.startswith("CE4") or state.startswith("23"):
        return 409
    if state.startswith("22"):
        return 422
    return 0


def _acting(action: _Action) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The handler of one action: the CSRF rule, one call of the SQL API as the dashboard
    user, and its answer (JSON for the script, a redirect or an error page for a form)."""

    @_page
    async def serve(request: web.Request, dash: Dashboard) -> web.StreamResponse:
        form = await request.post()
        csrf = form.get("csrf")
        if not access.same_origin_post(request, dash.gate, csrf if isinstance(csrf, str) else None):
            access.refused("csrf", request, 403)
            return _plain(403, "refused: not a form of this dashboard (CSRF token or Origin)")
        key = request.match_info["id"][:200]
        who = f"dashboard:{dash.user}"
        try:
            params = action.params(key, form)
            row = await dash.call(
                f"dashboard {action.name}",
                lambda c: queries.act(c, dash.actor, action.statement, params),
            )
        except _BadForm as exc:
            return _answer(request, dash, 422, str(exc), ok=False)
        except psycopg.Error as exc:
            status = _refusal_status(exc)
            if status == 0:
                raise
            log.event(
                "dashboard.action_refused", action=action.name, key=key, sqlstate=exc.sqlstate
            )
            return _answer(request, dash, status, exc.diag.message_primary or "refused", ok=False)
        if row is None:
            return _answer(request, dash, 404, f"No {action.what} {key}.", ok=False)
        message = action.said(row, who)
        log.event("dashboard.acted", action=action.name, key=key, by=who)
        return _answer(request, dash, 200, message, ok=True, form=form)

    return serve


def _answer(
    request: web.Request,
    dash: Dashboard,
    status: int,
    message: str,
    *,
    ok: bool,
    form: Any = None,
) -> web.StreamResponse:
    """An action's answer: JSON to the script; to a plain form, a redirect back or an error."""
    if _wants_json(request):
        return web.json_response({"message": message} if ok else {"error": message}, status=status)
    if not ok:
        title = "Not done" if status != 404 else "Not found"
        return dash.render(request, "error.html", status, title=title, message=message)
    raise web.HTTPSeeOther(_back(form, "/"))


def _back(form: Any, default: str) -> str:
    """Where a plain form returns to: a path of this server, never another site."""
    back = form.get("next") if form is not None else None
    if isinstance(back, str) and back.startswith("/") and not back.startswith("//"):
        return back
    return default


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

    async def decide(conn: psycopg.AsyncConnection) -> None:
        async with queries.acting_as(conn, dash.actor):
            await approvals.decide(conn, key, decision == "approve", who, note_text)

    try:
        await dash.call("dashboard decide", decide)
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
    raise web.HTTPSeeOther(_back(form, "/approvals"))


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


def _when(value: object) -> str | Markup:
    """A time as `<time>`: UTC in the page, which the script shows in the viewer's zone with
    UTC in its title; a duration as `1m 5s`."""
    if isinstance(value, datetime):
        utc = _when_text(value)
        return Markup('<time datetime="{}" title="{}">{}</time>').format(
            value.astimezone(UTC).isoformat(), utc, utc
        )
    return _when_text(value)


def _when_text(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
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
