"""The dashboard's statements (listener/web/dashboard/pages.py): its reads, each a single
statement, and its actions, each one call of the SQL API in a transaction of its own.

Deciding an approval is listener/queries/approvals.py, which the command line's
approve and reject run too.

Guarantees:
- pages read the operator views (job_queue's table, governor_usage,
  routine_status, loop_status, topology_node_status) and the tables behind them
  by key or with a LIMIT, so a page costs a bounded read however large the
  queue grows;
- an action is one statement of the SQL API (cancel_job, retry_job,
  run_routine, run_loop, pause_lane, resume_lane, an UPDATE of `enabled`)
  that holds every rule of it and raises the refusal (CE404, CE409, …); it
  runs in a transaction whose `ceaseless.actor` names the listener and the
  dashboard user (`act`), so every audit row it writes names both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
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
    """routine_status, each row with its skips of the last 24 hours by reason and the error of
    its latest failed run (ROUTINE_STATUS_SQL)."""
    return await _rows(conn, ROUTINE_STATUS_SQL + "order by s.name")


# routine_status with what its runs say: the skips of the last day by reason,
# the summary of the latest failed run (what a failure's job said) and of the
# latest attention run. routine_status.last_error is the routine's own
# (a schedule the listener could not compute); a failed run's reason is in
# its result_summary. Each lateral walks idx_routine_runs_routine
# (routine_id, started_at desc) from the newest run.
ROUTINE_STATUS_SQL: LiteralString = (
    "select s.*, coalesce(k.by_reason, '{}'::jsonb) as skips_by_reason, "
    "       f.started_at as last_failed_at, f.summary as last_failure, "
    "       coalesce(s.last_error, f.summary) as last_run_error, "
    "       a.started_at as last_attention_at, a.summary as last_attention "
    "from ceaseless.routine_status s "
    "left join lateral ( "
    "    select jsonb_object_agg(reason, n order by reason) as by_reason "
    "    from (select rr.skip_reason as reason, count(*) as n "
    "          from ceaseless.routine_runs rr "
    "          where rr.routine_id = s.id and rr.status = 'skipped' "
    "            and rr.started_at > now() - interval '24 hours' "
    "          group by rr.skip_reason) g "
    ") k on true "
    "left join lateral ( "
    "    select rr.started_at, left(rr.result_summary, 2000) as summary "
    "    from ceaseless.routine_runs rr "
    "    where rr.routine_id = s.id and rr.status = 'failed' "
    "    order by rr.started_at desc limit 1 "
    ") f on true "
    "left join lateral ( "
    "    select rr.started_at, left(rr.result_summary, 4000) as summary "
    "    from ceaseless.routine_runs rr "
    "    where rr.routine_id = s.id and rr.status = 'attention' "
    "    order by rr.started_at desc limit 1 "
    ") a on true "
)


async def routine(conn: psycopg.AsyncConnection, routine_id: UUID) -> Row | None:
    """One routine as the routines page shows it, with its trigger and action, and its held
    fires (`held`)."""
    row = await _row(conn, ROUTINE_STATUS_SQL + "where s.id = %s", (routine_id,))
    return await _with_held(conn, row, routine_id)


async def _with_held(conn: psycopg.AsyncConnection, row: Row | None, target_id: UUID) -> Row | None:
    if row is not None:
        row["held"] = await held_fires(conn, target_id)
    return row


# A held fire as the routine and loop pages list it.
_HELD_FIRES_SQL: LiteralString = (
    "select h.id, h.reason, h.blocked_by, h.trigger_type, h.trigger_detail, h.collapsed, "
    "       h.first_at, h.last_at, h.fire_at "
    "from ceaseless.held_fires h "
)


async def held_fires(conn: psycopg.AsyncConnection, target_id: UUID) -> list[Row]:
    """A routine's or loop's held fires (buffered, debounced), in the order they start."""
    # held_fires_routine_idx / held_fires_loop_idx: the target's rows only.
    return await _rows(
        conn,
        _HELD_FIRES_SQL
        + "where h.routine_id = %s union all "
        + _HELD_FIRES_SQL
        + "where h.loop_id = %s order by first_at limit %s",
        (target_id, target_id, PAGE_ROWS),
    )


async def routine_runs(conn: psycopg.AsyncConnection, routine_id: UUID) -> list[Row]:
    """A routine's runs, newest first, each with its job and the reply of its latest attempt."""
    return await _rows(
        conn,
        "select rr.id, rr.trigger_type, left(rr.trigger_detail, 200) as trigger_detail, "
        "       rr.status, rr.skip_reason, rr.started_at, rr.completed_at, "
        "       rr.completed_at - rr.started_at as duration, rr.missed_slots, rr.tokens_used, "
        "       left(rr.result_summary, 2000) as result_summary, rr.job_id, j.state as job_state, "
        "       left(reply.final_message, 2000) as reply "
        "from ceaseless.routine_runs rr "
        "left join ceaseless.job j on j.id = rr.job_id "
        # agent_run (job_id, started_at desc): the latest attempt's reply only.
        "left join lateral ( "
        "    select r.final_message from ceaseless.agent_run r "
        "    where r.job_id = rr.job_id order by r.started_at desc limit 1 "
        ") reply on true "
        "where rr.routine_id = %s "
        "order by rr.started_at desc limit %s",
        (routine_id, PAGE_ROWS),
    )


