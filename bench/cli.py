"""`bin/bench`: run every scenario, peers included, and write the report.

Each scenario runs several times on fresh databases of one server; the report
gives the median with min and max, the lost and duplicated counts, the targets
and the ratios to the peers. `--quick` (the smoke test that
tests/bench/test_quick_run.py runs) shrinks every size and asserts only that
nothing was lost or duplicated — never a timing.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress

from bench import claim, forge, held_transaction, loops, many_writers, ours
from bench.report import Row, markdown, write
from bench.server import DatabaseUrlOpt, Reset, Server, provision

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
console = Console(stderr=True)


@dataclass(frozen=True)
class Sizes:
    runs: int
    jobs: int
    latency_jobs: int
    latency_rate: float
    cron_routines: int
    scale: tuple[int, int]
    event_routines: int
    events: int
    footprint_agents: int
    load_events: int
    loop_nodes: int
    loop_fires: int
    loop_iterations: int
    forge_issues: int
    claim_jobs: int
    claim_owners: int
    claims: int
    writers: int  # many writers: connections, and inserts of each
    writer_inserts: int
    held: tuple[float, float, float]  # held transaction: seconds before, held, after
    held_backlog: int


QUICK = Sizes(
    runs=1,
    jobs=2_000,
    latency_jobs=100,
    latency_rate=50,
    cron_routines=500,
    scale=(10_000, 100_000),
    event_routines=1_000,
    events=100,
    footprint_agents=50,
    load_events=400,
    loop_nodes=20,
    loop_fires=3,
    loop_iterations=50,
    forge_issues=1_000,
    claim_jobs=5_000,
    claim_owners=100,
    claims=50,
    writers=8,
    writer_inserts=20,
    held=(2, 3, 3),
    held_backlog=500,
)
FULL = Sizes(
    runs=3,
    jobs=20_000,
    latency_jobs=1_000,
    latency_rate=100,
    cron_routines=10_000,
    scale=(10_000, 1_000_000),
    event_routines=1_000,
    events=1_000,
    footprint_agents=200,
    load_events=2_000,
    loop_nodes=20,
    loop_fires=20,
    loop_iterations=500,
    forge_issues=5_000,
    claim_jobs=100_000,
    claim_owners=1_000,
    claims=500,
    writers=64,
    writer_inserts=200,
    held=(30, 120, 60),
    held_backlog=20_000,
)


def _repeat(runs: int, step: Callable[[], ours.Measurement]) -> list[ours.Measurement]:
    return [step() for _ in range(runs)]


def _rows(
    scenario: str,
    system: str,
    found: list[ours.Measurement],
    metrics: dict[str, str],
) -> list[Row]:
    rows = []
    for metric, target in metrics.items():
        values = [m.values[metric] for m in found]
        rows.append(
            Row(
                scenario,
                system,
                metric,
                statistics.median(values),
                min(values),
                max(values),
                len(found),
                sum(m.lost for m in found),
                sum(m.duplicated for m in found),
                target,
            )
        )
    return rows


PEERS = ("pgqueuer_peer", "procrastinate_peer", "pgbench_limit", "pgbench_batched")


def _peer(name: str) -> Any:
    """A peer module, or None when the bench extra is not installed."""
    import importlib

    try:
        return importlib.import_module(f"bench.peers.{name}")
    except ImportError as exc:
        console.print(f"[yellow]skipping {name}: {exc} (pip install '.[bench]')")
        return None


def _peer_rows(
    server: Server, module: Any, jobs: int, workers: int, runs: int, scenario: str
) -> list[Row]:
    found = []
    # A peer that drains the scenario's jobs in a blink measures its start-up instead: it
    # names how many times more rows it needs for a steady rate.
    jobs *= getattr(module, "JOBS_FACTOR", 1)
    for _ in range(runs):
        with server.database(migrated=False) as url:
            result = module.run(url, jobs, workers=workers)
        found.append(
            ours.Measurement(
                {"jobs_per_s": result.jobs / result.seconds}, result.lost, result.duplicated
            )
        )
    return _rows(scenario, result.name, found, {"jobs_per_s": ""})


def _median(rows: list[Row], scenario: str, system: str, metric: str) -> float | None:
    for row in rows:
        if (row.scenario, row.system, row.metric) == (scenario, system, metric):
            return row.median
    return None


def _verdicts(rows: list[Row]) -> None:
    limits = {
        "p50_ms": 5.0,
        "p99_ms": 20.0,
        "all_runs_s": 2.0,
        "double_fires": 0.0,
        "rss_mb": 120.0,
        "insert_errors": 0.0,
        "skipped_runs": 0.0,
        "listener_deadlocks": 0.0,
    }
    for row in rows:
        if row.system != "ceaseless":
            continue
        if row.metric in limits:
            row.target = f"≤ {limits[row.metric]:g}"
            row.verdict = "met" if row.median <= limits[row.metric] else "missed"
        elif row.metric in ("inserts_per_s", "runs_per_s"):
            row.target = "≥ 1,000"
            row.verdict = "met" if row.median >= 1000 else "missed"


def _claim_system(variant: str, baseline_ref: str) -> str:
    """The system a claim-path row names: the variant, the baseline by its git ref."""
    return f"ceaseless {claim.variant_label(variant, baseline_ref)}"


def _ratios(
    rows: list[Row], scale: tuple[int, int], baseline_ref: str | None
) -> list[tuple[str, float, str]]:
    ratios: list[tuple[str, float, str]] = []
    for listeners in (1, 2):
        scenario = f"throughput ({listeners} listener{'s' if listeners > 1 else ''})"
        ours_value = _median(rows, scenario, "ceaseless", "jobs_per_s")
        for peer, target in (
            ("pgqueuer", "≥ 2"),
            ("procrastinate", "≥ 10"),
            ("pgbench limit", "≥ 1"),
            ("batched ceiling", "≥ 0.25"),
        ):
            theirs = _median(rows, scenario, peer, "jobs_per_s")
            if ours_value and theirs:
                ratios.append((f"ours / {peer}, {scenario}", ours_value / theirs, target))
    if baseline_ref:
        variants = {_claim_system(v, baseline_ref): v for v in claim.VARIANTS}
        claim_p50 = {
            variants[row.system]: row.median
            for row in rows
            if row.scenario.startswith("claim path")
            and row.metric == "claim_p50_ms"
            and row.system in variants
        }
        ratios += claim.claim_ratios(claim_p50)
    small = _median(rows, f"scheduler scale ({scale[0]:,})", "ceaseless", "buffers")
    large = _median(rows, f"scheduler scale ({scale[1]:,})", "ceaseless", "buffers")
    if small and large:
        ratios.append((f"due-query buffers {scale[1]:,} / {scale[0]:,}", large / small, "≤ 1.5"))
    return ratios


@app.command()
def run(
    quick: Annotated[
        bool, typer.Option(help="Small sizes, one run: a smoke test (< 2 min).")
    ] = False,
    database_url: DatabaseUrlOpt = None,
    output: Annotated[Path, typer.Option(help="Where results.{md,json,png} go.")] = Path(
        "bench/results"
    ),
    peers: Annotated[
        bool, typer.Option(help="Also measure pgqueuer, procrastinate, pgbench.")
    ] = True,
    reset_setting: Annotated[
        list[str] | None,
        typer.Option(
            help="FUNCTION:SETTING (repeatable): run ceaseless's functions with this planner "
            "setting reset (ALTER FUNCTION … RESET), to see whether it still pays.",
        ),
    ] = None,
    baseline_ref: Annotated[
        str | None,
        typer.Option(
            help="Also compare the claim with fairness (fifo, round_robin) against this git "
            "ref's claim, e.g. main (bench/claim.py)."
        ),
    ] = None,
) -> None:
    """Run every scenario, ours and the peers', and write the report."""
    sizes = QUICK if quick else FULL
    rows: list[Row] = []
    latencies: list[float] = []
    # Per run of the event load: INSERT errors by SQLSTATE and skips by reason,
    # which the rows only total.
    load_details: list[dict[str, Any]] = []
    started = datetime.now(UTC)
    try:
        resets = tuple(Reset.parse(text) for text in reset_setting or ())
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--reset-setting") from exc
    with provision(database_url, resets) as server, Progress(console=console) as progress:
        steps = (
            12 + (2 * len(PEERS) if peers else 0) + (2 if peers else 0) + (1 if baseline_ref else 0)
        )
        overall = progress.add_task("benchmarks", total=steps)

        def step(label: str, action: Callable[[], list[Row]]) -> None:
            task = progress.add_task(label, total=None)
            rows.extend(action())
            progress.remove_task(task)
            progress.advance(overall)

        for listeners in (1, 2):
            scenario = f"throughput ({listeners} listener{'s' if listeners > 1 else ''})"
            step(
                scenario,
                lambda n=listeners, s=scenario: _rows(
                    s,
                    "ceaseless",
                    _repeat(sizes.runs, lambda: ours.throughput(server, sizes.jobs, n)),
                    {"jobs_per_s": ""},
                ),
            )
            if peers:
                for name in PEERS:
                    module = _peer(name)
                    if module is None:
                        progress.advance(overall)
                        continue
                    step(
                        f"{scenario}: {name}",
                        lambda m=module, n=listeners, s=scenario: _peer_rows(
                            server, m, sizes.jobs, n, sizes.runs, s
                        ),
                    )

        def latency_rows() -> list[Row]:
            found = _repeat(
                sizes.runs, lambda: ours.latency(server, sizes.latency_jobs, sizes.latency_rate)
            )
            latencies.extend(found[-1].extra.get("samples", []))
            return _rows("latency", "ceaseless", found, {"p50_ms": "", "p95_ms": "", "p99_ms": ""})

        step("latency", latency_rows)
        step(
            "cron fan-out",
            lambda: _rows(
                f"cron fan-out ({sizes.cron_routines:,} routines)",
                "ceaseless",
                _repeat(sizes.runs, lambda: ours.cron_fanout(server, sizes.cron_routines)),
                {"all_runs_s": "", "lateness_p99_s": "", "double_fires": ""},
            ),
        )
        for count in sizes.scale:
            step(
                f"scheduler scale {count:,}",
                lambda c=count: _rows(
                    f"scheduler scale ({c:,})",
                    "ceaseless",
                    [ours.scheduler_scale(server, c)],
                    {"buffers": ""},
                ),
            )
        step(
            "event fan-in",
            lambda: _rows(
                f"event fan-in ({sizes.event_routines:,} routines)",
                "ceaseless",
                _repeat(
                    sizes.runs, lambda: ours.event_fanin(server, sizes.event_routines, sizes.events)
                ),
                {"inserts_per_s": "", "ms_per_insert": "", "unmatched_inserts_per_s": ""},
            ),
        )

        def event_load_rows() -> list[Row]:
            # As shipped, and with the producers' announcements relayed (docs/notify.md).
            rows: list[Row] = []
            for system, relay in (("ceaseless", False), ("ceaseless, producers relayed", True)):
                found = _repeat(
                    sizes.runs,
                    lambda relay=relay: ours.event_load(server, sizes.load_events, relay=relay),
                )
                if not relay:
                    load_details.extend(m.extra for m in found)
                rows += _rows(
                    f"event load ({sizes.load_events:,} events × 6 routines)",
                    system,
                    found,
                    {
                        "events_per_s": "",
                        "runs_per_s": "",
                        "insert_p50_ms": "",
                        "insert_p99_ms": "",
                        "insert_errors": "",
                        "skipped_runs": "",
                        "listener_deadlocks": "",
                    },
                )
            return rows

        step("event load", event_load_rows)
        step(
            "loop chain",
            lambda: _rows(
                f"loop chain ({sizes.loop_iterations:,} on_completion iterations)",
                "ceaseless",
                _repeat(sizes.runs, lambda: ours.loop_chain(server, sizes.loop_iterations)),
                {"iterations_per_s": "", "ms_per_iteration": ""},
            ),
        )
        step(
            "listener footprint",
            lambda: _rows(
                f"listener footprint ({sizes.footprint_agents} agents)",
                "ceaseless",
                [ours.listener_footprint(server, sizes.footprint_agents)],
                {"rss_mb": ""},
            ),
        )
        step(
            "loop fire to finish",
            lambda: _rows(
                f"loop fire → {sizes.loop_nodes}-node graph done ({sizes.loop_fires} fires)",
                "ceaseless",
                _repeat(
                    sizes.runs,
                    lambda: loops.fire_to_finish(server, sizes.loop_nodes, sizes.loop_fires),
                ),
                {"done_p50_ms": "", "done_max_ms": ""},
            ),
        )
        step(
            "forge intake",
            lambda: _rows(
                f"forge intake (a listing of {sizes.forge_issues:,} open issues)",
                "ceaseless",
                _repeat(sizes.runs, lambda: forge.intake(server, sizes.forge_issues)),
                {"first_ms": "", "not_modified_ms": "", "changed_ms": "", "jobs_created": ""},
            ),
        )
        if peers:

            def many_writers_rows() -> list[Row]:
                found: list[Row] = []
                for count in (1, 8, 32):
                    measured: dict[str, list[ours.Measurement]] = {
                        v: [] for v in many_writers.VARIANTS
                    }
                    for _ in range(sizes.runs):
                        results = many_writers.many_writers(
                            server, count, sizes.writers, sizes.writer_inserts
                        )
                        expected = sizes.writers * sizes.writer_inserts
                        for variant, r in results.items():
                            measured[variant].append(
                                ours.Measurement(
                                    {
                                        "commits_per_s": r.commits_per_s,
                                        "commit_p50_ms": r.p50_ms,
                                        "commit_p99_ms": r.p99_ms,
                                    },
                                    lost=expected - r.rows,
                                )
                            )
                    scenario = (
                        f"many writers ({sizes.writers} × {sizes.writer_inserts} inserts, "
                        f"{count} idle listeners)"
                    )
                    for variant, found_runs in measured.items():
                        found += _rows(
                            scenario,
                            variant,
                            found_runs,
                            {"commits_per_s": "", "commit_p50_ms": "", "commit_p99_ms": ""},
                        )
                return found

            step("many writers", many_writers_rows)

            def held_rows() -> list[Row]:
                before, hold, after = sizes.held
                found: list[Row] = []
                for system in (held_transaction.ceaseless, held_transaction.pgqueuer):
                    timeline = system(server, before, hold, after, sizes.held_backlog)
                    console.print(held_transaction.report(timeline))
                    recovered = timeline.recovered_after()
                    found += _rows(
                        f"held transaction ({hold:g} s, REPEATABLE READ)",
                        timeline.system,
                        [
                            ours.Measurement(
                                {
                                    "full_speed_jobs_per_s": timeline.full_speed(),
                                    "slowest_held_jobs_per_s": timeline.slowest_held(),
                                    "recovered_after_s": (
                                        recovered if recovered is not None else float("nan")
                                    ),
                                    "dead_tuples": float(sum(timeline.dead_tuples.values())),
                                }
                            )
                        ],
                        {
                            "full_speed_jobs_per_s": "",
                            "slowest_held_jobs_per_s": "",
                            "recovered_after_s": "≤ 30",
                            "dead_tuples": "",
                        },
                    )
                return found

            step("held transaction", held_rows)
        if baseline_ref:

            def claim_rows() -> list[Row]:
                found: dict[str, list[ours.Measurement]] = {v: [] for v in claim.VARIANTS}
                with claim.baseline_tree(baseline_ref) as baseline:
                    for _ in range(sizes.runs):
                        measured = claim.claim_paths(
                            server, baseline, sizes.claim_jobs, sizes.claim_owners, sizes.claims
                        )
                        for variant, m in measured.items():
                            found[variant].append(m)
                scenario = (
                    f"claim path ({sizes.claim_jobs:,} pending over {sizes.claim_owners:,} owners)"
                )
                return [
                    row
                    for variant, measured in found.items()
                    for row in _rows(
                        scenario,
                        _claim_system(variant, baseline_ref),
                        measured,
                        {"claim_p50_ms": "", "claim_p95_ms": ""},
                    )
                ]

            step("claim path", claim_rows)
        settings = server.settings()

    _verdicts(rows)
    ratios = _ratios(rows, sizes.scale, baseline_ref)
    meta = {
        "started": started.isoformat(),
        "quick": quick,
        "sizes": sizes.__dict__,
        "server": "embedded" if database_url is None else "given",
        "settings": settings,
        "reset_settings": [f"{r.function}:{r.setting}" for r in resets],
        "event_load": load_details,
    }
    write(output, rows, ratios, meta, latencies)
    typer.echo(markdown(rows, ratios))
    for run_number, details in enumerate(load_details, 1):
        console.print(
            f"event load, run {run_number}: INSERT errors by SQLSTATE {details['errors'] or '{}'}, "
            f"skipped runs by reason {details['skipped'] or '{}'}"
        )
    broken = [r for r in rows if r.lost or r.duplicated]
    if broken:
        for row in broken:
            console.print(
                f"[red]{row.scenario} / {row.system}: {row.lost} lost, {row.duplicated} duplicated"
            )
        raise typer.Exit(1)
    if resets:
        console.print(
            "[yellow]measured with these planner settings reset (not ceaseless as shipped): "
            + ", ".join(f"{r.function}:{r.setting}" for r in resets)
        )
    console.print(f"results in {output}/results.md, .json, .png")
