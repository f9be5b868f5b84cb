"""`ceaseless routine …`: add, list and show routines, and fire one by hand.

Guarantees: `add` is one INSERT, which the routine's validation triggers check
and complete (a cron trigger's time zone, the columns left out); `run` is
run_routine, with the guardrails the engine applies to every fire.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from listener.queries.commands import Connection, Listing, fire, insert, listing


def add(conn: Connection, values: Mapping[str, object]) -> str:
    """Insert a routine; its id."""
    return str(insert(conn, "routines", values, ["id"])[0])


def routines(conn: Connection) -> Listing:
    """One line per routine, from routine_status."""
    return listing(
        conn,
        """
        select name, user_id as "user", enabled, trigger_type as trigger,
               coalesce(schedule, '') as schedule, next_fire_at, last_status as last,
               consecutive_failures as failures, runs_24h, skips_24h, held_fires as held
          from ceaseless.routine_status
         order by user_id, name
        """,
    )


def routine(conn: Connection, routine_id: str) -> Listing:
    """A routine's configuration (its webhook secret left out) and its state."""
    return listing(
        conn,
        """
        select name, user_id as "user", enabled, agent, trigger_type as trigger,
               trigger_config - 'secret' as trigger_config, action_type as action,
               action_config, cooldown_secs, max_concurrent, dedup_window_secs,
               overlap_policy, debounce_secs, debounce_max_secs,
               next_fire_at, last_run_at, run_count, consecutive_failures, last_error
          from ceaseless.routines
         where id = %s
        """,
        (routine_id,),
    )


def runs(conn: Connection, routine_id: str) -> Listing:
    """A routine's last ten runs, the latest first."""
    return listing(
        conn,
        """
        select started_at, trigger_type as trigger, status, coalesce(skip_reason, '') as skip,
               missed_slots as missed, left(coalesce(result_summary, ''), 60) as summary
          from ceaseless.routine_runs
         where routine_id = %s
         order by started_at desc
         limit 10
        """,
        (routine_id,),
    )


def run(conn: Connection, routine_id: str) -> tuple[Any, str, str | None]:
    """Fire a routine now: the run's id, status and skip reason (or a held fire's id, 'held'
    and why it waits)."""
    run_id, status, reason = fire(
        conn, "run_routine", "routine_runs", ["status", "skip_reason"], routine_id
    )
    return run_id, status, reason
