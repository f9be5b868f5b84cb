"""`ceaseless status`: the queue by state, each lane's governor usage, the listeners and the
announcement relay's backlog, stuck jobs.

Guarantees: reads of the operator views (governor_usage, listener_status, relay_status,
stuck_jobs) and the job table, each its own statement: a summary, not one snapshot. What a
listener says of itself is what it reported (listener_status). A user role reads its own jobs
(the views are security_invoker) and every lane; the listeners and the relay are the
operators' to see, so for a role that may not read listener_status they are None rather than
an error.
"""

from __future__ import annotations

from typing import NamedTuple

from listener.queries.commands import Connection, Listing, listing


class Status(NamedTuple):
    jobs: Listing
    lanes: Listing
    # The last column, `warnings`, is each listener's list of warnings; None for a role that
    # may not see the listeners.
    listeners: Listing | None
    # One row: relayed announcements waiting, and how long the oldest has (seconds); None
    # for a role that may not see the listeners.
    relay: Listing | None
    stuck_jobs: Listing


def status(conn: Connection) -> Status:
    jobs = listing(
        conn, "select state, count(*) as jobs from ceaseless.job group by state order by state"
    )
    lanes = listing(
        conn,
        """
        select agent, adapter, enabled, live, max_concurrent as max,
               started_in_window as in_window, window_budget as budget, free_slots as free,
               pending_due as due, paused_until
          from ceaseless.governor_usage
         order by agent
        """,
    )
    may_see_listeners = conn.execute(
        "select has_table_privilege('ceaseless.listener_status', 'select')"
    ).fetchone()
    listeners = relay = None
    if may_see_listeners and may_see_listeners[0]:
        listeners = listing(
            conn,
            """
            select worker as listener, listening, held, running,
                   coalesce(sandbox, '?') as sandbox,
                   coalesce(agent_user, case when sandbox is null then '?' else '(its own)' end)
                     as agent_user,
                   coalesce(db_auth, '?') as db_auth, coalesce(http, '') as http,
                   coalesce(warnings, '{}') as warnings
              from ceaseless.listener_status
             order by worker
            """,
        )
        relay = listing(
            conn,
            "select waiting, extract(epoch from oldest_waited)::float8 as oldest_waited_s "
            "from ceaseless.relay_status",
        )
    stuck = listing(
        conn, "select id, agent, state, reason from ceaseless.stuck_jobs order by run_after, id"
    )
    return Status(jobs, lanes, listeners, relay, stuck)
