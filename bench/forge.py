"""The forge lane's intake: how long the database takes to decide a repo's listing.

A poll ends with one call, ingest_issues (functions/71_forge_issues.sql): the
listing replaces the repo's cached issues and every issue carrying a work label
is decided (admission, one live job per issue, once per kind, the discover
cooldown) and, when due, becomes a job. Measured here without the forge: the
HTTP side is the forge's time, not ours. Three calls on one repo of `issues`
open issues, half labelled plan (a third of those by a stranger):
- first: the listing as first seen, creating the jobs;
- not modified: the forge answered 304 (NULL), everything decided again from
  the cache, nothing created;
- changed: the same listing again with every title edited.
"""

from __future__ import annotations

import json
import time

import psycopg

from bench.ours import Measurement
from bench.server import Server


def _listing(issues: int, edited: bool = False) -> str:
    return json.dumps(
        [
            {
                "number": n,
                "title": f"issue {n}{' (edited)' if edited else ''}",
                "author": "mallory" if n % 3 == 0 else "alice",
                "labels": ["ceaseless:plan"] if n % 2 == 0 else ["bug"],
                "html_url": f"https://github.com/o/r/issues/{n}",
            }
            for n in range(1, issues + 1)
        ]
    )


def _ingest(conn: psycopg.Connection, repo: str, listing: str | None) -> tuple[float, int]:
    started = time.perf_counter()
    rows = conn.execute(
        "select decision from ceaseless.ingest_issues(%s, %s::jsonb)", (repo, listing)
    ).fetchall()
    elapsed = (time.perf_counter() - started) * 1000
    return elapsed, sum(1 for (decision,) in rows if decision == "created")


def intake(server: Server, issues: int) -> Measurement:
    with server.database(migrated=True) as url, psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "insert into ceaseless.agents (name, adapter) values ('claude_code', 'noop'), "
            "('opencode', 'noop')"
        )
        row = conn.execute(
            "insert into ceaseless.tracked_repo (forge, owner, repo, clone_url, default_branch, "
            "interval_seconds, allowed_authors) "
            "values ('github', 'o', 'r', '/srv/git/r.git', 'main', 300, '{alice}') returning id"
        ).fetchone()
        assert row is not None
        repo = str(row[0])
        first_ms, created = _ingest(conn, repo, _listing(issues))
        not_modified_ms, again = _ingest(conn, repo, None)
        changed_ms, more = _ingest(conn, repo, _listing(issues, edited=True))
        expected = len([n for n in range(1, issues + 1) if n % 2 == 0 and n % 3 != 0])
        (jobs,) = conn.execute("select count(*) from ceaseless.job").fetchone()  # type: ignore[misc]
        return Measurement(
            {
                "first_ms": first_ms,
                "not_modified_ms": not_modified_ms,
                "changed_ms": changed_ms,
                "jobs_created": float(created),
            },
            lost=max(expected - jobs, 0),
            duplicated=max(jobs - expected, 0) + again + more,
        )
