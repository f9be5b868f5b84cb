"""`--fairness` on `agent add`, `--priority`/`--fairness-key` on `job add`, and the job options of
`routine add` and `loop add`, as a user types them; a bad value is refused naming the rule."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg

from tests.e2e.support import run_cli
from tests.factories import make_agent


def test_agent_add_sets_and_changes_a_lanes_fairness(db_url: str, conn: psycopg.Connection) -> None:
    added = run_cli(
        db_url, "agent", "add", "shared", "--adapter", "noop", "--fairness", "round_robin"
    )
    assert added.returncode == 0, added.stderr
    assert conn.execute("select fairness from ceaseless.agents").fetchone() == ("round_robin",)
    changed = run_cli(db_url, "agent", "add", "shared", "--adapter", "noop", "--fairness", "fifo")
    assert changed.returncode == 0, changed.stderr
    assert conn.execute("select fairness from ceaseless.agents").fetchone() == ("fifo",)
    refused = run_cli(db_url, "agent", "add", "x", "--adapter", "noop", "--fairness", "lottery")
    assert refused.returncode != 0 and "lottery" in refused.stderr


def test_job_add_takes_a_priority_and_a_fairness_key(db_url: str, conn: psycopg.Connection) -> None:
    make_agent(conn)
    added = run_cli(
        db_url, "job", "add", "noop", "tidy", "--priority", "50", "--fairness-key", "acme"
    )
    assert added.returncode == 0, added.stderr
    row = conn.execute(
        "select priority, fairness_key from ceaseless.job where id = %s", (added.stdout.strip(),)
    ).fetchone()
    assert row == (50, "acme")
    refused = run_cli(db_url, "job", "add", "noop", "tidy", "--priority", "5000")
    assert refused.returncode != 0
    assert "priority_bounded" in refused.stderr


def test_routine_and_loop_add_set_their_jobs_priority_and_fairness_key(
    db_url: str, conn: psycopg.Connection, tmp_path: Path
) -> None:
    make_agent(conn)
    routine = run_cli(
        db_url, "routine", "add", "nightly", "--agent", "noop", "--prompt", "p",
        "--job-priority", "-5", "--job-fairness-key", "reports",
    )  # fmt: skip
    assert routine.returncode == 0, routine.stderr
    assert conn.execute(
        "select job_priority, job_fairness_key from ceaseless.routines"
    ).fetchone() == (-5, "reports")
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps({"nodes": [{"id": "A", "agent": "noop", "prompt": "p"}]}))
    loop = run_cli(
        db_url, "loop", "add", "--title", "t", "--task", "x", "--graph", str(graph),
        "--job-priority", "9", "--job-fairness-key", "research",
    )  # fmt: skip
    assert loop.returncode == 0, loop.stderr
    assert conn.execute(
        "select job_priority, job_fairness_key from ceaseless.loops"
    ).fetchone() == (
        9,
        "research",
    )
