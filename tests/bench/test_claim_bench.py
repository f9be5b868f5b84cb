"""The claim-path comparison of the benchmark, small: every claimed job runs once in every
variant, the round robin serves every owner, and the numbers are there."""

from __future__ import annotations

import pytest

from bench import claim
from bench.server import Server

# A scenario of the benchmark, run small: what it checks is the harness and the
# listener, not the server version, so it runs on the embedded server only (.ci/run).
pytestmark = pytest.mark.slow


def test_claim_paths_claim_every_job_once_and_round_robin_serves_every_owner(
    server_url: str,
) -> None:
    server = Server(server_url)
    try:
        with claim.baseline_tree("HEAD") as baseline:
            found = claim.claim_paths(server, baseline, jobs=300, keys=30, claims=5)
    finally:
        server.close()
    assert set(found) == set(claim.VARIANTS)
    for measured in found.values():
        assert (measured.lost, measured.duplicated) == (0, 0)
        assert 0 < measured.values["claim_p50_ms"] <= measured.values["claim_p95_ms"]
    # Fifteen claims of ten (ten warming the plans): round robin serves every one of the
    # thirty owners.
    assert found["round_robin"].values["owners_served"] == 30
