"""The process counters and listener/web/metrics.py without a server: the claim-lag clock, the
snapshot's text form, and a job loop that counts without importing the web server."""

from __future__ import annotations

import subprocess
import sys

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from listener import counters
from listener.queries.metrics import Sample
from listener.web import metrics


def _lag_count() -> float:
    return counters.REGISTRY.get_sample_value("ceaseless_notify_to_claim_seconds_count") or 0.0


def test_a_claim_that_took_jobs_records_the_lag_since_the_first_notify() -> None:
    lag = counters.ClaimLag()
    before = _lag_count()
    lag.heard()
    lag.heard()  # a second NOTIFY before the claim does not restart the clock
    lag.claimed(3)
    assert _lag_count() == before + 1
    lag.claimed(3)  # nothing heard since: nothing to record
    assert _lag_count() == before + 1


def test_a_claim_that_took_nothing_ends_the_measurement_unrecorded() -> None:
    lag = counters.ClaimLag()
    before = _lag_count()
    lag.heard()
    lag.claimed(0)
    lag.claimed(5)
    assert _lag_count() == before


def test_snapshot_rows_become_families_prometheus_parses() -> None:
    rows = [
        Sample("ceaseless_jobs", "gauge", "Live jobs.", "ceaseless_jobs", {"lane": "a"}, 4.0),
        Sample(
            "ceaseless_agent_runs",
            "counter",
            "Runs.",
            "ceaseless_agent_runs_total",
            {"agent": "a", "outcome": "failed"},
            2.0,
        ),
        Sample(
            "ceaseless_agent_run_duration_seconds",
            "histogram",
            "Wall time.",
            "ceaseless_agent_run_duration_seconds_bucket",
            {"agent": "a", "le": "1"},
            1.0,
        ),
        Sample(
            "ceaseless_agent_run_duration_seconds",
            "histogram",
            "Wall time.",
            "ceaseless_agent_run_duration_seconds_bucket",
            {"agent": "a", "le": "+Inf"},
            2.0,
        ),
        Sample(
            "ceaseless_agent_run_duration_seconds",
            "histogram",
            "Wall time.",
            "ceaseless_agent_run_duration_seconds_count",
            {"agent": "a"},
            2.0,
        ),
        Sample(
            "ceaseless_agent_run_duration_seconds",
            "histogram",
            "Wall time.",
            "ceaseless_agent_run_duration_seconds_sum",
            {"agent": "a"},
            7.5,
        ),
        # A lane without a window budget: no sample rather than a NaN.
        Sample(
            "ceaseless_lane_window_budget",
            "gauge",
            "Budget.",
            "ceaseless_lane_window_budget",
            {"lane": "a"},
            None,
        ),
    ]
    text = generate_latest(metrics._Families(rows)).decode()  # type: ignore[arg-type]
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["ceaseless_jobs"].type == "gauge"
    assert families["ceaseless_agent_runs"].type == "counter"
    assert families["ceaseless_agent_run_duration_seconds"].type == "histogram"
    assert "ceaseless_lane_window_budget" not in text
    assert 'ceaseless_agent_run_duration_seconds_bucket{agent="a",le="+Inf"} 2.0' in text


def test_the_job_loop_imports_nothing_of_the_web_server() -> None:
    """Every module of the running listener but the supervisor (which starts the server)
    reaches its counters through listener/counters.py: none pulls in aiohttp's server or
    anything of listener.web."""
    loop = [
        f"listener.daemon.{name}"
        for name in ("router", "notifier", "maintenance", "scheduler", "outbox", "registry")
    ]
    loop += [
        f"listener.daemon.producer.{name}"
        for name in ("claimer", "leases", "ledger", "recorder", "runner", "workdirs", "context")
    ]
    probe = (
        f"import sys; import {', '.join(loop)}; "
        "print(sorted(m for m in sys.modules "
        "if m == 'aiohttp.web' or m.startswith('listener.web')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout
