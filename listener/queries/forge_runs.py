"""What the runner reads before a forge job's agent starts: the job's tracked repo and the policy.

Guarantees: one round trip, read-only. Where the checkout comes from and where
the forge's API is are the tracked repo's columns, never the job's payload:
the repo is the one whose (forge, owner, repo) the job names *and* whose owner
the job's owner is, which is the row the intake made the job from (a job
naming a repo it did not come from gets none). Settings are read as stored (a
missing forge_keep_failed_workspaces row reads as false: removing a workspace
is the safe default, and the migration that adds the row says false too).
"""

from __future__ import annotations

from typing import Any, NamedTuple
from uuid import UUID

import psycopg
from psycopg.rows import args_row

from listener.queries import fetch


class ForgeRunContext(NamedTuple):
    """The job's issue reference, its tracked repo (None: none of its owner's), the settings."""

    forge: str | None
    owner: str | None
    repo: str | None
    number: int | None
    user_id: str
    repo_id: UUID | None
    api_url: str | None
    clone_url: str | None
    default_branch: str | None
    token_source: dict[str, Any] | None
    keep_failed_workspaces: bool
    tokens_allowed: bool


async def forge_run_context(conn: psycopg.AsyncConnection, job_id: UUID) -> ForgeRunContext | None:
    return await fetch.row(
        conn,
        args_row(ForgeRunContext),
        "select j.forge, j.owner, j.repo, j.number, j.user_id, "
        "       r.id, r.api_url, r.clone_url, r.default_branch, "
        "       (select value from ceaseless.settings where key = 'forge_token_source'), "
        "       coalesce((select value = 'true'::jsonb from ceaseless.settings "
        "                  where key = 'forge_keep_failed_workspaces'), false), "
        "       coalesce(r.tokens_allowed, false) "
        "  from ceaseless.job j "
        # The unique (forge, owner, repo) of tracked_repo, owned by the job's owner.
        "  left join ceaseless.tracked_repo r "
        "         on r.forge = j.forge and r.owner = j.owner and r.repo = j.repo "
        "        and r.user_id = j.user_id "
        " where j.id = %s",
        (job_id,),
    )
