"""This process's own counters: what the job loop, the notifier and the ingress count.

The parts that count (producer/claimer.py, router.py, notifier.py, the
ingress's middleware) import this module and nothing of the web server;
listener/web/metrics.py serves the registry on GET /metrics beside the
database's series.

Guarantees: every series here lives in REGISTRY, which only this process
writes; counting never blocks and never touches the database; no series has
a `_created` twin (a sample per series of the process's start time, which
Prometheus stores as one more series and no alert reads); every status the
ingress answers is served from the start, at 0, so rate() sees its first
increment.
"""

from __future__ import annotations

import time

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
)

# Before any metric is made: a metric reads the switch when it is created.
disable_created_metrics()

# This process's own series; the database's are built per scrape (metrics.py).
REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)

WEBHOOK_RESPONSES = Counter(
    "ceaseless_webhook_responses",
    "Answers of this listener's webhook ingress (POST /hooks/…), by HTTP status.",
    ["status"],
    registry=REGISTRY,
)
# What POST /hooks/… answers (listener/web/server.py): accepted; malformed;
# a bad signature or a stale timestamp; no such hook; refused by a guardrail
# (cooldown, concurrency, the global cap, disabled), a replay or a duplicate;
# a body too large; too many requests in hand, or the database unavailable.
WEBHOOK_STATUSES = ("202", "400", "401", "404", "409", "413", "503")
for _status in WEBHOOK_STATUSES:
    WEBHOOK_RESPONSES.labels(status=_status)
LISTEN_RECONNECTS = Counter(
    "ceaseless_listener_reconnects",
    "Times this listener's LISTEN connection was lost and subscribed again.",
    registry=REGISTRY,
)
NOTIFY_TO_CLAIM = Histogram(
    "ceaseless_notify_to_claim_seconds",
    "From a NOTIFY of new work to the claim that followed it, when that claim took jobs.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
DATABASE_UP = Gauge(
    "ceaseless_database_up",
    "1 when the last scrape read metrics_snapshot(), 0 when the database did not answer.",
    registry=REGISTRY,
)


class ClaimLag:
    """Times the NOTIFY-to-claim lag: the first unclaimed NOTIFY of new work to the next claim.

    A claim that took nothing ends the measurement unrecorded: the work was
    taken by another listener, or waits for a slot, and that wait is the
    queue's (ceaseless_oldest_due_job_age_seconds), not the notifier's.
    """

    def __init__(self) -> None:
        self._heard: float | None = None

    def heard(self) -> None:
        if self._heard is None:
            self._heard = time.monotonic()

    def claimed(self, jobs: int) -> None:
        if self._heard is not None and jobs > 0:
            NOTIFY_TO_CLAIM.observe(time.monotonic() - self._heard)
        self._heard = None


CLAIM_LAG = ClaimLag()
