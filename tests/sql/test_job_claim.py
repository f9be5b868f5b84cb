"""claim_jobs: order, filters, leases, and governor admission."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from tests.factories import claim, claim_started, make_agent, make_job, pause_lane


def test_claim_takes_oldest_due_jobs_and_marks_them_claimed(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=10)
    first = make_job(conn)
    second = make_job(conn)
    conn.execute(
        "update ceaseless.job set run_after = run_after - interval '1 minute' where id = %s",
        (first,),
    )
    assert claim(conn, limit=1) == [first]
    row = conn.execute(
        "select state, claimed_by, attempts, claim_expires_at > now() from ceaseless.job "
        "where id = %s",
        (first,),
    ).fetchone()
    assert row == ("claimed", "w1", 1, True)
    assert claim(conn, limit=5) == [second]
    assert claim(conn, limit=5) == []


def test_claim_skips_jobs_whose_run_after_is_in_the_future(conn: psycopg.Connection) -> None:
    make_agent(conn)
    later = datetime.now(UTC) + timedelta(hours=1)
    make_job(conn, run_after=later)
    assert claim(conn) == []
    assert len(claim(conn, p_now=later + timedelta(seconds=1))) == 1


def test_claim_filters_by_kind_and_agent(conn: psycopg.Connection) -> None:
    make_agent(conn, "a", max_concurrent=10)
    make_agent(conn, "b", max_concurrent=10)
    task_a = make_job(conn, agent="a")
    make_job(conn, agent="a", kind="routine")
    task_b = make_job(conn, agent="b")
    assert claim(conn, p_kinds=["task"], p_agents=["a"]) == [task_a]
    assert claim(conn, p_kinds=["task"]) == [task_b]


def test_claim_never_exceeds_a_lanes_max_concurrent(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=2)
    for _ in range(5):
        make_job(conn)
    assert len(claim(conn, limit=10)) == 2
    assert claim(conn, limit=10) == []


def test_full_lane_does_not_hide_another_lanes_work(conn: psycopg.Connection) -> None:
    make_agent(conn, "busy", max_concurrent=1)
    make_agent(conn, "idle", max_concurrent=1)
    for _ in range(50):
        make_job(conn, agent="busy")
    idle_job = make_job(conn, agent="idle")
    claimed = claim(conn, limit=10)
    assert len(claimed) == 2 and idle_job in claimed


def test_window_budget_counts_started_and_claimed_runs(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=10, window_budget=3, window_secs=3600)
    for _ in range(5):
        make_job(conn)
    first = list(claim_started(conn, limit=2))
    conn.execute(
        "update ceaseless.job set state = 'delivered', finished_at = now() where id = any(%s)",
        (first,),
    )
    assert len(claim(conn, limit=10)) == 1  # 2 started in the window + 1 = budget 3
    assert claim(conn, limit=10) == []


def test_paused_lane_is_not_claimed_until_its_pause_ends(conn: psycopg.Connection) -> None:
    until = datetime.now(UTC) + timedelta(minutes=10)
    make_agent(conn)
    pause_lane(conn, "noop", until)
    make_job(conn)
    assert claim(conn) == []
    assert len(claim(conn, p_now=until + timedelta(seconds=1))) == 1


def test_disabled_agent_gets_no_work(conn: psycopg.Connection) -> None:
    make_agent(conn, enabled=False)
    make_job(conn)
    assert claim(conn) == []


def test_claim_rejects_nonsense_limits(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as error:
        claim(conn, limit=0)
    assert error.value.sqlstate == "CE422"
    assert "p_limit" in str(error.value)


def test_two_claimers_at_once_admit_exactly_the_lanes_budget(db_url: str) -> None:
    """The lane lock: two connections claiming the same lane never over-admit."""
    with psycopg.connect(db_url, autocommit=True) as setup:
        make_agent(setup, max_concurrent=7)
        for _ in range(100):
            make_job(setup)
    results: list[int] = []
    barrier = threading.Barrier(4)

    def worker(name: str) -> None:
        with psycopg.connect(db_url, autocommit=True) as conn:
            barrier.wait()
            total = 0
            for _ in range(20):
                total += len(claim(conn, worker=name, limit=3))
            results.append(total)

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(results) == 7
