"""The live web dashboard at `/` on the listener's HTTP server.

Server-rendered HTML (Jinja2 templates shipped in this package) and one small
script (static/dashboard.js), no build chain. Pages: the queue (filters by
state, lane, kind), lanes (governor_usage) with pause / resume, routines (next
fire, last status, skips by reason, last error) and a routine's runs with
their replies, loops and a loop's iteration chain, each with run now and
enable / disable, topology runs drawn as a graph whose node states update live
over the run observer's SSE stream (GET /runs/{id}/events), pending approvals
with approve / reject, and a job with its runs and final messages, with cancel
and retry. docs/dashboard.md shows every page and action.

Guarantees: see listener/web/access.py (who may look and act: the listener's
token on every address, a loopback Host on a loopback bind, CSRF-safe
actions) and pages.py (one bounded read per page; every write one call of
the SQL API, audited as the listener and `dashboard:<user>`).
"""

from __future__ import annotations

import getpass

from listener.web.dashboard.pages import ROUTE_PREFIX, Dashboard, mount

__all__ = ["ROUTE_PREFIX", "Dashboard", "default_user", "mount"]


def default_user() -> str:
    """Who decides approvals from the dashboard when --dashboard-user is not given."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "operator"
