"""The history-at-scale scenario of the benchmark, small: every probe runs on both databases,
and the live work (a claim of 10) reads about the same with a finished history beside it."""

from __future__ import annotations

import pytest

from bench import history
from bench.server import Server

# A scenario of the benchmark, run small: what it checks is the harness and the
# listener, not the server version, so it runs on the embedded server only (.ci/run).
pytestmark = pytest.mark.slow


def test_every_probe_runs_with_and_without_a_history(server_url: str) -> None:
    server = Server(server_url)
    try:
        empty = history.probe(server, 0)
        full = history.probe(server, 2_000)
    finally:
        server.close()
    assert set(empty) == set(full) == set(history.PROBES)
    assert empty["claim_jobs (10, start)"] > 0
    # The views that read live work through partial indexes do not read the history.
    assert full["view job_queue"] <= empty["view job_queue"] + 10
    assert full["view notification_status"] <= empty["view notification_status"] + 10
