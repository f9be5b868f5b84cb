"""Child issues: the issues a plan job asked for, created on the forge by the runner's identity.

`child_issues_due` lists the validated children of finished plan runs that
have no issue yet (functions: forge_child_issue); each is created with its
marker at the end of its body, and `record_child_issue` stores the number and
enqueues the implement job (parent_job_id set, routed by the database). A
failure goes to `child_issue_failed`, which says when to try again.

Guarantees:
- idempotent across crashes: from the second attempt on, the forge is first
  searched for an issue whose body holds the child's marker
  (`find_issue_with_marker`), so an issue created by an attempt whose answer
  was lost is recorded, never created twice;
- every forge call has a deadline; one child failing never stops the others;
- no token in a log line or a recorded error.
"""

from __future__ import annotations

from typing import Any

from listener import log
from listener.database.pool import Database
from listener.forge.client import ForgeClient, Issue, NoToken, each_per_repo
from listener.forge.poller import utcnow
from listener.forge.tokens import TokenSourceError, not_allowed_hint, tokens_for
from listener.queries import forge_loops as queries
from listener.queries.forge_loops import DueChild

DEFAULT_CHILD_TIMEOUT = 60.0


def issue_body(child: DueChild) -> str:
    """The body the child issue is created with: the plan's text, then the marker."""
    return child.body + "\n\n" + child.marker


async def create_children(
    database: Database,
    token_source: dict[str, Any],
    limit: int,
    *,
    timeout: float = DEFAULT_CHILD_TIMEOUT,
) -> int:
    """Create up to `limit` due child issues; returns how many were recorded."""
    due = await database.once(
        "child_issues_due", lambda c: queries.child_issues_due(c, utcnow(), limit)
    )

    async def recorded(child: DueChild, made: tuple[Issue, bool]) -> None:
        issue, found = made
        job_id = await database.once(
            "record_child_issue",
            lambda c: queries.record_child_issue(
                c, child.id, issue.number, issue.html_url, utcnow()
            ),
        )
        log.event(
            "forge.child_issue",
            repo=f"{child.owner}/{child.repo}",
            parent=child.parent_number,
            key=child.key,
            number=issue.number,
            found_existing=found,
            job=str(job_id),
        )

    # A plan's children are created in the order the plan listed them.
    ordered = sorted(due, key=lambda child: (str(child.plan_job_id), child.position))
    return await each_per_repo(
        ordered,
        lambda child: _runner_token(token_source, child),
        _ensure_issue,
        doing="creating the issue",
        timeout=timeout,
        done=recorded,
        failed=lambda child, error: _failed(database, child, error),
    )


def _runner_token(token_source: dict[str, Any], first: DueChild) -> str | None:
    # Creating an issue takes the runner's identity, and a repo not allowed it
    # gets none: its children wait, retried, until an operator allows it.
    try:
        tokens = tokens_for(token_source, first.forge, first.api_url, allowed=first.tokens_allowed)
    except TokenSourceError as exc:
        raise NoToken(f"the runner token could not be read: {exc}") from None
    if not first.tokens_allowed:
        raise NoToken(not_allowed_hint(first.forge, first.owner, first.repo))
    return tokens.runner


async def _ensure_issue(client: ForgeClient, child: DueChild) -> tuple[Issue, bool]:
    """The child's issue, and whether it already existed (an earlier attempt made it)."""
    if child.attempts > 1:
        existing = await client.find_issue_with_marker(child.marker)
        if existing is not None:
            return existing, True
    return await client.create_issue(child.title, issue_body(child)), False


async def _failed(database: Database, child: DueChild, error: str) -> None:
    retry_at = await database.once(
        "child_issue_failed", lambda c: queries.child_issue_failed(c, child.id, error, utcnow())
    )
    log.warning(
        "forge.child_issue_failed",
        repo=f"{child.owner}/{child.repo}",
        parent=child.parent_number,
        key=child.key,
        error=error,
        retry_at=retry_at,
    )
