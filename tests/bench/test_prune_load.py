"""The retention-under-load scenario of the benchmark, small: the whole history is pruned in
batches beside the claims, every claim finds work, and the numbers are there."""

from __future__ import annotations

import pytest

from bench import prune_load
from bench.server import Server

# A scenario of the benchmark, run small: what it checks is the harness and the
# listener, not the server version, so it runs on the embedded server only (.ci/run).
pytestmark = pytest.mark.slow


def test_the_history_is_pruned_beside_the_claims_and_both_variants_claim_alike(
    server_url: str,
) -> None:
    server = Server(server_url)
    try:
        found = prune_load.measure(server, history=500, batch=100, claims=None)
    finally:
        server.close()
    beside, alone = found["pruning beside"], found["nothing to prune"]
    assert beside.pruned == 500 and alone.pruned == 0
    assert beside.claims == alone.claims >= prune_load.MIN_CLAIMS
    for result in (beside, alone):
        assert 0 < result.claim_p50_ms <= result.claim_p99_ms
