"""The job queue's calls: claim, note sessions, finish, extend, expire, release.

Guarantees: each call is one round trip and one transaction; a finish reports
per run whether it was recorded, and why not (functions/20_agent_runs.sql).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, NamedTuple
from uuid import UUID

import psycopg
from psycopg.rows import args_row

from listener.agents.base import RunResult, storable
from listener.queries import fetch


class ClaimedJob(NamedTuple):
    """A claimed job as claim_jobs returns it (a tuple: thousands arrive per second)."""

    id: UUID
    kind: str
    agent: str
    prompt: str
    payload: dict[str, Any]
    max_turns: int | None
    resume_session_id: str | None
    attempts: int
    run_id: UUID | None
    # A person's reply (reply_job): the whole prompt of a run that resumes the
    # agent's session; None when there is none (claim_jobs puts a reply to a
    # job without a session after its prompt).
    reply: str | None = None
    # What is left of the job's spend ceilings (None: no ceiling).
    budget_usd: Decimal | None = None
    budget_tokens: int | None = None


@dataclass(frozen=True)
class FinishedRun:
    run_id: UUID
    job_id: UUID
    result: RunResult

    def as_json(self) -> dict[str, Any]:
        """The run's entry in finish_runs' p_results; a field nobody reported is left out
        (finish_runs reads a missing field as NULL), which halves a batch of no-op runs."""
        r = self.result
        pr = r.pull_request
        fields = {
            "run_id": str(self.run_id),
            "outcome": str(r.outcome),
            "exit_status": r.exit_status,
            "final_message": r.final_message,
            "error": r.error,
            "session_id": r.session_id,
            "billing": str(r.billing),
            "model": r.model,
            "tokens_in": r.tokens_in,
            "tokens_out": r.tokens_out,
            "cost_usd": r.cost_usd,
            "num_turns": r.num_turns,
            "rate_limit_reset_at": r.rate_limit_reset_at.isoformat()
            if r.rate_limit_reset_at
            else None,
            "pr_forge": pr.forge if pr else None,
            "pr_owner": pr.owner if pr else None,
            "pr_repo": pr.repo if pr else None,
            "pr_number": pr.number if pr else None,
            "pr_head_branch": pr.head_branch if pr else None,
            "pr_url": pr.url if pr else None,
        }
        # An agent's text may hold what PostgreSQL cannot store (NUL, lone
        # surrogates); refused, it would fail the finish of the whole batch.
        return {
            key: storable(value) if isinstance(value, str) else value
            for key, value in fields.items()
            if value is not None
        }


async def claim_and_start(
    conn: psycopg.AsyncConnection,
    worker: str,
    limit: int,
    *,
    kinds: list[str] | None,
    agents: list[str] | None,
    lease_secs: int,
) -> list[ClaimedJob]:
    return await fetch.rows(
        conn,
        args_row(ClaimedJob),
        "select id, kind, agent, prompt, payload, max_turns, resume_session_id, attempts, "
        "run_id, reply, budget_usd, budget_tokens "
        "from ceaseless.claim_jobs(%s, %s, %s, %s, now(), %s, true)",
        (worker, limit, kinds, agents, lease_secs),
    )


class Finished(NamedTuple):
    """finish_runs' answer for one run: recorded, or refused (kept in late_results) and why."""

    run_id: UUID
    job_id: UUID | None
    job_state: str | None
    recorded: bool
    refusal: str | None


async def finish_runs(
    conn: psycopg.AsyncConnection, worker: str, runs: list[FinishedRun]
) -> list[Finished]:
    payload = json.dumps([run.as_json() for run in runs])
    return await fetch.rows(
        conn,
        args_row(Finished),
        "select run_id, job_id, job_state, recorded, refusal "
        "from ceaseless.finish_runs(%s, %s::jsonb)",
        (worker, payload),
    )


async def note_sessions(
    conn: psycopg.AsyncConnection, worker: str, sessions: dict[UUID, str]
) -> int:
    """Store the session each run reported at its start (see note_sessions in SQL)."""
    noted = await fetch.value(
        conn,
        "select ceaseless.note_sessions(%s, %s, %s)",
        (worker, list(sessions), list(sessions.values())),
    )
    return int(noted or 0)


class LeaseRenewal(NamedTuple):
    job_id: UUID
    held: bool
    renewed: bool


async def extend_leases(
    conn: psycopg.AsyncConnection, worker: str, job_ids: list[UUID], lease_secs: int
) -> list[LeaseRenewal]:
    return await fetch.rows(
        conn,
        args_row(LeaseRenewal),
        "select job_id, held, renewed from ceaseless.extend_leases(%s, %s, now(), %s)",
        (worker, job_ids, lease_secs),
    )


async def expire_leases(conn: psycopg.AsyncConnection) -> int:
    return int(await fetch.value(conn, "select ceaseless.expire_leases()") or 0)


async def release_jobs(conn: psycopg.AsyncConnection, worker: str, job_ids: list[UUID]) -> int:
    released = await fetch.value(conn, "select ceaseless.release_jobs(%s, %s)", (worker, job_ids))
    return int(released or 0)


async def held_jobs(conn: psycopg.AsyncConnection, worker: str) -> list[UUID]:
    """Jobs the database says this worker holds (to find claims it lost track of)."""
    cur = await conn.execute(
        "select id from ceaseless.job where claimed_by = %s and state in ('claimed', 'running')",
        (worker,),
    )
    return [row[0] for row in await cur.fetchall()]


async def ended_jobs(conn: psycopg.AsyncConnection, job_ids: list[UUID]) -> list[UUID]:
    """Of these jobs, those that will not run again (their working directories may go)."""
    cur = await conn.execute("select ceaseless.ended_jobs(%s)", (job_ids,))
    return [row[0] for row in await cur.fetchall()]
