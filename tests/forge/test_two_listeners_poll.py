"""Two real listener processes poll each tracked repo once per interval, not once each.

due_repos hands a repo to one caller (SKIP LOCKED) and moves its next poll on
in the same statement; this test holds the whole listener to it, counting the
requests that reach the fake forge.
"""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import datetime
from itertools import pairwise

import psycopg
import pytest

from tests.e2e.support import ListenerProcess
from tests.fakes.forge import FakeForge
from tests.forge.loops_support import add_repo, set_tokens

INTERVAL = 2
WATCH_SECS = 9.0
REPOS = ("one", "two", "three", "four")


def test_two_listeners_poll_each_repo_once_per_interval(
    db_url: str,
    conn: psycopg.Connection,
    fake_forge: FakeForge,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_tokens(monkeypatch, conn, fake_forge)
    conn.execute("update ceaseless.settings set value = '1' where key = 'forge_min_interval_secs'")
    for name in REPOS:
        add_repo(conn, fake_forge, name, interval=INTERVAL)
        # An issue nobody labelled: every poll is one request and makes no job.
        fake_forge.add_issue(fake_forge.repo("acme", name), "Chatter", user="alice")

    listeners = [
        ListenerProcess(db_url, "--poll-interval", "0.1", worker_id=f"listener-{n}") for n in (1, 2)
    ]
    try:
        for listener in listeners:
            listener.ready()
        time.sleep(WATCH_SECS)
    finally:
        statuses = [listener.stop() for listener in listeners]
    assert statuses == [0, 0]

    polls: dict[str, list[datetime]] = defaultdict(list)
    for listener in listeners:
        for line in listener.events("forge.polled"):
            polls[line["repo"]].append(datetime.fromisoformat(line["ts"]))
    assert sorted(polls) == sorted(f"acme/{name}" for name in REPOS)

    for name in REPOS:
        requests = fake_forge.requests_to("GET", f"/repos/acme/{name}/issues")
        times = sorted(polls[f"acme/{name}"])
        # Every request the fake saw is one poll one listener logged: no poll twice.
        assert len(requests) == len(times), name
        gaps = [(b - a).total_seconds() for a, b in pairwise(times)]
        assert all(gap >= INTERVAL - 0.5 for gap in gaps), (name, gaps)
        # One poll per interval over the whole watch, not one per listener.
        assert WATCH_SECS / INTERVAL - 1 <= len(times) <= WATCH_SECS / INTERVAL + 2, (name, times)
    assert all(listener.events("forge.poll_failed") == [] for listener in listeners)
