"""The poller: one tracked repo's open issues, read from its forge and handed to the database.

A poll is: list the open issues (conditionally, `If-None-Match: last_etag`;
every page), give the listing to `ingest_issues`, which decides what each
labelled issue becomes; for the issues whose author is not allowed, ask the
forge who added the work label and give that to `note_labellers`; then
`finish_repo_poll`. Which repos are due, and when they are due again, is
`due_repos`' and `finish_repo_poll`'s decision (listener/forge/loop.py asks).

Guarantees:
- every poll has a deadline (`timeout`, for all its forge requests and
  database calls together), and ends in exactly one `finish_repo_poll`
  unless the database itself is unreachable (then `due_repos` has already
  moved the repo's next poll one interval on, so it is retried then);
- a rate limit defers the repo to the forge's reset time; any other forge
  failure (an error status, a timeout, a body that is not JSON) is recorded
  as the repo's last_error and retried one interval later;
- a poll never raises a forge error to its caller, so one failing repo
  never stops the others;
- no token reaches a log line or last_error: the client's errors name the
  method, path and status only.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg

from listener import log
from listener.database.pool import Database
from listener.forge.client import ForgeClient, ForgeError, ForgeRepo, RateLimited
from listener.forge.tokens import TokenSourceError, not_allowed_hint, tokens_for
from listener.queries import forge_loops as queries
from listener.queries.forge_loops import Decision, TrackedRepo

# What a poll may take in all, forge requests and database calls together.
DEFAULT_POLL_TIMEOUT = 60.0
NEEDS_LABELLER = "needs_labeller"


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class PollReport:
    """How one poll ended: the decisions made, or the error recorded on the repo."""

    repo: TrackedRepo
    decisions: list[Decision] = field(default_factory=list)
    not_modified: bool = False
    error: str | None = None
    retry_at: datetime | None = None
    next_poll_at: datetime | None = None


async def poll_repo(
    database: Database,
    repo: TrackedRepo,
    token_source: dict[str, Any],
    *,
    timeout: float = DEFAULT_POLL_TIMEOUT,
) -> PollReport:
    """Poll `repo` once and record the outcome on its row (see the module's guarantees).

    `token_source` is the forge_token_source setting. Raises only psycopg.OperationalError, when
    the database cannot record the outcome.
    """
    report = PollReport(repo)
    etag = repo.last_etag
    try:
        async with asyncio.timeout(timeout):
            tokens = tokens_for(token_source, repo.forge, repo.api_url, allowed=repo.tokens_allowed)
            forge = ForgeRepo(repo.forge, repo.api_url, repo.owner, repo.repo)
            async with ForgeClient(forge, tokens.runner, timeout=timeout) as client:
                listing = await client.list_open_issues(repo.last_etag)
                report.not_modified = listing.issues is None
                etag = listing.etag or repo.last_etag
                report.decisions = await database.once(
                    "ingest_issues",
                    lambda c: queries.ingest_issues(c, repo.id, listing.issues, utcnow()),
                )
                report.decisions = await _ask_labellers(database, client, repo, report.decisions)
    except RateLimited as exc:
        report.error = f"rate limited: {exc}"
        report.retry_at = exc.retry_at
    except ForgeError as exc:
        # A private repo answers an anonymous poll 404: say why it was anonymous.
        report.error = (
            str(exc)
            if repo.tokens_allowed
            else (f"{exc}; {not_allowed_hint(repo.forge, repo.owner, repo.repo)}")
        )
    except TimeoutError:
        report.error = f"the poll took longer than {timeout:g} s and was given up"
    except psycopg.OperationalError:
        raise
    except psycopg.Error as exc:
        # The database refused what the forge sent (a listing it will not
        # take): the repo records why, and the others go on.
        report.error = f"the database refused the listing: {exc.diag.message_primary or exc}"
    except TokenSourceError as exc:
        # The secrets file is missing, open to others or not JSON; the
        # message names the path and the fix, never a token.
        report.error = str(exc)
    now = utcnow()
    report.next_poll_at = await database.once(
        "finish_repo_poll",
        lambda c: queries.finish_repo_poll(
            c,
            repo.id,
            now,
            etag if report.error is None else None,
            report.error,
            report.retry_at,
        ),
    )
    _log(report)
    return report


async def _ask_labellers(
    database: Database, client: ForgeClient, repo: TrackedRepo, decisions: list[Decision]
) -> list[Decision]:
    """For issues the database could not admit by author: who added their work labels."""
    asked: dict[int, list[str]] = {}
    for row in decisions:
        if row.decision == NEEDS_LABELLER:
            asked.setdefault(row.number, []).append(row.label)
    if not asked:
        return decisions
    labellers: dict[str, dict[str, str]] = {}
    for number, labels in asked.items():
        labellers[str(number)] = await client.labellers(number, labels)
    answered = await database.once(
        "note_labellers", lambda c: queries.note_labellers(c, repo.id, labellers, utcnow())
    )
    by_issue = {(row.number, row.kind): row for row in answered}
    return [by_issue.get((row.number, row.kind), row) for row in decisions]


def _log(report: PollReport) -> None:
    repo = report.repo
    if report.error is not None:
        log.warning(
            "forge.poll_failed",
            repo=repo.name,
            repo_id=str(repo.id),
            error=report.error,
            next_poll_at=report.next_poll_at,
        )
        return
    for row in report.decisions:
        log.event(
            "forge.issue",
            repo=repo.name,
            number=row.number,
            kind=row.kind,
            decision=row.decision,
            job=str(row.job_id) if row.job_id else None,
        )
    log.event(
        "forge.polled",
        repo=repo.name,
        repo_id=str(repo.id),
        not_modified=report.not_modified,
        issues=len(report.decisions),
        created=sum(1 for row in report.decisions if row.decision == "created"),
        next_poll_at=report.next_poll_at,
    )
