"""The throughput profile of the benchmark, small: it sees every part of a job's path (the
enqueue, the claim, the finish and their triggers), counts each job's rows as the path writes
them, and prints every line docs/performance.md shows."""

from __future__ import annotations

import pytest

from bench import profile
from bench.server import Server

# A scenario of the benchmark, run small: what it checks is the harness and the
# listener, not the server version, so it runs on the embedded server only (.ci/run).
pytestmark = pytest.mark.slow

JOBS = 3_000


def test_the_profile_accounts_for_every_job_and_every_call(server_url: str) -> None:
    server = Server(server_url)
    try:
        found = profile.measure(server, JOBS, 100, listeners=2)
    finally:
        server.close()
    functions = {f.name: f for f in found.functions}
    # The listener claims and finishes in batches: fewer calls than jobs, at least one.
    for name in ("claim_jobs", "finish_runs"):
        assert 0 < functions[name].calls_per_job <= 1, functions[name]
    assert any(name.startswith("_tg_job") for name in functions), sorted(functions)
    writes = {w.table: w for w in found.writes}
    # Each job inserted once and its one run inserted once; the job claimed and finished.
    assert writes["job"].inserted == 1.0
    assert writes["job"].updated >= 2.0
    assert writes["agent_run"].inserted == 1.0
    assert found.wal_bytes_per_job > 0
    assert found.listener_cpu_us_per_job > 0
    assert found.database_cpu_us_per_job > 0
    assert 0 < found.machine_busy <= 1
    # The backends were seen at work, and every sample was counted once.
    assert found.waits and abs(sum(found.waits.values()) - 1) < 1e-9, found.waits
    assert set(found.buffers_per_job) == {
        "claim_jobs (claim and start)",
        "extend_leases (heartbeat)",
        "finish_runs (finish)",
    }
    assert all(value > 0 for value in found.buffers_per_job.values()), found.buffers_per_job
    table = profile.markdown(found, "test")
    for line in ("`claim_jobs`", "`finish_runs`", "| `job` |", "| WAL |", "2 listeners"):
        assert line in table, table


def test_the_fan_in_profile_reads_matching_and_admission_apart(server_url: str) -> None:
    server = Server(server_url)
    try:
        found = profile.fan_in(server, 50, 100)
    finally:
        server.close()
    functions = {f.name: f for f in found.functions}
    # Every event matched once and fired once: one match, one admission, one run, one job.
    for name in ("_event_candidates", "_admit_fires", "_fire_routines"):
        assert functions[name].calls_per_job == 1.0, functions[name]
    writes = {w.table: w for w in found.writes}
    assert (writes["events"].inserted, writes["routine_runs"].inserted) == (1.0, 1.0)
    assert writes["job"].inserted == 1.0
    # The routines were written before the count began.
    assert "routines" not in writes
    assert "`_event_candidates`" in profile.fan_in_markdown(found)
