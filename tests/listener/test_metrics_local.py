"""listener/metrics.py without a server: the claim-lag clock and the snapshot's text form."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from listener import metrics
from listener.queries.metrics import Sample


def _lag_count() -> float:
    return metrics.REGISTRY.get_sample_value("ceaseless_notify_to_claim_seconds_count") or 0.0


def test_a_claim_that_took_jobs_records_the_lag_since_the_first_notify() -> None:
    lag = metrics.ClaimLag()
    before = _lag_count()
    lag.heard()
    lag.heard()  # a second NOTIFY before the claim does not restart the clock
    lag.claimed(3)
    assert _lag_count() == before + 1
    lag.claimed(3)  # nothing heard since: nothing to record
    assert _lag_count() == before + 1


def test_a_claim_that_took_nothing_ends_the_measurement_unrecorded() -> None:
    lag = metrics.ClaimLag()
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
