"""Cost and token budgets per lane (agents.window_cost_usd, window_tokens).

A claim waits while what the lane's runs started in the window reported has
reached a budget; governor_usage shows the spend and no free slots; explain_job
names the budget and when enough of the spend has aged out of the window.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
import pytest

from tests.factories import claim, claim_started, finish, make_agent, make_job

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def _run_and_report(conn: psycopg.Connection, at: datetime, **reported: Any) -> UUID:
    """One job of the lane, claimed and started at `at`, finished with what it reported."""
    job = make_job(conn, run_after=at)
    runs = claim_started(conn, limit=1, p_now=at)
    assert runs.keys() == {job}
    finish(conn, runs[job], "succeeded", **reported)
    return job


def _governor(conn: psycopg.Connection) -> dict[str, Any]:
    cur = conn.execute("select * from ceaseless.governor_usage where agent = 'noop'")
    row = cur.fetchone()
    assert row is not None and cur.description is not None
    return {col.name: value for col, value in zip(cur.description, row, strict=True)}


def _why(conn: psycopg.Connection, job: UUID, now: datetime) -> list[tuple[Any, ...]]:
    return conn.execute("select * from ceaseless.explain_job(%s, %s)", (job, now)).fetchall()


def test_a_lane_under_its_cost_budget_admits_work(conn: psycopg.Connection) -> None:
    make_agent(conn, window_cost_usd=1)
    _run_and_report(conn, T0, cost_usd=0.4)
    job = make_job(conn, run_after=T0)

    assert [r[0] for r in _why(conn, job, T0 + timedelta(minutes=1))] == ["ready"]
    assert claim(conn, p_now=T0 + timedelta(minutes=1)) == [job]


def test_a_spent_cost_budget_holds_claims_until_enough_cost_leaves_the_window(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, window_cost_usd=1, window_secs=3600)
    _run_and_report(conn, T0, cost_usd=0.6)
    _run_and_report(conn, T0 + timedelta(minutes=10), cost_usd=0.5)
    waiting = make_job(conn, run_after=T0)
    now = T0 + timedelta(minutes=30)

    (reason, detail, clears), *rest = _why(conn, waiting, now)

    assert (reason, rest) == ("cost_budget", [])
    assert "reported 1.100000 USD, against window_cost_usd 1.000000" in detail
    # 1.10 less the first run's 0.60 is under 1.00: the budget clears when
    # that run leaves the window.
    assert clears == T0 + HOUR
    assert claim(conn, p_now=now) == []
    assert claim(conn, p_now=clears - timedelta(seconds=1)) == []
    assert claim(conn, p_now=clears) == [waiting]


def test_a_spent_token_budget_holds_claims_and_names_when_it_clears(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, window_tokens=10_000, window_secs=3600)
    _run_and_report(conn, T0, tokens_in=1_000, tokens_out=500)
    _run_and_report(conn, T0 + timedelta(minutes=5), tokens_in=8_000, tokens_out=1_000)
    waiting = make_job(conn, run_after=T0)
    now = T0 + timedelta(minutes=30)

    (reason, detail, clears), *rest = _why(conn, waiting, now)

    assert (reason, rest) == ("token_budget", [])
    assert "reported 10500 tokens, against window_tokens 10000" in detail
    # Without the first run (1,500) the window holds 9,000: under budget.
    assert clears == T0 + HOUR
    assert claim(conn, p_now=now) == []
    assert claim(conn, p_now=clears) == [waiting]


def test_governor_usage_shows_the_spend_and_no_free_slots_over_a_budget(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, window_cost_usd=0.5, window_tokens=1_000_000)
    now = datetime.now(UTC)
    _run_and_report(conn, now - timedelta(minutes=1), cost_usd=0.75, tokens_in=300, tokens_out=20)

    usage = _governor(conn)

    assert usage["free_slots"] == 0
    assert float(usage["cost_in_window"]) == 0.75 and float(usage["window_cost_usd"]) == 0.5
    assert usage["tokens_in_window"] == 320 and usage["window_tokens"] == 1_000_000


def test_a_lane_without_spend_budgets_ignores_what_its_runs_cost(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    _run_and_report(conn, T0, cost_usd=1_000, tokens_in=10**9)
    job = make_job(conn, run_after=T0)

    assert claim(conn, p_now=T0 + timedelta(minutes=1)) == [job]
    assert _governor(conn)["window_cost_usd"] is None


@pytest.mark.parametrize(
    ("column", "value"), [("window_cost_usd", 0), ("window_tokens", 0), ("window_tokens", -5)]
)
def test_a_budget_of_zero_or_less_is_refused(
    conn: psycopg.Connection, column: str, value: int
) -> None:
    with pytest.raises(psycopg.errors.CheckViolation) as raised:
        make_agent(conn, **{column: value})
    assert raised.value.diag.constraint_name == f"{column}_positive"
