"""A listener's maintenance prunes what is past retention, one listener at a time
(listener/daemon/maintenance.py, functions/96_retention.sql).

The prune interval is set to a second, so passes come while the test watches; rows are
backdated, and the test waits for what a pass does, never for time itself.
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg

from tests.e2e.support import ListenerProcess, scalar, wait_until
from tests.factories import ended_long_ago, make_agent

Start = Callable[..., ListenerProcess]


def _often(conn: psycopg.Connection) -> None:
    conn.execute("update ceaseless.settings set value = '1' where key = 'prune_interval_secs'")


def _old_event(conn: psycopg.Connection, content: str) -> None:
    conn.execute(
        "insert into ceaseless.events (user_id, content, created_at) "
        "values ('alice', %s, now() - interval '30 days')",
        (content,),
    )


def test_a_listeners_maintenance_prunes_backdated_rows_and_nothing_live(
    db_url: str, conn: psycopg.Connection, start_listener: Start
) -> None:
    make_agent(conn)
    _often(conn)
    listener = start_listener()
    _old_event(conn, "old")
    conn.execute("insert into ceaseless.events (user_id, content) values ('alice', 'today')")
    done = ended_long_ago(conn, "delivered")
    # Blocked for as long: it waits for a person, and stays.
    waiting = ended_long_ago(conn, "blocked")

    wait_until(
        lambda: (
            scalar(db_url, "select count(*) from ceaseless.job where id = %s", (done,)) == 0
            and scalar(db_url, "select count(*) from ceaseless.events where content = 'old'") == 0
        ),
        15,
        lambda: f"nothing pruned: {listener.lines[-10:]}",
    )

    assert scalar(db_url, "select state from ceaseless.job where id = %s", (waiting,)) == "blocked"
    assert scalar(db_url, "select count(*) from ceaseless.events where content = 'today'") == 1
    listener.wait_for_event("retention.pruned")
    assert (
        scalar(db_url, "select count(*) from ceaseless.audit_log where entity = 'retention'") >= 1
    )


def test_two_listeners_never_prune_at_once(
    db_url: str, conn: psycopg.Connection, start_listener: Start
) -> None:
    make_agent(conn)
    _often(conn)
    with psycopg.connect(db_url) as holder:
        # A prune in a transaction left open holds the lock every pass takes.
        holder.execute("select * from ceaseless.prune(p_only => 'jobs')")
        first, second = start_listener(), start_listener()
        _old_event(conn, "old")
        for listener in (first, second):
            listener.wait_for_event("retention.busy", count=2)
        assert scalar(db_url, "select count(*) from ceaseless.events") == 1
        holder.rollback()

    def events_pruned() -> int:
        pruned = first.events("retention.pruned") + second.events("retention.pruned")
        return sum(line.get("events", 0) for line in pruned)

    # A pass logs what it removed after its transaction commits: wait for the line, not
    # only for the row to be gone.
    wait_until(
        lambda: events_pruned() > 0,
        15,
        lambda: f"nothing pruned: {first.lines[-5:]} {second.lines[-5:]}",
    )
    assert scalar(db_url, "select count(*) from ceaseless.events") == 0
    assert events_pruned() == 1
