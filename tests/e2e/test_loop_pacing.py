"""A loop's pace end to end: an infinite on_completion loop whose iterations take no time, run
by a real listener (its noop agent, its scheduler starting the deferred fires), fires about
once per min_interval_secs instead of hundreds of times a second."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from datetime import timedelta

import psycopg

from tests.e2e.support import ListenerProcess, wait_until
from tests.factories import make_agent
from tests.sql.loops import iterations, make_loop, runs
from tests.sql.topology import graph, node

WATCHED_SECS = 4


def test_an_instant_infinite_loop_runs_about_one_iteration_per_second(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(conn, max_concurrent=10)
    loop = make_loop(
        conn, g=graph([node("A")]), triggers={"on_completion": True}, min_interval_secs=1
    )
    start_listener("--poll-interval", "60")
    conn.execute("select ceaseless.run_loop(%s)", (loop,))
    # The chain goes on by itself: the listener ends each iteration and starts the next
    # when its deferral is due.
    wait_until(
        lambda: len(iterations(conn, loop)) >= 3,
        30,
        lambda: f"the chain stalled: {[(r['iteration'], r['status']) for r in runs(conn, loop)]}",
    )
    before = len(iterations(conn, loop))
    time.sleep(WATCHED_SECS)
    during = len(iterations(conn, loop)) - before
    conn.execute("update ceaseless.loops set enabled = false where id = %s", (loop,))

    # Unpaced, the same loop ran 194 iterations in 3 seconds.
    assert 1 <= during <= 2 * WATCHED_SECS + 2
    chain = iterations(conn, loop)
    gaps = [b["created_at"] - a["created_at"] for a, b in itertools.pairwise(chain)]
    assert min(gaps) >= timedelta(seconds=1)
    assert [r for r in runs(conn, loop) if r["status"] == "skipped"] == []
