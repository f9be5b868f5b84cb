"""The claim path: what one claim_jobs call costs with a deep backlog, by lane fairness.

A lane of `jobs` pending jobs spread over `keys` owners; claim_jobs(p_start) takes a
batch as a listener does, timed on the client, and the batch is finished (untimed)
so the lane has room for the next. Three variants on fresh databases of one server,
taken in turn, claim by claim, so a noisy neighbour weighs on all alike:
- fifo at a baseline git ref (the claim before fairness, migrated from that ref's
  db/ and functions/);
- fifo at this checkout (priority first, then due time);
- round_robin at this checkout (one job per owner in turn).
Each variant has a database of its own; their claims are taken in turn.

`python -m bench.claim --baseline-ref main` runs it alone; bin/bench runs it with
the other scenarios when given --baseline-ref.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Annotated

import psycopg
import typer

from bench.observe import percentile
from bench.ours import Measurement
from bench.server import DatabaseUrlOpt, Server, provision
from listener.database.migrate import migrate

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("fifo (baseline)", "fifo", "round_robin")


@contextmanager
def baseline_tree(ref: str) -> Iterator[Path]:
    """db/ and functions/ as they are at git ref `ref`, in a temporary directory."""
    with tempfile.TemporaryDirectory(prefix="bench-baseline-") as directory:
        archive = subprocess.run(
            ["git", "archive", ref, "db", "functions"], cwd=ROOT, check=True, capture_output=True
        )
        subprocess.run(["tar", "-x", "-C", directory], input=archive.stdout, check=True)
        yield Path(directory)


def _lane(conn: psycopg.Connection, variant: str, jobs: int, keys: int, batch: int) -> None:
    """One lane of `jobs` pending jobs over `keys` owners (at the baseline: no fairness)."""
    if variant == "fifo (baseline)":
        conn.execute(
            "insert into ceaseless.agents (name, adapter, max_concurrent) "
            "values ('noop', 'noop', %s)",
            (batch,),
        )
        conn.execute(
            "insert into ceaseless.job (kind, agent, prompt, user_id) "
            "select 'task', 'noop', 'job ' || g, 'owner' || (g %% %s) "
            "from generate_series(1, %s) g",
            (keys, jobs),
        )
    else:
        conn.execute(
            "insert into ceaseless.agents (name, adapter, max_concurrent, fairness) "
            "values ('noop', 'noop', %s, %s)",
            (batch, variant),
        )
        conn.execute(
            "insert into ceaseless.job (kind, agent, prompt, user_id, fairness_key) "
            "select 'task', 'noop', 'job ' || g, 'owner' || (g %% %s), "
            "'owner' || (g %% %s) from generate_series(1, %s) g",
            (keys, keys, jobs),
        )
    conn.execute("vacuum analyze ceaseless.job")


def claim_and_finish(conn: psycopg.Connection, batch: int) -> float:
    """One claim of up to `batch` jobs, as a listener makes it, in ms; its runs are then
    finished (untimed) so the lane has room for the next."""
    started = time.perf_counter()
    runs = conn.execute(
        "select id, run_id from ceaseless.claim_jobs('bench', %s, p_start => true)", (batch,)
    ).fetchall()
    elapsed = (time.perf_counter() - started) * 1000
    results = [{"run_id": str(run_id), "outcome": "succeeded"} for _, run_id in runs]
    conn.execute(
        "select count(*) from ceaseless.finish_runs('bench', %s::jsonb)", (json.dumps(results),)
    )
    return elapsed


def _checked(conn: psycopg.Connection, timings: list[float], expected: int) -> Measurement:
    row = conn.execute(
        "select count(distinct job_id), count(*) from ceaseless.agent_run"
    ).fetchone()
    owners = conn.execute(
        "select count(distinct user_id) from ceaseless.job where state = 'delivered'"
    ).fetchone()
    assert row is not None and owners is not None
    distinct, total = int(row[0]), int(row[1])
    return Measurement(
        {
            "claim_p50_ms": statistics.median(timings),
            "claim_p95_ms": percentile(timings, 95),
            "claims_per_s": len(timings) / (sum(timings) / 1000),
            "owners_served": float(owners[0]),
        },
        lost=expected - distinct,
        duplicated=total - distinct,
    )


def claim_paths(
    server: Server, baseline: Path, jobs: int, keys: int, claims: int
) -> dict[str, Measurement]:
    """Every variant on a database of its own, `claims` claims of 10 each, taken in turn (one
    claim of each variant, then the next), so a busy moment of the machine weighs on all
    alike. The first ten claims of each warm its plans and are not counted."""
    batch, warm = 10, 10
    with ExitStack() as stack:
        conns: dict[str, psycopg.Connection] = {}
        for variant in VARIANTS:
            at_baseline = variant == "fifo (baseline)"
            url = stack.enter_context(server.database(migrated=not at_baseline))
            if at_baseline:
                migrate(url, root=baseline)
            conn = stack.enter_context(psycopg.connect(url, autocommit=True))
            _lane(conn, variant, jobs, keys, batch)
            conns[variant] = conn
        timings: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
        for n in range(warm + claims):
            for variant, conn in conns.items():
                elapsed = claim_and_finish(conn, batch)
                if n >= warm:
                    timings[variant].append(elapsed)
        return {
            variant: _checked(conn, timings[variant], (warm + claims) * batch)
            for variant, conn in conns.items()
        }


def variant_label(variant: str, baseline_ref: str) -> str:
    """A variant as the reports name it: the baseline by its git ref."""
    return variant.replace("baseline", baseline_ref)


def claim_ratios(p50_ms: dict[str, float]) -> list[tuple[str, float, str]]:
    """What the claim path must show, from each variant's median claim p50 (keyed as
    VARIANTS): fifo no slower than the claim before fairness, round_robin within 20 % of
    fifo and of the claim before fairness. As (name, ratio, target)."""
    before, fifo, round_robin = (p50_ms.get(variant) for variant in VARIANTS)
    if not (before and fifo and round_robin):
        return []
    return [
        ("claim p50, fifo / fifo before fairness", fifo / before, "≤ 1"),
        ("claim p50, round_robin / fifo", round_robin / fifo, "≤ 1.2"),
        ("claim p50, round_robin / fifo before fairness", round_robin / before, "≤ 1.2"),
    ]


def main(
    baseline_ref: Annotated[
        str, typer.Option(help="The git ref whose claim is the baseline, e.g. main.")
    ] = "main",
    jobs: Annotated[int, typer.Option(help="Pending jobs in the lane.")] = 100_000,
    keys: Annotated[int, typer.Option(help="Owners the jobs are spread over.")] = 1_000,
    claims: Annotated[int, typer.Option(help="Claims of 10 per run.")] = 500,
    runs: Annotated[int, typer.Option(help="Runs of each variant, interleaved.")] = 3,
    database_url: DatabaseUrlOpt = None,
) -> None:
    """Time claim_jobs at a baseline ref (fifo) and here (fifo, round_robin), side by side."""
    found: dict[str, list[Measurement]] = {variant: [] for variant in VARIANTS}
    with baseline_tree(baseline_ref) as baseline, provision(database_url) as server:
        for _ in range(runs):
            for variant, measured in claim_paths(server, baseline, jobs, keys, claims).items():
                found[variant].append(measured)
    typer.echo(
        f"claim path: {jobs:,} pending jobs over {keys:,} owners, {claims} claims of 10 per "
        f"run, the variants in turn, {runs} runs (median [min-max] of the runs)"
    )
    for variant, measured in found.items():
        cells = []
        for metric in ("claim_p50_ms", "claim_p95_ms", "claims_per_s", "owners_served"):
            values = [m.values[metric] for m in measured]
            cells.append(
                f"{metric} {statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"
            )
        lost = sum(m.lost for m in measured)
        doubled = sum(m.duplicated for m in measured)
        label = variant_label(variant, baseline_ref)
        typer.echo(f"{label:>16}: " + ", ".join(cells) + f"; lost {lost}, duplicated {doubled}")
    medians = {
        variant: statistics.median(m.values["claim_p50_ms"] for m in measured)
        for variant, measured in found.items()
    }
    for name, ratio, target in claim_ratios(medians):
        typer.echo(f"{name}: {ratio:.3f} (target {target})")


if __name__ == "__main__":
    typer.run(main)
