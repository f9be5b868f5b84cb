"""GET /metrics: the Prometheus text format, from the database and from this process.

Two sources, one page:

- database-wide series (queue depth by lane and state, blocked jobs, lane
  usage against max_concurrent and the window budget, runs by outcome and
  their duration histogram, routine fires, refused fires by routine and
  reason, each routine's last success, loop iterations, notifications
  delivered and failed) come from one call of
  metrics_snapshot() (functions/94_metrics.sql), which reads partial indexes
  and trigger-kept counters, never history. Every listener serves the same
  numbers: scrape one, or aggregate them with max() (docs/metrics.md);
- process-local series are this listener's own (listener/counters.py, which
  the parts that count import without this module): webhook responses by
  status, NOTIFY-to-claim lag, LISTEN reconnects, and the process
  collector's CPU and memory.

Guarantees: a scrape is one round trip on the ingress's pool, bounded by its
deadline; when the database does not answer the page still serves the local
series, with ceaseless_database_up 0, so a scrape never fails because the
database is down (that is what the alert should say). Access is the
listener's one rule (listener/web/access.py): the token on every address (a
scraper sends `Authorization: Bearer <token>`), and a loopback Host on a
loopback bind.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass

import psycopg
import psycopg_pool
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric

from listener import counters, log
from listener.database import connections
from listener.queries import metrics as queries
from listener.queries.metrics import Sample


@dataclass(frozen=True)
class _Scrape:
    """What the handler needs: the pool it reads from and its deadline."""

    pool: psycopg_pool.AsyncConnectionPool
    deadline: float


_SCRAPE = web.AppKey("metrics", _Scrape)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def mount(
    app: web.Application,
    pool: psycopg_pool.AsyncConnectionPool,
    deadline: float,
) -> None:
    """Add GET /metrics to the listener's HTTP application (an OPERATOR route)."""
    app[_SCRAPE] = _Scrape(pool, deadline)
    app.router.add_get("/metrics", _serve, name="metrics")


@web.middleware
async def count_webhook_responses(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Count every answer to POST /hooks/… by status, refusals of the in-hand cap included."""
    if not request.path.startswith("/hooks/"):
        return await handler(request)
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        counters.WEBHOOK_RESPONSES.labels(status=str(exc.status)).inc()
        raise
    counters.WEBHOOK_RESPONSES.labels(status=str(response.status)).inc()
    return response


async def _serve(request: web.Request) -> web.Response:
    scrape = request.app[_SCRAPE]
    samples: list[Sample] = []
    try:
        samples = await connections.call(
            scrape.pool, "metrics_snapshot", queries.snapshot, scrape.deadline
        )
        counters.DATABASE_UP.set(1)
    except (psycopg.Error, TimeoutError, psycopg_pool.PoolTimeout) as exc:
        log.warning("metrics.database_unavailable", error=str(exc).strip()[:120])
        counters.DATABASE_UP.set(0)
    body = generate_latest(counters.REGISTRY) + generate_latest(_Families(samples))  # type: ignore[arg-type]
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


class _Families:
    """The snapshot's rows as metric families, in the shape generate_latest() collects."""

    def __init__(self, samples: Iterable[Sample]) -> None:
        self._samples = samples

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for s in self._samples:
            if s.value is None:
                continue
            family = families.get(s.family)
            if family is None:
                family = families[s.family] = Metric(s.family, s.help, s.kind)
            family.add_sample(s.sample, {k: str(v) for k, v in s.labels.items()}, s.value)
        yield from families.values()
