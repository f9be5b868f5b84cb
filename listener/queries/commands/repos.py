"""`ceaseless repo …`: track a forge repository, list and show tracked repos, allow their tokens.

Guarantees: `add` is one INSERT, which the database validates in full (every rule
names the field, the rule and the value) and completes with the column defaults.
Nothing here reads a token: the table holds none.
"""

from __future__ import annotations

from collections.abc import Mapping

from listener.queries.commands import Connection, Listing, insert, listing


def add(conn: Connection, values: Mapping[str, object]) -> tuple[str, bool]:
    """Track a repository: its id, and whether the listener's forge tokens serve it."""
    repo_id, tokens_allowed = insert(conn, "tracked_repo", values, ["id", "tokens_allowed"])
    return str(repo_id), bool(tokens_allowed)


def repos(conn: Connection) -> Listing:
    """One line per tracked repo, from repo_status."""
    return listing(
        conn,
        """
        select id, forge, owner || '/' || repo as repo, enabled, quiet_now,
               interval_used_secs as interval, last_polled_at as last_poll,
               next_poll_at as next_poll, live_jobs, left(last_error, 60) as last_error
          from ceaseless.repo_status
         order by owner, repo, forge
        """,
    )


def repo(conn: Connection, repo_id: str) -> Listing:
    """A tracked repo: where it is, what it listens for, its schedule and its last error."""
    return listing(
        conn,
        """
        select s.id, s.forge, s.owner, s.repo, s.api_url, s.owner_role, t.clone_url,
               t.default_branch, s.tokens_allowed, s.enabled, s.discover_label, s.plan_label,
               s.implement_label, s.allowed_authors, s.tracking_issue, s.quiet_window,
               s.quiet_now, s.interval_asked_secs, s.interval_used_secs, s.last_polled_at,
               s.next_poll_at, s.last_error, s.last_error_at, s.live_jobs
          from ceaseless.repo_status s
          join ceaseless.tracked_repo t on t.id = s.id
         where s.id = %s
        """,
        (repo_id,),
    )


def allow_tokens(conn: Connection, repo_id: str, allow: bool) -> bool:
    """Allow or deny the listener's forge tokens for a repo; False when no such repo was seen."""
    row = conn.execute(
        "update ceaseless.tracked_repo set tokens_allowed = %s where id = %s returning id",
        (allow, repo_id),
    ).fetchone()
    return row is not None
