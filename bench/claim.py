"""The claim path: what one claim_jobs call costs with a deep backlog, by lane fairness.

A lane of `jobs` pending jobs spread over `keys` owners; claim_jobs(p_start) takes a
batch as a listener does, timed on the client, and the batch is finished (untimed)
so the lane has room for the next. Three variants on fresh databases of one server,
interleaved run by run so a noisy neighbour weighs on all alike:
- fifo at a baseline git ref (the claim before fairness, migrated from that ref's
  db/ and functions/);
- fifo at this checkout (priority first, then due time);
- round_robin at this checkout (one job per owner in turn).

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
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import psycopg
import typer

from bench.observe import percentile
from bench.ours import Measurement
from bench.server import Server, provision
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


def claim_path(
    server: Server, jobs: int, keys: int, variant: str, baseline: Path | None, claims: int
) -> Measurement:
    """`claims` claims of up to 10 jobs each from one lane of `jobs` pending jobs over `keys`
    owners; p50 and p95 of one claim in ms, and claims per second of claiming time."""
    batch = 10
    at_baseline = variant == "fifo (baseline)"
    with server.database(migrated=not at_baseline) as url:
        if at_baseline:
            assert baseline is not None, "the baseline variant needs a baseline tree"
            migrate(url, root=baseline)
        with psycopg.connect(url, autocommit=True) as conn:
            if at_baseline:
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
            timings: list[float] = []
            for _ in range(claims):
                started = time.perf_counter()
                runs = conn.execute(
                    "select id, run_id from ceaseless.claim_jobs('bench', %s, p_start => true)",
                    (batch,),
                ).fetchall()
                timings.append((time.perf_counter() - started) * 1000)
                results = [{"run_id": str(run_id), "outcome": "succeeded"} for _, run_id in runs]
                conn.execute(
                    "select count(*) from ceaseless.finish_runs('bench', %s::jsonb)",
                    (json.dumps(results),),
                )
            row = conn.execute(
                "select count(distinct job_id), count(*) from ceaseless.agent_run"
            ).fetchone()
            assert row is not None
            distinct, total = int(row[0]), int(row[1])
            owners = conn.execute(
                "select count(distinct j.user_id) from ceaseless.job j where j.state = 'delivered'"
            ).fetchone()
            assert owners is not None
    return Measurement(
        {
            "claim_p50_ms": statistics.median(timings),
            "claim_p95_ms": percentile(timings, 95),
            "claims_per_s": claims / (sum(timings) / 1000),
            "owners_served": float(owners[0]),
        },
        lost=claims * batch - distinct,
        duplicated=total - distinct,
    )


def compare(
    server: Server, baseline: Path, jobs: int, keys: int, claims: int, runs: int
) -> dict[str, list[Measurement]]:
    """Every variant `runs` times, interleaved."""
    found: dict[str, list[Measurement]] = {variant: [] for variant in VARIANTS}
    for _ in range(runs):
        for variant in VARIANTS:
            found[variant].append(claim_path(server, jobs, keys, variant, baseline, claims))
    return found


def main(
    baseline_ref: Annotated[
        str, typer.Option(help="The git ref whose claim is the baseline, e.g. main.")
    ] = "main",
    jobs: Annotated[int, typer.Option(help="Pending jobs in the lane.")] = 100_000,
    keys: Annotated[int, typer.Option(help="Owners the jobs are spread over.")] = 1_000,
    claims: Annotated[int, typer.Option(help="Claims of 10 per run.")] = 500,
    runs: Annotated[int, typer.Option(help="Runs of each variant, interleaved.")] = 3,
    database_url: Annotated[
        str | None,
        typer.Option(help="Measure on this server (default: a fresh embedded PostgreSQL 18)."),
    ] = None,
) -> None:
    """Time claim_jobs at a baseline ref (fifo) and here (fifo, round_robin), side by side."""
    with baseline_tree(baseline_ref) as baseline, provision(database_url) as server:
        found = compare(server, baseline, jobs, keys, claims, runs)
    typer.echo(
        f"claim path: {jobs:,} pending jobs over {keys:,} owners, {claims} claims of 10, "
        f"{runs} runs each (median [min-max])"
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
        label = f"{variant.replace('baseline', baseline_ref)}"
        typer.echo(f"{label:>16}: " + ", ".join(cells) + f"; lost {lost}, duplicated {doubled}")


if __name__ == "__main__":
    typer.run(main)
