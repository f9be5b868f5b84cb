"""This process's own counters: what the job loop, the notifier and the ingress count.

The parts that count (producer/claimer.py, router.py, notifier.py, the
ingress's middleware) import this module and nothing of the web server;
listener/web/metrics.py serves the registry on GET /metrics beside the
database's series.

Guarantees: every series here lives in REGISTRY, which only this process
writes; counting never blocks and never touches the database.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector

# This process's own series; the database's are built per scrape (metrics.py).
REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)

WEBHOOK_RESPONSES = Counter(
    "ceaseless_webhook_responses",
    "Answers of this listener's webhook ingress (POST /hooks/…), by HTTP status.",
    ["status"],
    registry=REGISTRY,
)
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
