"""The results: a markdown table, a JSON file and a PNG chart, from one list of rows."""

from __future__ import annotations

import json
import platform
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass
class Row:
    scenario: str
    system: str
    metric: str
    median: float
    low: float
    high: float
    runs: int
    lost: int = 0
    duplicated: int = 0
    target: str = ""
    verdict: str = ""


def _fmt(value: float) -> str:
    if value != value:  # NaN
        return "–"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:,.2f}"


def markdown(rows: list[Row], ratios: list[tuple[str, float, str]]) -> str:
    lines = [
        "| scenario | system | metric | median | min – max | runs | lost | dup | target | |",
        "|---|---|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.scenario} | {r.system} | {r.metric} | {_fmt(r.median)} | "
            f"{_fmt(r.low)} – {_fmt(r.high)} | {r.runs} | {r.lost} | {r.duplicated} | "
            f"{r.target} | {r.verdict} |"
        )
    if ratios:
        lines += ["", "| ratio | value | target |", "|---|---:|---|"]
        lines += [f"| {name} | {value:.2f}× | {target} |" for name, value, target in ratios]
    return "\n".join(lines) + "\n"


def write(
    out: Path,
    rows: list[Row],
    ratios: list[tuple[str, float, str]],
    meta: dict[str, Any],
    latencies: list[float],
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    meta = {**meta, "python": platform.python_version(), "machine": platform.machine()}
    (out / "results.json").write_text(
        json.dumps(
            {
                "meta": meta,
                "rows": [asdict(r) for r in rows],
                "ratios": [{"name": n, "value": v, "target": t} for n, v, t in ratios],
            },
            indent=2,
            default=str,
        )
    )
    (out / "results.md").write_text(markdown(rows, ratios))
    _chart(out / "results.png", rows, latencies)


def _chart(path: Path, rows: list[Row], latencies: list[float]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # the chart is optional; the table and JSON are not
        return
    bars = [r for r in rows if r.metric == "jobs_per_s"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    labels = [f"{r.system}\n{r.scenario.split('(')[-1].rstrip(')')}" for r in bars]
    left.bar(
        range(len(bars)),
        [r.median for r in bars],
        yerr=[[r.median - r.low for r in bars], [r.high - r.median for r in bars]],
        color=["#2b6cb0" if r.system == "ceaseless" else "#a0aec0" for r in bars],
    )
    left.set_xticks(range(len(bars)), labels, fontsize=8, rotation=30, ha="right")
    left.set_ylabel("jobs/s (median, min–max)")
    left.set_title("Throughput: claim → run → finish")
    if latencies:
        right.hist(latencies, bins=50, color="#2b6cb0")
        right.set_xlabel("insert → agent start (ms)")
        right.set_ylabel("jobs")
        right.set_title("Latency distribution (ceaseless)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
