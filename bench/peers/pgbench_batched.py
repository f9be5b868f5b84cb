"""The "batched ceiling" peer: the most this PostgreSQL can claim and complete, batching it all.

Called by the benchmark harness as `run(dsn, jobs, workers=...)` on an empty database, like the
other peers, but `workers` is not used: the ceiling is defined as four pgbench clients, each
claiming and completing 100 rows per statement with SKIP LOCKED (claim_complete_batch.sql),
one commit per 100 jobs. It writes no run, no audit row and no NOTIFY, so nothing that keeps
every guarantee gets near it; the harness reports ceaseless's throughput as a fraction of it.

Setup, timing and counting are the pgbench limit's (pgbench_limit.py). Each client runs one
transaction more than its share: near the end a statement can find fewer than 100 pending rows
that no other client holds, and the spare one picks up what that leaves; a statement that finds
none updates nothing.
"""

from __future__ import annotations

import math
from pathlib import Path

from bench.peers import PeerResult
from bench.peers.pgbench_limit import drain

NAME = "batched ceiling"
SCRIPT = Path(__file__).with_name("claim_complete_batch.sql")
BATCH = 100
CLIENTS = 4
# At well over 100,000 rows a second, the scenario's 20,000 jobs would take a tenth of a second,
# mostly pgbench connecting: the harness gives this peer ten times the rows.
JOBS_FACTOR = 10


def run(dsn: str, jobs: int, *, workers: int = 1, timeout: float = 600.0) -> PeerResult:
    """Fill the queue with `jobs` rows and time four clients completing them 100 at a time."""
    del workers  # the ceiling's shape is fixed: four clients, whatever the scenario
    transactions = math.ceil(jobs / (CLIENTS * BATCH)) + 1
    return drain(
        NAME, dsn, jobs, SCRIPT, clients=CLIENTS, transactions=transactions, timeout=timeout
    )
