"""`ceaseless agent …`: register agent lanes, list and show them, disable and delete them.

Guarantees: `register` is one statement that registers a new lane or updates a
registered one, setting only the columns given: a new lane gets each column's
default, a registered lane keeps its current values, so registering again with one
changed option changes only that one (and updated_at).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import LiteralString, NamedTuple

from psycopg import sql

from listener.queries.commands import Connection, Listing, listing


def register(conn: Connection, values: Mapping[str, object]) -> None:
    """Update the lane named values["name"] in the columns given (not None), or insert it.

    Not a plain INSERT … ON CONFLICT: CHECK constraints judge the row proposed for
    insertion before the conflict is found, so re-registering a process adapter
    without its argv would be refused by argv_not_empty_for_process_adapters
    although the stored row has one. The insert's ON CONFLICT covers a lane
    registered concurrently between the two steps.
    """
    given = {column: value for column, value in values.items() if value is not None}
    changed = [column for column in given if column != "name"]  # adapter: always given
    statement = sql.SQL(
        """
        with updated as (
            update ceaseless.agents set {assignments}, updated_at = now()
             where name = {name}
            returning name)
        insert into ceaseless.agents ({columns}) select {values}
         where not exists (select from updated)
        on conflict (name) do update set {overwrites}, updated_at = now()
        """
    ).format(
        assignments=sql.SQL(", ").join(
            sql.SQL("{} = {}").format(sql.Identifier(column), sql.Placeholder(column))
            for column in changed
        ),
        name=sql.Placeholder("name"),
        columns=sql.SQL(", ").join(map(sql.Identifier, given)),
        values=sql.SQL(", ").join(map(sql.Placeholder, given)),
        overwrites=sql.SQL(", ").join(
            sql.SQL("{0} = excluded.{0}").format(sql.Identifier(column)) for column in changed
        ),
    )
    conn.execute(statement, given)


def agents(conn: Connection) -> Listing:
    """The registered lanes with their limits."""
    return listing(
        conn,
        """
        select name, adapter, argv, model, timeout_secs as timeout,
               max_concurrent as max, window_budget as budget, enabled
          from ceaseless.agents
         order by name
        """,
    )


def agent(conn: Connection, name: str) -> Listing:
    """One lane's configuration, with the names of its environment's variables (never their
    values) for a role that may read env at all: a user role may not."""
    may_read_env = conn.execute(
        "select has_column_privilege('ceaseless.agents', 'env', 'select')"
    ).fetchone()
    env_names: LiteralString = (
        "array(select jsonb_object_keys(env) order by 1)"
        if may_read_env and may_read_env[0]
        else "null::text[]"
    )
    return listing(
        conn,
        """
        select name, adapter, argv, model, enabled, timeout_secs, kill_grace_secs,
               max_concurrent, max_attempts, window_secs, window_budget, window_cost_usd,
               window_tokens, egress, """
        + env_names
        + """ as env_names, created_at, updated_at
          from ceaseless.agents
         where name = %s
        """,
        (name,),
    )


def lane(conn: Connection, name: str) -> Listing:
    """The lane's governor now: live runs, the window's starts, spend, free slots, what holds it."""
    return listing(
        conn,
        """
        select live, max_concurrent, started_in_window, window_budget, cost_in_window,
               tokens_in_window, free_slots, pending_due, paused_until, pause_reason, held_by
          from ceaseless.governor_usage
         where agent = %s
        """,
        (name,),
    )


def set_enabled(conn: Connection, name: str, enabled: bool) -> bool:
    """Enable or disable a lane (what that does to its jobs is the agents triggers' rule:
    docs/agents.md); False when no lane has the name."""
    cur = conn.execute("update ceaseless.agents set enabled = %s where name = %s", (enabled, name))
    return cur.rowcount == 1


class Used(NamedTuple):
    jobs: int
    routines: int


def delete(conn: Connection, name: str) -> Used:
    """Delete the lane when nothing names it, and say what still does: its jobs (finished
    ones included) and its routines, whose foreign keys keep a lane that has a history.
    Two statements: a job inserted between them is refused by the key instead."""
    row = conn.execute(
        """
        select (select count(*) from ceaseless.job where agent = %(name)s),
               (select count(*) from ceaseless.routines where agent = %(name)s)
        """,
        {"name": name},
    ).fetchone()
    used = Used(*row) if row is not None else Used(0, 0)
    if used == (0, 0):
        conn.execute("delete from ceaseless.agents where name = %s", (name,))
    return used
