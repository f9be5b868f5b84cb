"""A listener stopped in the middle of a repo poll records what the forge sent.

The forge already answered (or is answering) the listing; cutting the poll
short would lose its ETag and leave its issues waiting a whole interval.
SIGTERM stops new polls and lets the one in flight finish within the
shutdown grace.
"""

from __future__ import annotations

import psycopg
import pytest

from tests.e2e.support import ListenerProcess, wait_until
from tests.fakes.forge import FakeForge
from tests.forge.loops_support import add_repo, set_tokens


def test_a_stop_mid_poll_records_the_poll(
    db_url: str,
    conn: psycopg.Connection,
    fake_forge: FakeForge,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_tokens(monkeypatch, conn, fake_forge)
    repo_id = add_repo(conn, fake_forge, "slow", interval=3600)
    fake_forge.repo("acme", "slow").delay = 2.0
    fake_forge.add_issue(fake_forge.repo("acme", "slow"), "Chatter", user="alice")

    listener = ListenerProcess(db_url, "--poll-interval", "0.1")
    try:
        listener.ready()
        wait_until(
            lambda: fake_forge.requests_to("GET", "/repos/acme/slow/issues") != [],
            10,
            "the listener never asked the forge for the issues",
        )
    finally:
        status = listener.stop()
    assert status == 0

    polled = listener.events("forge.polled")
    assert [line["repo"] for line in polled] == ["acme/slow"]
    assert listener.events("forge.poll_unrecorded") == []
    last_polled_at, last_etag = conn.execute(
        "select last_polled_at, last_etag from ceaseless.tracked_repo where id = %s", (repo_id,)
    ).fetchone()
    assert last_polled_at is not None and last_etag is not None
