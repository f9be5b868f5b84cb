"""`ceaseless loop …`: add, list and show loops, and fire one by hand.

Guarantees: `add` is one INSERT, which the database validates in full and
completes (a cron trigger's time zone, the workspace, the webhook credential);
`run` is run_loop, the one firing path of every trigger. Nothing here reads a
loop's webhook token or signing key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from listener.queries.commands import Connection, Listing, fire, insert, listing


def add(conn: Connection, values: Mapping[str, object]) -> str:
    """Insert a loop; its id."""
    return str(insert(conn, "loops", values, ["id"])[0])


def workspace_id(conn: Connection, name: str) -> str | None:
    row = conn.execute("select id from ceaseless.workspaces where name = %s", (name,)).fetchone()
    return None if row is None else str(row[0])


def loops(conn: Connection) -> Listing:
    """One line per loop, from loop_status."""
    return listing(
        conn,
        """
        select id, title, owner, enabled,
               concat_ws(' ', case when cron is not null then 'cron' end,
                              case when on_completion then 'on_completion' end,
                              case when webhook then 'webhook' end) as triggers,
               repeat_policy ->> 'kind' as policy, current_iteration as iteration,
               coalesce(live_run_status, '') as live, last_run_status as last, next_fire_at,
               stopped_reason as stopped, skipped_fires as skipped, held_fires as held
          from ceaseless.loop_status
         order by title, id
        """,
    )


def loop(conn: Connection, loop_id: str) -> Listing:
    """A loop's triggers, policy and state, from loop_status."""
    return listing(
        conn,
        """
        select id, title, owner, enabled, cron, timezone, on_completion, webhook, repeat_policy,
               policy_from_iteration, current_iteration, live_run_id, live_run_status,
               last_run_id, last_run_status, next_fire_at, stopped_reason, stopped_at,
               skipped_fires, last_error, overlap_policy, debounce_secs, debounce_max_secs,
               held_fires, held_next_at, min_interval_secs, paced_until
          from ceaseless.loop_status
         where id = %s
        """,
        (loop_id,),
    )


def iterations(conn: Connection, loop_id: str, limit: int) -> Listing:
    """A loop's latest `limit` iterations, the latest first."""
    return listing(
        conn,
        """
        select iteration, id as run, status, trigger_type as trigger, parent_run_id as parent,
               started_at, finished_at, coalesce(final_message, error, '') as message
          from ceaseless.topology_runs
         where loop_id = %s and iteration is not null
         order by iteration desc
         limit %s
        """,
        (loop_id, limit),
    )


def skipped_fires(conn: Connection, loop_id: str) -> Listing:
    """A loop's last ten fires that a guardrail refused, the latest first."""
    return listing(
        conn,
        """
        select created_at as at, trigger_type as trigger, skip_reason as reason,
               coalesce(trigger_detail, '') as detail
          from ceaseless.topology_runs
         where loop_id = %s and status = 'skipped'
         order by created_at desc
         limit 10
        """,
        (loop_id,),
    )


def run(conn: Connection, loop_id: str) -> tuple[Any, str, int | None, str | None]:
    """Fire a loop now: the run's id, status, iteration and skip reason (or a held fire's id,
    'held' and why it waits)."""
    run_id, status, iteration, reason = fire(
        conn, "run_loop", "topology_runs", ["status", "iteration", "skip_reason"], loop_id
    )
    return run_id, status, iteration, reason
