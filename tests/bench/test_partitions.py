"""The partitions comparison of the benchmark, small: both tables prune every old row, the
partitioned one by dropping partitions, and both serve a job's audit rows."""

from __future__ import annotations

import pytest

from bench import ours, partitions
from bench.server import Server

# A scenario of the benchmark, run small: what it checks is the harness and the
# listener, not the server version, so it runs on the embedded server only (.ci/run).
pytestmark = pytest.mark.slow


def test_both_tables_prune_the_old_rows_and_serve_a_job_s_history(server_url: str) -> None:
    plain = Server(server_url)
    by_day = partitions.PartitionedServer(server_url)
    try:
        for server in (plain, by_day):
            pruned = partitions.prune(server, 5_000)
            assert pruned.rows == 5_000
            assert partitions.read(server, 5_000).buffers > 0
            drained = ours.throughput(server, 200, 1)
            assert drained.lost == 0 and drained.duplicated == 0
        # Dropping partitions writes almost no WAL; deleting rows writes a record a row. At
        # twenty thousand rows: the drops' catalog changes write full-page images after a
        # checkpoint (another test's DROP DATABASE forces one), 0.6 MB at the worst, as much
        # as deleting five thousand rows wrote.
        dropped = partitions.prune(by_day, 20_000).wal_bytes
        deleted = partitions.prune(plain, 20_000).wal_bytes
        assert dropped < deleted, (dropped, deleted)
    finally:
        plain.close()
        by_day.close()
