"""What the forge loop tests share: tracked repos on the fake forge, and one round of a loop.

Rounds run in the test process, on a real pool (listener.database.pool.Database)
against the test's own database, exactly as the listener's loops call them.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

import psycopg
import pytest

from listener.database.pool import Database
from listener.forge.children import create_children
from listener.forge.labels import sync_labels
from listener.forge.poller import PollReport, poll_repo, utcnow
from listener.queries import forge_loops
from tests.fakes.forge import FakeForge

T = TypeVar("T")

RUNNER_TOKEN = "runner-secret-1f3a"
LABEL_TOKEN = "label-secret-9c2e"


def bind_tokens(conn: psycopg.Connection, *origins: str) -> None:
    """Bind the whole-forge tokens (both forges) to these origins: forge_token_source.hosts.

    The fake forge is not GitHub's canonical host, so its tokens go to it only
    when the setting names it, as an operator names a GitHub Enterprise or
    Gitea host.
    """
    conn.execute(
        "update ceaseless.settings set value = jsonb_set(value, '{hosts}', %s::jsonb) "
        "where key = 'forge_token_source'",
        (json.dumps({"github": list(origins), "gitea": list(origins)}),),
    )


def set_tokens(
    monkeypatch: pytest.MonkeyPatch, conn: psycopg.Connection, fake_forge: FakeForge
) -> None:
    """The runner's and the label identity's tokens, where the default token source looks,
    bound to the fake forge's origin."""
    for forge in ("GITHUB", "GITEA"):
        monkeypatch.setenv(f"CEASELESS_{forge}_TOKEN", RUNNER_TOKEN)
        monkeypatch.setenv(f"CEASELESS_{forge}_LABEL_TOKEN", LABEL_TOKEN)
    bind_tokens(conn, fake_forge.url)


def add_repo(
    conn: psycopg.Connection,
    fake_forge: FakeForge,
    name: str = "widgets",
    *,
    owner: str = "acme",
    forge: str = "github",
    authors: tuple[str, ...] = ("alice",),
    interval: int = 60,
    **columns: Any,
) -> uuid.UUID:
    """A tracked repo on the fake forge (and the repo itself there), due now, and its lanes."""
    add_lanes(conn)
    if (owner.lower(), name.lower()) not in fake_forge.repos:
        fake_forge.add_repo(owner, name)
    # The fake answers these two tokens as its runner and label identities.
    fake_forge.tokens[RUNNER_TOKEN] = "ceaseless-bot"
    fake_forge.tokens[LABEL_TOKEN] = "ceaseless-labels"
    values: dict[str, Any] = {
        "forge": forge,
        "owner": owner,
        "repo": name,
        "api_url": fake_forge.gitea_url if forge == "gitea" else fake_forge.url,
        "clone_url": f"/srv/git/{owner}/{name}.git",
        "default_branch": "main",
        "interval_seconds": interval,
        "allowed_authors": list(authors),
        **columns,
    }
    names = ", ".join(values)
    marks = ", ".join(["%s"] * len(values))
    row = conn.execute(
        f"insert into ceaseless.tracked_repo ({names}) values ({marks}) returning id",  # type: ignore[arg-type]
        list(values.values()),
    ).fetchone()
    assert row is not None
    return row[0]


def add_lanes(conn: psycopg.Connection) -> None:
    """The agents rows forge jobs are routed to (noop agents: nothing runs them here)."""
    conn.execute(
        "insert into ceaseless.agents (name, adapter, argv) "
        "values ('claude_code', 'noop', '{}'), ('opencode', 'noop', '{}') "
        "on conflict (name) do nothing"
    )


def make_due(conn: psycopg.Connection, *repo_ids: uuid.UUID) -> None:
    conn.execute(
        "update ceaseless.tracked_repo set next_poll_at = now() - interval '1 second' "
        "where id = any(%s)",
        (list(repo_ids),),
    )


def with_database(db_url: str, call: Callable[[Database], Awaitable[T]]) -> T:
    """Run `call` on a listener-style pool of the test's database."""

    async def go() -> T:
        database = Database(db_url, "ceaseless test", deadline=15.0)
        await database.open()
        try:
            return await call(database)
        finally:
            await database.close()

    return asyncio.run(go())


def poll_due(db_url: str, *, timeout: float = 10.0, limit: int = 50) -> dict[str, PollReport]:
    """One poll round as the listener runs it: due_repos, then every due repo at once."""

    async def go(database: Database) -> dict[str, PollReport]:
        repos = await database.once("due", lambda c: forge_loops.due_repos(c, utcnow(), limit))
        source = await database.once("source", forge_loops.token_source)
        reports = await asyncio.gather(
            *(poll_repo(database, repo, source, timeout=timeout) for repo in repos)
        )
        return {report.repo.name: report for report in reports}

    return with_database(db_url, go)


def labels_round(db_url: str, *, limit: int = 50) -> int:
    async def go(database: Database) -> int:
        source = await database.once("source", forge_loops.token_source)
        return await sync_labels(database, source, limit, timeout=5.0)

    return with_database(db_url, go)


def children_round(db_url: str, *, limit: int = 50) -> int:
    async def go(database: Database) -> int:
        source = await database.once("source", forge_loops.token_source)
        return await create_children(database, source, limit, timeout=5.0)

    return with_database(db_url, go)


def jobs_of(conn: psycopg.Connection, repo: str) -> list[tuple[Any, ...]]:
    """(number, kind, state) of the repo's jobs, by issue number."""
    return conn.execute(
        "select number, kind, state from ceaseless.job where repo = %s order by number, kind",
        (repo,),
    ).fetchall()


def repo_row(conn: psycopg.Connection, repo_id: uuid.UUID) -> dict[str, Any]:
    cur = conn.execute(
        "select last_polled_at, last_etag, last_error, last_error_at, next_poll_at "
        "from ceaseless.tracked_repo where id = %s",
        (repo_id,),
    )
    row = cur.fetchone()
    assert row is not None and cur.description is not None
    return dict(zip([d.name for d in cur.description], row, strict=True))


def in_about(seconds: float) -> tuple[Any, Any]:
    now = utcnow()
    return now + timedelta(seconds=seconds - 5), now + timedelta(seconds=seconds + 5)
