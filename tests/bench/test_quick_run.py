"""`bin/bench --quick`, the benchmark's smoke test: every scenario of the full run, ours and
the peers', completes at small sizes with nothing lost or duplicated, and the report is
written. It asserts no timing (docs/performance.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The whole benchmark at small sizes: a minute or two of the listener and the peers on the
# host, not what differs between server versions, so on the embedded server only (.ci/run).
pytestmark = pytest.mark.slow


def test_every_scenario_completes_with_nothing_lost_or_duplicated(
    server_url: str, tmp_path: Path
) -> None:
    for module in ("pgqueuer", "procrastinate", "matplotlib"):
        pytest.importorskip(module, reason="the peers and the chart are the optional 'bench' extra")
    done = subprocess.run(
        [str(ROOT / "bin" / "bench"), "--quick", "--database-url", server_url,
         "--output", str(tmp_path), "--baseline-ref", "HEAD"],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert {p.name for p in tmp_path.iterdir()} >= {"results.md", "results.json", "results.png"}
    results = json.loads((tmp_path / "results.json").read_text())
    rows = results["rows"]
    broken = [(r["scenario"], r["system"], r["lost"], r["duplicated"]) for r in rows
              if r["lost"] or r["duplicated"]]  # fmt: skip
    assert broken == []
    systems = {row["system"] for row in rows}
    assert {"ceaseless", "pgqueuer", "procrastinate", "pgbench limit"} <= systems
    scenarios = {row["scenario"].split(" (")[0] for row in rows}
    assert {
        "throughput", "latency", "cron fan-out", "scheduler scale", "event fan-in",
        "event load", "loop chain", "listener footprint", "forge intake", "many writers",
        "held transaction",
    } <= scenarios  # fmt: skip
    # The claim path against a baseline (here HEAD against itself) is read off the report as
    # the ratios its targets name.
    assert "claim path" in scenarios
    ratios = {ratio["name"]: ratio for ratio in results["ratios"]}
    for name in (
        "claim p50, fifo / fifo before fairness",
        "claim p50, round_robin / fifo",
        "claim p50, round_robin / fifo before fairness",
    ):
        assert ratios[name]["value"] > 0, ratios
    assert ratios["claim p50, round_robin / fifo"]["target"] == "≤ 1.2"
