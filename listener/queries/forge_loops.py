"""The forge loops' calls: which repos to poll, what their issues become, labels and child issues.

The SQL decides everything (functions/70_tracked_repo.sql and the forge job
functions): which repos are due, which issue becomes which job, which labels a
job should carry, which child issues are still to be created and when a failed
attempt is retried. These calls only move rows and answers across.

Guarantees: each call is one round trip and one transaction (autocommit
connections); `due_repos` hands each repo to one caller only (SKIP LOCKED) and
moves its next poll on in the same statement, so a poll that never reports
back is retried one interval later, never twice at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.rows import args_row, class_row
from psycopg.types.json import Jsonb

from listener.queries import fetch


@dataclass(frozen=True)
class TrackedRepo:
    """What a poll needs of a tracked_repo row that due_repos handed out."""

    id: UUID
    forge: str
    api_url: str
    owner: str
    repo: str
    last_etag: str | None
    tokens_allowed: bool

    @property
    def name(self) -> str:
        return f"{self.owner}/{self.repo}"


_REPO_COLUMNS = "id, forge, api_url, owner, repo, last_etag, tokens_allowed"


class Decision(NamedTuple):
    """A row of ingest_issues / note_labellers: what one labelled issue became."""

    number: int
    kind: str
    label: str  # the repo's label that asks for this kind
    decision: str
    job_id: UUID | None


@dataclass(frozen=True)
class LabelChange:
    """A row of labels_due: the label a job's issue should carry now, and the one to drop."""

    job_id: UUID
    forge: str
    api_url: str
    owner: str
    repo: str
    number: int
    add_label: str
    remove_label: str | None
    job_updated_at: datetime
    tokens_allowed: bool


@dataclass(frozen=True)
class DueChild:
    """A row of child_issues_due with the forge coordinates of its repo."""

    id: UUID
    plan_job_id: UUID
    repo_id: UUID
    parent_number: int
    key: str
    position: int
    title: str
    body: str
    marker: str
    attempts: int
    forge: str
    api_url: str
    owner: str
    repo: str
    tokens_allowed: bool


async def due_repos(conn: psycopg.AsyncConnection, now: datetime, limit: int) -> list[TrackedRepo]:
    return await fetch.rows(
        conn,
        class_row(TrackedRepo),
        f"select {_REPO_COLUMNS} from ceaseless.due_repos(%s, %s)",
        (now, limit),
    )


async def tracked_repo(conn: psycopg.AsyncConnection, repo_id: UUID) -> TrackedRepo | None:
    """One tracked repo by id, due or not (`ceaseless repo poll`)."""
    return await fetch.row(
        conn,
        class_row(TrackedRepo),
        f"select {_REPO_COLUMNS} from ceaseless.tracked_repo where id = %s",
        (repo_id,),
    )


async def ingest_issues(
    conn: psycopg.AsyncConnection,
    repo_id: UUID,
    issues: list[dict[str, Any]] | None,
    now: datetime,
) -> list[Decision]:
    """Hand the listing to the database; None (a 304) means the cached listing stands."""
    listing = None if issues is None else Jsonb(issues)
    return await _decisions(conn, "ingest_issues", repo_id, listing, now)


async def note_labellers(
    conn: psycopg.AsyncConnection,
    repo_id: UUID,
    labellers: dict[str, dict[str, str]],
    now: datetime,
) -> list[Decision]:
    """Who added each work label, {"42": {"ceaseless:plan": "alice"}}; same answer as ingest."""
    return await _decisions(conn, "note_labellers", repo_id, Jsonb(labellers), now)


async def _decisions(
    conn: psycopg.AsyncConnection, function: str, repo_id: UUID, issues: Jsonb | None, now: datetime
) -> list[Decision]:
    """What each labelled issue became, as ingest_issues and note_labellers both answer."""
    return await fetch.rows(
        conn,
        args_row(Decision),
        sql.SQL("select number, kind, label, decision, job_id from {}(%s, %s, %s)").format(
            sql.Identifier("ceaseless", function)
        ),
        (repo_id, issues, now),
    )


async def finish_repo_poll(
    conn: psycopg.AsyncConnection,
    repo_id: UUID,
    now: datetime,
    etag: str | None,
    error: str | None,
    next_poll_at: datetime | None,
) -> datetime:
    """Record the poll's end; returns the repo's next poll."""
    return await fetch.value(
        conn,
        "select ceaseless.finish_repo_poll(%s, %s, %s, %s, %s)",
        (repo_id, now, etag, error, next_poll_at),
    )


async def token_source(conn: psycopg.AsyncConnection) -> dict[str, Any]:
    """The forge_token_source setting: names of variables and a file path, never a token."""
    source = await fetch.value(
        conn, "select value from ceaseless.settings where key = 'forge_token_source'"
    )
    return dict(source) if isinstance(source, dict) else {}


async def labels_due(conn: psycopg.AsyncConnection, now: datetime, limit: int) -> list[LabelChange]:
    return await fetch.rows(
        conn,
        class_row(LabelChange),
        "select job_id, forge, api_url, owner, repo, number, add_label, remove_label, "
        "job_updated_at, tokens_allowed from ceaseless.labels_due(%s, %s)",
        (limit, now),
    )


async def labels_synced(
    conn: psycopg.AsyncConnection,
    job_id: UUID,
    label: str,
    job_updated_at: datetime,
    now: datetime,
) -> None:
    await conn.execute(
        "select ceaseless.labels_synced(%s, %s, %s, %s)", (job_id, label, job_updated_at, now)
    )


async def labels_sync_failed(
    conn: psycopg.AsyncConnection, job_id: UUID, error: str, now: datetime
) -> datetime | None:
    """Record a failed sync; returns when it is tried again."""
    return await fetch.value(
        conn, "select ceaseless.labels_sync_failed(%s, %s, %s)", (job_id, error, now)
    )


async def child_issues_due(
    conn: psycopg.AsyncConnection, now: datetime, limit: int
) -> list[DueChild]:
    return await fetch.rows(
        conn,
        class_row(DueChild),
        "select c.id, c.plan_job_id, c.repo_id, c.parent_number, c.key, c.position, c.title, "
        "c.body, c.marker, c.attempts, r.forge, r.api_url, r.owner, r.repo, r.tokens_allowed "
        "from ceaseless.child_issues_due(%s, %s) c "
        "join ceaseless.tracked_repo r on r.id = c.repo_id "
        "order by c.plan_job_id, c.position",
        (limit, now),
    )


async def record_child_issue(
    conn: psycopg.AsyncConnection, child_id: UUID, number: int, html_url: str, now: datetime
) -> UUID:
    """The issue exists on the forge; returns the implement job the database enqueued."""
    return await fetch.value(
        conn,
        "select ceaseless.record_child_issue(%s, %s, %s, %s)",
        (child_id, number, html_url, now),
    )


async def child_issue_failed(
    conn: psycopg.AsyncConnection, child_id: UUID, error: str, now: datetime
) -> datetime | None:
    """Record a failed attempt; returns when the next one is due."""
    return await fetch.value(
        conn, "select ceaseless.child_issue_failed(%s, %s, %s)", (child_id, error, now)
    )
