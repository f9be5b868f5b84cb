"""`ceaseless job …`: enqueue, list, show, cancel and retry jobs.

Guarantees: `add` is one INSERT of the columns given; whether a job may be
cancelled, retried, replied to or given more budget is cancel_job's,
retry_job's, reply_job's and raise_job_budget's decision, and their error is
the caller's to show.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal

from listener.queries.commands import Connection, Listing, ids_by_prefix, insert, listing


def add(conn: Connection, values: Mapping[str, object]) -> str:
    """Enqueue a job; its id."""
    return str(insert(conn, "job", values, ["id"])[0])


# The states `job list` shows unless told otherwise: the live ones and blocked,
# which waits for a person.
WAITING_STATES = ("pending", "claimed", "running", "blocked")


def listed(
    conn: Connection,
    *,
    states: Sequence[str] | None,
    agent: str | None,
    owner: str | None,
    since: str | None,
    limit: int,
) -> Listing:
    """Jobs in `states` (any state: None), the latest first, at most `limit`.

    `since` is an interval back from now ('1h', '2 days') or a time
    ('2026-12-01 09:00'); PostgreSQL parses both, and its error names a bad one.
    """
    return listing(
        conn,
        """
        select id, kind, agent, state, attempts, claimed_by, user_id as owner, created_at,
               finished_at - coalesce(claimed_at, created_at) as took, last_error
          from ceaseless.job
         where (%(states)s::text[] is null or state = any (%(states)s::text[]))
           and (%(agent)s::text is null or agent = %(agent)s)
           and (%(owner)s::text is null or user_id = %(owner)s)
           and (%(since)s::text is null
                or created_at >= case when %(since)s ~ '^[0-9]{4}-'
                                      then %(since)s::timestamptz
                                      else now() - %(since)s::interval end)
         order by created_at desc, id
         limit %(limit)s
        """,
        {"states": states, "agent": agent, "owner": owner, "since": since, "limit": limit},
    )


def ids_with_prefix(conn: Connection, ref: str) -> list[str]:
    """The ids of the jobs (at most two) whose id starts with `ref`, as git finds a commit."""
    return ids_by_prefix(conn, "job", ref)


def job(conn: Connection, job_id: str) -> Listing:
    """One job: what it was asked, where it came from, and where it stands."""
    return listing(
        conn,
        """
        select j.id, j.kind, j.agent, j.state, j.user_id as owner, j.attempts,
               coalesce(j.max_attempts, a.max_attempts) as max_attempts, j.created_at,
               j.run_after, j.claimed_by, j.finished_at, j.dedup_key,
               case when j.forge is not null
                    then format('%%s:%%s/%%s#%%s', j.forge, j.owner, j.repo, j.number) end
                 as issue,
               j.routine_run_id, j.topology_run_id, j.parent_job_id,
               left(j.prompt, 2000) as prompt, j.last_error,
               j.max_cost_usd, j.max_tokens, left(j.reply, 2000) as reply, j.replied_by
          from ceaseless.job j
          join ceaseless.agents a on a.name = j.agent
         where j.id = %s
        """,
        (job_id,),
    )


def runs(conn: Connection, job_id: str) -> Listing:
    """Every attempt of a job: when, how long, how it ended, and what the agent said."""
    return listing(
        conn,
        """
        select attempt, worker, started_at, finished_at - started_at as took, outcome,
               exit_status, billing, cost_usd, tokens_in, tokens_out,
               left(reply, 200) as reply, coalesce(error, final_message) as message
          from ceaseless.agent_run
         where job_id = %s
         order by attempt, started_at
        """,
        (job_id,),
    )


def cancel(conn: Connection, job_id: str) -> None:
    conn.execute("select ceaseless.cancel_job(%s)", (job_id,))


def retry(conn: Connection, job_id: str) -> None:
    conn.execute("select ceaseless.retry_job(%s)", (job_id,))


def reply(conn: Connection, job_id: str, text: str) -> None:
    conn.execute("select ceaseless.reply_job(%s, %s)", (job_id, text))


def raise_budget(conn: Connection, job_id: str, usd: Decimal | None, tokens: int | None) -> None:
    conn.execute("select ceaseless.raise_job_budget(%s, %s, %s)", (job_id, usd, tokens))
