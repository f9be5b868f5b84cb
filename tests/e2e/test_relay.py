"""Relayed announcements through a real listener: a writer with ceaseless.notify = 'relay'
commits without notifying, the listener sends its announcements, wakes on them and runs the
job, and a subscriber hears each one once, whichever listener relayed it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import psycopg

from tests.e2e.support import ListenerProcess, scalar, wait_until
from tests.factories import make_agent

INSERT_JOB = (
    "insert into ceaseless.job (kind, agent, prompt) values ('task', 'noop', %s) returning id"
)


def _relaying(db_url: str) -> psycopg.Connection:
    return psycopg.connect(db_url, autocommit=True, options="-c ceaseless.notify=relay")


def _delivered(db_url: str, count: int) -> Callable[[], bool]:
    return lambda: (
        scalar(db_url, "select count(*) from ceaseless.job where state = 'delivered'") == count
    )


def test_a_relayed_job_wakes_the_listener_and_its_subscriber(
    conn: psycopg.Connection, db_url: str, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(conn)
    # Polling once a minute: only the relayed announcement can wake it sooner.
    start_listener("--poll-interval", "60")
    with psycopg.connect(db_url, autocommit=True) as subscriber, _relaying(db_url) as writer:
        subscriber.execute("listen ceaseless_job")
        # Past the relay's quiet waits, to the longest.
        time.sleep(2)
        started = time.monotonic()
        row = writer.execute(INSERT_JOB, ("relayed",)).fetchone()
        assert row is not None
        wait_until(_delivered(db_url, 1), 20, "the relayed job never ran")
        took = time.monotonic() - started
        heard = [json.loads(n.payload) for n in subscriber.notifies(timeout=1)]
    assert took < 10, took
    assert {"id": str(row[0]), "state": "pending"}.items() <= heard[0].items()
    assert [p["state"] for p in heard if p["id"] == str(row[0])] == [
        "pending",
        "running",
        "delivered",
    ]
    assert scalar(db_url, "select waiting from ceaseless.relay_status") == 0


def test_what_was_relayed_with_no_listener_up_is_sent_once_by_one_of_two(
    conn: psycopg.Connection, db_url: str, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(conn)
    with psycopg.connect(db_url, autocommit=True) as subscriber, _relaying(db_url) as writer:
        subscriber.execute("listen ceaseless_job")
        ids = []
        for i in range(20):
            row = writer.execute(INSERT_JOB, (f"job {i}",)).fetchone()
            assert row is not None
            ids.append(str(row[0]))
        assert scalar(db_url, "select waiting from ceaseless.relay_status") == 20
        assert list(subscriber.notifies(timeout=0.3)) == []

        start_listener("--poll-interval", "60", worker_id="a")
        start_listener("--poll-interval", "60", worker_id="b")
        wait_until(_delivered(db_url, 20), 30, "the relayed jobs never all ran")
        wait_until(
            lambda: scalar(db_url, "select waiting from ceaseless.relay_status") == 0,
            10,
            "announcements still wait",
        )
        heard = [json.loads(n.payload) for n in subscriber.notifies(timeout=1)]
    pending = [p["id"] for p in heard if p["state"] == "pending" and p["id"] is not None]
    assert pending == ids
