"""`ceaseless job …`: enqueue, list, cancel and retry jobs.

Guarantees: `add` is one INSERT of the columns given; whether a job may be
cancelled or retried is cancel_job's and retry_job's decision, and their error
is the caller's to show.
"""

from __future__ import annotations

from collections.abc import Mapping

from listener.queries.commands import Connection, Listing, insert, listing


def add(conn: Connection, values: Mapping[str, object]) -> str:
    """Enqueue a job; its id."""
    return str(insert(conn, "job", values, ["id"])[0])


def live(conn: Connection) -> Listing:
    """The live jobs (job_queue reads only those), the oldest first."""
    return listing(
        conn,
        """
        select id, kind, agent, state, attempts, claimed_by, last_error
          from ceaseless.job_queue
         order by created_at
        """,
    )


def latest(conn: Connection) -> Listing:
    """The latest 50 jobs in any state, the latest first."""
    return listing(
        conn,
        """
        select id, kind, agent, state, attempts, claimed_by, last_error
          from ceaseless.job
         order by created_at desc
         limit 50
        """,
    )


def cancel(conn: Connection, job_id: str) -> None:
    conn.execute("select ceaseless.cancel_job(%s)", (job_id,))


def retry(conn: Connection, job_id: str) -> None:
    conn.execute("select ceaseless.retry_job(%s)", (job_id,))
