"""`ceaseless prune`: removes what is past retention, prints what went, and refuses what the
database refuses (functions/96_retention.sql)."""

from __future__ import annotations

import json

import psycopg

from tests.e2e.support import run_cli
from tests.factories import ended_long_ago, make_agent, make_job


def _old_events(conn: psycopg.Connection, count: int) -> None:
    conn.execute(
        "insert into ceaseless.events (user_id, content, created_at) "
        "select 'alice', 'e' || g, now() - make_interval(days => 10 + g) "
        "from generate_series(1, %s) g",
        (count,),
    )


def _count(conn: psycopg.Connection, table: str) -> int:
    row = conn.execute(f"select count(*) from ceaseless.{table}").fetchone()
    assert row is not None
    return int(row[0])


def test_prune_removes_what_is_past_retention_in_batches_and_prints_it(
    db_url: str, conn: psycopg.Connection
) -> None:
    make_agent(conn)
    _old_events(conn, 5)
    conn.execute("insert into ceaseless.events (user_id, content) values ('alice', 'today')")
    ended_long_ago(conn, "delivered")
    live = make_job(conn)

    dry = run_cli(db_url, "prune", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert _count(conn, "events") == 6 and _count(conn, "job") == 2
    lines = dry.stdout.splitlines()
    assert lines[0].split() == ["kind", "would", "remove"]
    assert "events" in dry.stdout and "dry run: nothing was removed" in dry.stdout

    result = run_cli(db_url, "prune", "--limit", "2")

    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split()[1] for line in result.stdout.splitlines()[2:-1]}
    assert rows["events"] == "5" and rows["jobs"] == "1"
    assert result.stdout.splitlines()[-1] == "6 rows removed"
    assert _count(conn, "events") == 1
    row = conn.execute("select id from ceaseless.job").fetchone()
    assert row is not None and row[0] == live
    # Three batches (2, 2, 1 events), each audited.
    assert _count(conn, "audit_log where entity = 'retention'") == 3


def test_prune_only_one_kind_as_json(db_url: str, conn: psycopg.Connection) -> None:
    _old_events(conn, 2)

    result = run_cli(db_url, "prune", "--only", "events", "--output", "json")

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [{"kind": "events", "removed": 2}]


def test_an_unknown_kind_is_refused_naming_the_kinds(db_url: str) -> None:
    result = run_cli(db_url, "prune", "--only", "jobz")

    assert result.returncode == 1
    assert result.stderr.startswith("error: prune.p_only: must be one of routine_runs, ")
    assert "got jobz" in result.stderr


def test_prune_while_another_prune_runs_removes_nothing_and_says_so(
    db_url: str, conn: psycopg.Connection
) -> None:
    _old_events(conn, 1)
    with psycopg.connect(db_url) as other:
        other.execute("select * from ceaseless.prune(p_only => 'jobs')")  # holds its lock
        result = run_cli(db_url, "prune")
        other.rollback()

    assert result.returncode == 1
    assert "another prune is running" in result.stderr
    assert _count(conn, "events") == 1
