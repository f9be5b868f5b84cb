"""Spend budgets per owner (owner_budgets): a claim waits while the owner's runs in its window
have reported its cost or token budget, in every lane, while other owners' jobs go on;
owner_budget_usage shows the spend; explain_job names owner_budget and when it clears."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
import pytest

from tests.factories import claim, claim_started, finish, make_agent, make_job

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def _spend(conn: psycopg.Connection, owner: str, agent: str, at: datetime, **reported: Any) -> None:
    job = make_job(conn, agent=agent, run_after=at, user_id=owner)
    runs = claim_started(conn, limit=1, p_now=at, p_agents=[agent])
    assert runs.keys() == {job}
    finish(conn, runs[job], "succeeded", **reported)


def _budget(conn: psycopg.Connection, owner: str, **columns: Any) -> None:
    names = ", ".join(["user_id", *columns])
    marks = ", ".join(["%s"] * (len(columns) + 1))
    conn.execute(
        f"insert into ceaseless.owner_budgets ({names}) values ({marks})",  # type: ignore[arg-type]
        [owner, *columns.values()],
    )


def test_an_owner_over_its_cost_budget_waits_in_every_lane_while_others_run(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, "a")
    make_agent(conn, "b")
    _budget(conn, "alice", window_cost_usd=1, window_secs=3600)
    _spend(conn, "alice", "a", T0, cost_usd=0.7)
    _spend(conn, "alice", "b", T0 + timedelta(minutes=10), cost_usd=0.4)
    alice_a = make_job(conn, agent="a", run_after=T0, user_id="alice")
    alice_b = make_job(conn, agent="b", run_after=T0, user_id="alice")
    bob = make_job(conn, agent="a", run_after=T0, user_id="bob")
    now = T0 + timedelta(minutes=30)

    (reason, detail, clears), *rest = conn.execute(
        "select * from ceaseless.explain_job(%s, %s)", (alice_b, now)
    ).fetchall()
    assert (reason, rest) == ("owner_budget", [])
    assert "owner alice's runs" in detail and "1.100000 USD" in detail
    # 1.10 less the first run's 0.70 is under 1.00: clear when it leaves the window.
    assert clears == T0 + HOUR
    assert claim(conn, p_now=now) == [bob]
    assert claim(conn, p_now=clears - timedelta(seconds=1)) == []
    assert sorted(claim(conn, p_now=clears)) == sorted([alice_a, alice_b])


def test_a_token_budget_holds_and_the_usage_view_shows_it(conn: psycopg.Connection) -> None:
    make_agent(conn, "a")
    _budget(conn, "alice", window_tokens=1_000)
    now = datetime.now(UTC)  # the view reads the window up to now()
    _spend(conn, "alice", "a", now - timedelta(minutes=2), tokens_in=900, tokens_out=200)
    waiting = make_job(conn, agent="a", run_after=now - timedelta(minutes=1), user_id="alice")
    assert claim(conn, p_now=now) == []
    row = conn.execute(
        "select user_id, tokens_in_window, over_budget from ceaseless.owner_budget_usage"
    ).fetchone()
    assert row == ("alice", 1100, True)
    conn.execute("update ceaseless.owner_budgets set window_tokens = 5000")
    assert claim(conn, p_now=now) == [waiting]


def test_under_budget_changes_nothing(conn: psycopg.Connection) -> None:
    make_agent(conn, "a")
    _budget(conn, "alice", window_cost_usd=10)
    _spend(conn, "alice", "a", T0, cost_usd=1)
    job = make_job(conn, agent="a", run_after=T0, user_id="alice")
    why = conn.execute(
        "select reason from ceaseless.explain_job(%s, %s)", (job, T0 + timedelta(minutes=1))
    ).fetchall()
    assert why == [("ready",)]
    assert claim(conn, p_now=T0 + timedelta(minutes=1)) == [job]


@pytest.mark.parametrize(
    ("columns", "constraint"),
    [
        ({"window_cost_usd": 0}, "window_cost_usd_positive"),
        ({"window_tokens": -1}, "window_tokens_positive"),
        ({"window_secs": 0, "window_cost_usd": 1}, "window_secs_positive"),
        ({}, "some_budget"),
    ],
)
def test_a_budget_that_bounds_nothing_is_refused(
    conn: psycopg.Connection, columns: dict[str, Any], constraint: str
) -> None:
    with pytest.raises(psycopg.errors.CheckViolation) as info:
        _budget(conn, "alice", **columns)
    assert info.value.diag.constraint_name == constraint


def test_a_user_reads_its_own_budget_and_cannot_set_one(
    conn: psycopg.Connection, login_role: Callable[..., psycopg.Connection]
) -> None:
    alice = login_role("alice")
    (name,) = alice.execute("select current_user").fetchone()  # type: ignore[misc]
    _budget(conn, name, window_cost_usd=5)
    _budget(conn, "someone_else", window_cost_usd=5)
    rows = alice.execute("select user_id, over_budget from ceaseless.owner_budget_usage").fetchall()
    assert rows == [(name, False)]
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.execute("update ceaseless.owner_budgets set window_cost_usd = 1000")


def test_jobs_of_other_owners_cost_nothing_extra_when_no_budget_exists(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, "a")
    job: UUID = make_job(conn, agent="a", run_after=T0)
    assert claim(conn, p_now=T0) == [job]
