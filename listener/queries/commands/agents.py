"""`ceaseless agent …`: register agent lanes and list them.

Guarantees: `register` is one statement that registers a new lane or updates a
registered one, setting only the columns given: a new lane gets each column's
default, a registered lane keeps its current values, so registering again with one
changed option changes only that one (and updated_at).
"""

from __future__ import annotations

from collections.abc import Mapping

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
        select name, adapter, array_to_string(argv, ' ') as argv, model, timeout_secs as timeout,
               max_concurrent as max, window_budget as budget, enabled
          from ceaseless.agents
         order by name
        """,
    )