async def loops(conn: psycopg.AsyncConnection) -> list[Row]:
    return await _rows(conn, "select * from ceaseless.loop_status order by title, id")


async def loop(conn: psycopg.AsyncConnection, loop_id: UUID) -> Row | None:
    """One loop as loop_status shows it, and its held fires (`held`)."""
    row = await _row(conn, "select * from ceaseless.loop_status where id = %s", (loop_id,))
    return await _with_held(conn, row, loop_id)


async def iterations(conn: psycopg.AsyncConnection, loop_id: UUID) -> list[Row]:
    """A loop's runs, newest first: its iteration chain and the fires it skipped."""
    return await _rows(
        conn,
        "select r.id, r.iteration, r.parent_run_id, r.status, r.trigger_type, r.skip_reason, "
        "       r.created_at, r.started_at, r.finished_at, "
        "       r.finished_at - r.started_at as duration, left(r.error, 300) as error "
        "from ceaseless.topology_runs r where r.loop_id = %s "
        "order by r.created_at desc limit %s",
        (loop_id, PAGE_ROWS),
    )


async def runs(conn: psycopg.AsyncConnection) -> list[Row]:
    """The newest topology runs (loop iterations and single runs)."""
    return await _rows(
        conn,
        "select r.id, r.loop_id, r.iteration, r.status, left(r.task, 120) as task, "
        "       r.created_at, r.finished_at, r.finished_at - r.started_at as duration "
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
        "       left(j.prompt, 4000) as prompt, left(j.last_error, 2000) as last_error, "
        "       j.max_cost_usd, j.max_tokens, left(j.reply, 4000) as reply, j.replied_by, "
        "       (select sum(r.cost_usd) from ceaseless.agent_run r where r.job_id = j.id) "
        "           as spent_usd, "
        "       (select sum(coalesce(r.tokens_in, 0) + coalesce(r.tokens_out, 0)) "
        "        from ceaseless.agent_run r where r.job_id = j.id) as spent_tokens "
        "from ceaseless.job j where j.id = %s",
        (job_id,),
    )


async def job_runs(conn: psycopg.AsyncConnection, job_id: UUID) -> list[Row]:
    """A job's runs, first attempt first, each with its final message (bounded)."""
    return await _rows(
        conn,
        "select r.id, r.attempt, r.agent, r.adapter, r.model, r.worker, r.outcome, "
        "       r.exit_status, r.started_at, r.finished_at, "
        "       r.finished_at - r.started_at as duration, r.tokens_in, r.tokens_out, "
        "       r.cost_usd, r.num_turns, r.session_id, "
        "       left(r.final_message, 20000) as final_message, left(r.error, 2000) as error, "
        "       left(r.reply, 4000) as reply, r.replied_by "
        "from ceaseless.agent_run r where r.job_id = %s order by r.started_at",
        (job_id,),
    )


@asynccontextmanager
async def acting_as(conn: psycopg.AsyncConnection, actor: str) -> AsyncIterator[None]:
    """A transaction whose audit rows name `actor` beside the listener's login role.

    audit_log.worker takes `ceaseless.actor` only for a member of
    ceaseless_listener (db/0026): the dashboard reads and acts as the listener,
    so its rows carry `<worker id> dashboard:<user>`, while a user's session
    that sets the same name records nothing. set_config(…, true) ends with the
    transaction: the pooled connection keeps no trace of it.
    """
    async with conn.transaction():
        await conn.execute("select set_config('ceaseless.actor', %s, true)", (actor,))
        yield


# Each action is one call of the SQL API, which holds its rules and raises its
# refusals; the row it returns is what the page reports.
ACTIONS: dict[str, LiteralString] = {
    "cancel_job": "select ceaseless.cancel_job(%s) is null as done",
    "retry_job": "select ceaseless.retry_job(%s) is null as done",
    "reply_job": "select ceaseless.reply_job(%s, %s) is null as done",
    "raise_job_budget": "select ceaseless.raise_job_budget(%s, %s) is null as done",
    "run_routine": "select ceaseless.run_routine(%s) as id",
    "run_loop": "select ceaseless.run_loop(%s) as id",
    # The tables' triggers do what enabling means (validation, the next fire,
    # resuming or stopping a loop) and audit it (_audit_enabling).
    "enable_routine": "update ceaseless.routines set enabled = %s where id = %s "
    "returning id, enabled",
    "enable_loop": "update ceaseless.loops set enabled = %s where id = %s returning id, enabled",
    "pause_lane": "select ceaseless.pause_lane(%s, now() + make_interval(mins => %s), %s) "
    "as paused_until",
    "resume_lane": "select ceaseless.resume_lane(%s) is null as done",
}


# The run a fire made, skipped or not: its status says which, and why. A
# statement of its own: the one that fired cannot see the row its function
# inserted (its snapshot predates it).
_FIRED: dict[str, LiteralString] = {
    "run_routine": "select status, skip_reason from ceaseless.routine_runs where id = %s",
    "run_loop": "select status, skip_reason from ceaseless.topology_runs where id = %s",
}


async def act(
    conn: psycopg.AsyncConnection, actor: str, action: str, params: tuple[Any, ...]
) -> Row | None:
    """Run ACTIONS[action] as `actor` (acting_as); its row, None when it touched none."""
    async with acting_as(conn, actor):
        row = await _row(conn, ACTIONS[action], params)
        if row is not None and action in _FIRED:
            row |= await _row(conn, _FIRED[action], (row["id"],)) or {}
        return row
