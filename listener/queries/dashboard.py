"""The dashboard's reads (listener/web/dashboard/pages.py), each a single statement.

Its one write, deciding an approval, is listener/queries/approvals.py, which the
command line's approve and reject run too.

Guarantees: pages read the operator views (job_queue's table, governor_usage,
routine_status, loop_status, topology_node_status) and the tables behind them
by key or with a LIMIT, so a page costs a bounded read however large the
queue grows.
"""

from __future__ import annotations

from typing import Any, LiteralString
from uuid import UUID

import psycopg
from psycopg.rows import dict_row

from listener.queries import fetch

Row = dict[str, Any]

# Rows a list page shows: the newest first, the rest a filter away.
PAGE_ROWS = 200


async def _rows(
    conn: psycopg.AsyncConnection, query: LiteralString, params: tuple[Any, ...] = ()
) -> list[Row]:
    return await fetch.rows(conn, dict_row, query, params)


async def _row(
    conn: psycopg.AsyncConnection, query: LiteralString, params: tuple[Any, ...]
) -> Row | None:
    return await fetch.row(conn, dict_row, query, params)


# The queue page: job_created_idx (db/0024) walked backwards, stopping at the
# LIMIT; the filters step over what they skip.
JOBS_SQL = (
    "select j.id, j.kind, j.agent, j.state, j.attempts, j.run_after, j.created_at, "
    "       j.updated_at, left(j.prompt, 200) as prompt, left(j.last_error, 300) as last_error "
    "from ceaseless.job j "
    "where (%(state)s::text is null or j.state = %(state)s) "
    "  and (%(lane)s::text is null or j.agent = %(lane)s) "
    "  and (%(kind)s::text is null or j.kind = %(kind)s) "
    "order by j.created_at desc limit %(limit)s"
)


async def jobs(
    conn: psycopg.AsyncConnection, state: str | None, lane: str | None, kind: str | None
) -> list[Row]:
    """The newest jobs matching every filter given (NULL: any)."""
    return await fetch.rows(
        conn, dict_row, JOBS_SQL, {"state": state, "lane": lane, "kind": kind, "limit": PAGE_ROWS}
    )


async def live_counts(conn: psycopg.AsyncConnection) -> list[Row]:
    """Live jobs per lane and state, from job_queue (which reads only live jobs)."""
    return await _rows(
        conn,
        "select agent, state, count(*) as n from ceaseless.job_queue "
        "group by agent, state order by agent, state",
    )


async def lane_names(conn: psycopg.AsyncConnection) -> list[str]:
    rows = await _rows(conn, "select name from ceaseless.agents order by name")
    return [r["name"] for r in rows]


async def lanes(conn: psycopg.AsyncConnection) -> list[Row]:
    return await _rows(conn, "select * from ceaseless.governor_usage order by agent")


async def routines(conn: psycopg.AsyncConnection) -> list[Row]:
    """routine_status, each row with its skips of the last 24 hours by reason."""
    return await _rows(
        conn,
        "select s.*, coalesce(k.by_reason, '{}'::jsonb) as skips_by_reason "
        "from ceaseless.routine_status s "
        "left join lateral ( "
        # idx_routine_runs_routine (routine_id, started_at desc): the last day only.
        "    select jsonb_object_agg(reason, n order by reason) as by_reason "
        "    from (select rr.skip_reason as reason, count(*) as n "
        "          from ceaseless.routine_runs rr "
        "          where rr.routine_id = s.id and rr.status = 'skipped' "
        "            and rr.started_at > now() - interval '24 hours' "
        "          group by rr.skip_reason) g "
        ") k on true "
        "order by s.name",
    )


async def loops(conn: psycopg.AsyncConnection) -> list[Row]:
    return await _rows(conn, "select * from ceaseless.loop_status order by title, id")


async def loop(conn: psycopg.AsyncConnection, loop_id: UUID) -> Row | None:
    return await _row(conn, "select * from ceaseless.loop_status where id = %s", (loop_id,))


async def iterations(conn: psycopg.AsyncConnection, loop_id: UUID) -> list[Row]:
    """A loop's runs, newest first: its iteration chain and the fires it skipped."""
    return await _rows(
        conn,
        "select r.id, r.iteration, r.parent_run_id, r.status, r.trigger_type, r.skip_reason, "
        "       r.created_at, r.started_at, r.finished_at, left(r.error, 300) as error "
        "from ceaseless.topology_runs r where r.loop_id = %s "
        "order by r.created_at desc limit %s",
        (loop_id, PAGE_ROWS),
    )


async def runs(conn: psycopg.AsyncConnection) -> list[Row]:
    """The newest topology runs (loop iterations and single runs)."""
    return await _rows(
        conn,
        "select r.id, r.loop_id, r.iteration, r.status, left(r.task, 120) as task, "
        "       r.created_at, r.finished_at "
        "from ceaseless.topology_runs r where r.status <> 'skipped' "
        "order by r.created_at desc limit %s",
        (PAGE_ROWS,),
    )


async def run(conn: psycopg.AsyncConnection, run_id: UUID) -> Row | None:
    return await _row(
        conn,
        "select r.id, r.graph, r.status, left(r.task, 2000) as task, r.loop_id, r.iteration, "
        "       r.parent_run_id, r.created_at, r.started_at, r.finished_at, "
        "       left(r.error, 1000) as error "
        "from ceaseless.topology_runs r where r.id = %s",
        (run_id,),
    )


async def run_nodes(conn: psycopg.AsyncConnection, run_id: UUID) -> list[Row]:
    return await _rows(
        conn,
        "select * from ceaseless.topology_node_status where run_id = %s order by node",
        (run_id,),
    )


async def pending_approvals(conn: psycopg.AsyncConnection) -> list[Row]:
    """Undecided approvals whose node still waits for them, oldest first."""
    return await _rows(
        conn,
        "select s.approval_id, s.run_id, s.loop_id, s.iteration, s.node, s.agent, "
        "       s.approval_expires_at, a.requested_at, left(n.prompt, 500) as prompt "
        "from ceaseless.topology_node_status s "
        "join ceaseless.approvals a on a.id = s.approval_id "
        "join ceaseless.topology_nodes n "
        "  on n.topology_run_id = s.run_id and n.node_id = s.node "
        "where s.approval_decision = 'pending' and s.state = 'awaiting_approval' "
        "order by a.requested_at, s.node limit %s",
        (PAGE_ROWS,),
    )


async def job(conn: psycopg.AsyncConnection, job_id: UUID) -> Row | None:
    return await _row(
        conn,
        "select j.id, j.kind, j.agent, j.state, j.attempts, j.max_attempts, j.run_after, "
        "       j.created_at, j.updated_at, j.claimed_by, j.topology_run_id, j.routine_run_id, "
        "       left(j.prompt, 4000) as prompt, left(j.last_error, 2000) as last_error "
        "from ceaseless.job j where j.id = %s",
        (job_id,),
    )


async def job_runs(conn: psycopg.AsyncConnection, job_id: UUID) -> list[Row]:
    """A job's runs, first attempt first, each with its final message (bounded)."""
    return await _rows(
        conn,
        "select r.id, r.attempt, r.agent, r.adapter, r.model, r.worker, r.outcome, "
        "       r.exit_status, r.started_at, r.finished_at, r.tokens_in, r.tokens_out, "
        "       r.cost_usd, r.num_turns, r.session_id, "
        "       left(r.final_message, 20000) as final_message, left(r.error, 2000) as error "
        "from ceaseless.agent_run r where r.job_id = %s order by r.started_at",
        (job_id,),
    )
