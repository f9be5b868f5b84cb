"""What the runner reads before a forge job's agent starts: the issue's reference and the policy.

Guarantees: one round trip, read-only; settings are read as stored (a missing
forge_keep_failed_workspaces row reads as false: removing a workspace is the
safe default, and the migration that adds the row says false too).
"""

from __future__ import annotations

from typing import Any, NamedTuple
from uuid import UUID

import psycopg
from psycopg.rows import args_row


class ForgeRunContext(NamedTuple):
    """The job's issue (job.forge/owner/repo/number) and the forge settings it runs under."""

    forge: str
    owner: str
    repo: str
    number: int
    token_source: dict[str, Any] | None
    keep_failed_workspaces: bool


async def forge_run_context(conn: psycopg.AsyncConnection, job_id: UUID) -> ForgeRunContext | None:
    async with conn.cursor(row_factory=args_row(ForgeRunContext)) as cur:
        await cur.execute(
            "select j.forge, j.owner, j.repo, j.number, "
            "       (select value from ceaseless.settings where key = 'forge_token_source'), "
            "       coalesce((select value = 'true'::jsonb from ceaseless.settings "
            "                  where key = 'forge_keep_failed_workspaces'), false) "
            "  from ceaseless.job j where j.id = %s",
            (job_id,),
        )
        return await cur.fetchone()
