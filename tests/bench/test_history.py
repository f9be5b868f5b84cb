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


# The history plan tests in CI; `python -m bench.history` runs them at 10,000,000
# (docs/performance.md). A probe that read the history would read thousands of buffers more
# here (300,000 finished jobs fill over 3,000 pages of `job` alone); one that reads by index
# grows only by the levels its B-trees gain, a buffer or two a descent, and a claim of ten
# descends about eighty times (docs/performance.md). At 300,000 every B-tree of job,
# agent_run and audit_log has the levels it has at a million, so a million would check
# nothing more, in three times the load.
HISTORY_JOBS = 300_000


def test_with_a_history_of_finished_jobs_no_probe_reads_it(server_url: str) -> None:
    server = Server(server_url)
    try:
        empty = history.probe(server, 0)
        full = history.probe(server, HISTORY_JOBS)
    finally:
        server.close()
    grown = {
        name: f"{empty[name]} -> {full[name]} buffers"
        for name in history.PROBES
        if full[name] > 2 * empty[name] + 150
    }
    assert grown == {}
