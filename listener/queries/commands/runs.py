"""`ceaseless run …`: a topology run, its nodes, and cancelling it.

Guarantees: a run is read from topology_runs and its nodes from the
topology_node_status view (what a user role may see of them); cancelling is
cancel_topology_run and running again retry_topology_run, whose rules
(ownership, a run already ended or still live) are the database's.
"""

from __future__ import annotations

from listener.queries.commands import Connection, Listing, listing


def run(conn: Connection, ref: str) -> Listing:
    """The run whose id `ref` is (in any case): its status, task and final message."""
    return listing(
        conn,
        """
        select id, status, loop_id, iteration, trigger_type as trigger, skip_reason,
               created_at, started_at, finished_at, left(task, 200) as task,
               left(final_message, 500) as final_message, error
          from ceaseless.topology_runs
         where id::text = lower(%s)
        """,
        (ref,),
    )


def nodes(conn: Connection, run_id: str) -> Listing:
    """Each node of a run: its state, job and timings, its approval, and what it said."""
    return listing(
        conn,
        """
        select node, agent, coalesce(gate, '') as gate, state, upstream_left as upstream,
               job_state as job, attempts, seconds,
               coalesce(approval_id::text, '') as approval,
               coalesce(approval_decision, '') as decision,
               coalesce(error, output_preview, '') as output_or_error
          from ceaseless.topology_node_status
         where run_id = %s
         order by started_at nulls last, node
        """,
        (run_id,),
    )


def cancel(conn: Connection, run_id: str) -> str | None:
    """Cancel a run (cancel_topology_run); its status after (None: not visible)."""
    conn.execute("select ceaseless.cancel_topology_run(%s)", (run_id,))
    return _status(conn, run_id)


def retry(conn: Connection, run_id: str) -> str | None:
    """Run a failed or cancelled run again (retry_topology_run); its status after."""
    conn.execute("select ceaseless.retry_topology_run(%s)", (run_id,))
    return _status(conn, run_id)


def _status(conn: Connection, run_id: str) -> str | None:
    """A run's status, read by a statement of its own: a statement does not see what its own
    function call changed."""
    row = conn.execute(
        "select status from ceaseless.topology_runs where id = %s", (run_id,)
    ).fetchone()
    return None if row is None else str(row[0])
