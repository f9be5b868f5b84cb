"""The held-transaction scenario of the benchmark, small: both systems drain under a held
REPEATABLE READ transaction, the hold's window is where it was asked for, and the timeline's
arithmetic (full speed, slowest held bucket, recovery) reads its buckets as documented."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bench import held_transaction
from bench.held_transaction import Timeline
from bench.server import Server


def test_a_timeline_reads_full_speed_the_held_dip_and_the_recovery() -> None:
    timeline = Timeline("x", datetime(2026, 1, 1, tzinfo=UTC), held_from=30, held_to=70)
    # Buckets of 10 s: warm-up, three at full speed, the hold, then back.
    timeline.buckets = [50, 100, 100, 100, 60, 40, 30, 80, 95, 100, 20]
    assert timeline.full_speed() == 100
    # Buckets 4-6: the ones the hold begins and ends in are partly free, so left out.
    assert timeline.slowest_held() == 30
    assert timeline.recovered_after() == 20  # bucket 8 ends at 90 s, 20 s after the hold


@pytest.mark.slow
@pytest.mark.parametrize("system", [held_transaction.ceaseless, held_transaction.pgqueuer])
def test_both_systems_drain_under_a_held_transaction(server_url: str, system: object) -> None:
    server = Server(server_url)
    try:
        timeline = system(server, 2.0, 3.0, 3.0, 500)  # type: ignore[operator]
    finally:
        server.close()
    assert 1.5 <= timeline.held_from <= 4 and 2.5 <= timeline.held_to - timeline.held_from <= 5
    assert sum(timeline.buckets) > 0
    assert set(timeline.size_mb) == set(timeline.dead_tuples) and len(timeline.size_mb) == 2
