"""The loop fire scenario of the benchmark, small: every node of every fire runs once, and the
numbers are there."""

from __future__ import annotations

import pytest

from bench import loops
from bench.server import Server

# A scenario of the benchmark, run small: what it checks is the harness and the
# listener, not the server version, so it runs on the embedded server only (.ci/run).
pytestmark = pytest.mark.slow


def test_fire_to_finish_runs_every_node_of_every_fire_once(server_url: str) -> None:
    server = Server(server_url)
    try:
        found = loops.fire_to_finish(server, nodes=5, fires=2)
    finally:
        server.close()
    assert (found.lost, found.duplicated) == (0, 0)
    assert 0 < found.values["done_p50_ms"] <= found.values["done_max_ms"]
