"""The event load scenario's harness: its producers count what failed without retrying it,
and a small run accounts for every event's runs.

Whether the firing path is correct under load is tests/chaos/test_event_load.py's question;
these tests only make sure the benchmark measures what it says.
"""

from __future__ import annotations

import psycopg
import pytest

from bench import event_load


def test_producers_count_a_failed_insert_by_sqlstate_and_go_on(
    conn: psycopg.Connection, db_url: str
) -> None:
    conn.execute("alter table ceaseless.events add constraint no_boom check (content <> 'boom')")

    produced = event_load.produce(db_url, "u", [["a", "boom", "c"], ["d"]])

    assert produced.errors == {"23514": 1}  # check_violation, counted once: no retry
    assert sorted(produced.inserted) == ["a", "c", "d"]
    assert produced.attempted == 4
    assert produced.finished >= produced.started


@pytest.mark.parametrize("relay", [False, True], ids=["direct", "producers relayed"])
def test_a_small_load_accounts_for_every_run_of_every_event(db_url: str, relay: bool) -> None:
    found = event_load.run(
        db_url, 40, producers=2, listeners=1, routines=3, timeout=60, relay=relay
    )

    inserted = len(found.produced.inserted)
    assert inserted + found.produced.errors.total() == 40
    assert (found.missing, found.extra) == (0, 0)
    assert found.statuses["running"] == 0
    assert found.completed + found.statuses["skipped"] == inserted * 3
    assert found.skipped.total() == found.statuses["skipped"]
    assert found.completed_at >= found.produced.finished
