"""The lease-upkeep scenario of the benchmark, small: a heartbeat and a sweep each touch every
lease once, and neither plan reads a CTE twice or discards more rows than there are leases."""

from __future__ import annotations

import pytest

from bench import leases
from bench.server import Server


@pytest.mark.parametrize("scenario", list(leases.SCENARIOS))
def test_lease_upkeep_is_linear_on_young_tables(server_url: str, scenario: str) -> None:
    server = Server(server_url)
    try:
        found = leases.measure(server, None, scenario, 200)
    finally:
        server.close()
    assert found["rescans"] == 1, found
    assert found["discarded"] <= 200, found
    assert found["buffers"] > 0
