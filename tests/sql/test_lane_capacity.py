"""One rule for a lane's free slots (_lane_capacity): the claim admits, governor_usage shows and
explain_job names the same thing.

The rule once lived three times, in the claim, the view and the explanation; these tests hold
the three to one answer over many lanes, and hold the claim to reading only what can bind.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
import pytest

from tests.factories import claim, claim_started, finish, make_agent, make_job, pause_lane
from tests.sql.plans import explained, nodes

LANE_REASONS = {
    "agent_disabled",
    "lane_paused",
    "lane_full",
    "window_budget",
    "cost_budget",
    "token_budget",
}


def _now(conn: psycopg.Connection) -> datetime:
    row = conn.execute("select now()").fetchone()
    assert row is not None
    return row[0]


def _usage(conn: psycopg.Connection) -> dict[str, dict[str, Any]]:
    cur = conn.execute("select * from ceaseless.governor_usage")
    assert cur.description is not None
    names = [col.name for col in cur.description]
    return {row[0]: dict(zip(names, row, strict=True)) for row in cur.fetchall()}


def _lane(conn: psycopg.Connection, rng: random.Random, name: str, now: datetime) -> None:
    """A lane with random history, live work and limits, and due jobs waiting."""
    make_agent(conn, name, max_concurrent=20, max_attempts=5)
    # Finished runs: in the window, and one that has left it.
    for minutes in [90] + [rng.randrange(1, 50) for _ in range(rng.randrange(0, 5))]:
        at = now - timedelta(minutes=minutes)
        job = make_job(conn, name, run_after=at)
        runs = claim_started(conn, limit=1, p_agents=[name], p_now=at)
        finish(
            conn,
            runs[job],
            "succeeded",
            cost_usd=rng.choice([None, 0.1, 0.4]),
            tokens_in=rng.choice([None, 30, 300]),
            tokens_out=rng.choice([None, 20]),
        )
    # Live work: started (a run in the window) and claimed only.
    at = now - timedelta(minutes=1)
    for _ in range(rng.randrange(0, 3)):
        make_job(conn, name, run_after=at)
        claim_started(conn, limit=1, p_agents=[name], p_now=at)
    for _ in range(rng.randrange(0, 3)):
        make_job(conn, name, run_after=at)
        claim(conn, limit=1, p_agents=[name], p_now=at)
    for _ in range(8):
        make_job(conn, name, run_after=at)

    conn.execute(
        "update ceaseless.agents set max_concurrent = %s, window_budget = %s, "
        "window_cost_usd = %s, window_tokens = %s, enabled = %s where name = %s",
        (
            rng.randrange(1, 5),
            rng.choice([None, None, rng.randrange(1, 8)]),
            rng.choice([None, None, 0.3, 1]),
            rng.choice([None, None, 100, 1000]),
            rng.random() > 0.1,
            name,
        ),
    )
    if rng.random() < 0.15:
        pause_lane(conn, name, now + timedelta(minutes=rng.choice([-5, 30])))


def _oldest_due(conn: psycopg.Connection, lane: str) -> UUID:
    row = conn.execute(
        "select id from ceaseless.job where agent = %s and state = 'pending' "
        "order by run_after, created_at limit 1",
        (lane,),
    ).fetchone()
    assert row is not None
    return row[0]


@pytest.mark.parametrize("seed", range(3))
def test_the_claim_the_view_and_the_explanation_agree_on_every_lane(
    conn: psycopg.Connection, seed: int
) -> None:
    rng = random.Random(seed)
    now = _now(conn)
    lanes = [f"lane{i}" for i in range(12)]
    for lane in lanes:
        _lane(conn, rng, lane, now)

    held_seen: set[str] = set()
    with conn.transaction(force_rollback=True):
        now = _now(conn)  # the view reads now(): the transaction's time
        usage = _usage(conn)
        for lane in lanes:
            why = conn.execute(
                "select reason from ceaseless.explain_job(%s, %s)", (_oldest_due(conn, lane), now)
            ).fetchall()
            reasons = [reason for (reason,) in why]
            claimed = claim(conn, "checker", 100, p_agents=[lane], p_now=now)

            row = usage[lane]
            assert len(claimed) == row["free_slots"], (lane, row)
            assert [r for r in reasons if r in LANE_REASONS] == row["held_by"], (lane, row)
            assert (reasons == ["ready"]) == (row["free_slots"] > 0), (lane, reasons, row)
            held_seen.update(row["held_by"])
    # The lanes drawn exercise more than one reason (or the test proves little).
    assert len(held_seen) >= 3, held_seen


def test_governor_usage_names_what_holds_each_lane(conn: psycopg.Connection) -> None:
    now = _now(conn)
    make_agent(conn, "open", max_concurrent=3)
    make_agent(conn, "off", enabled=False)
    make_agent(conn, "paused")
    pause_lane(conn, "paused", now + timedelta(hours=1))
    make_agent(conn, "full", max_concurrent=1)
    make_job(conn, "full", run_after=now)
    claim(conn, limit=1, p_agents=["full"])
    make_agent(conn, "spent", window_cost_usd=0.5, max_concurrent=2)
    job = make_job(conn, "spent", run_after=now)
    finish(conn, claim_started(conn, limit=1, p_agents=["spent"])[job], "succeeded", cost_usd=1)

    usage = _usage(conn)

    assert {lane: (row["held_by"], row["free_slots"]) for lane, row in usage.items()} == {
        "open": ([], 3),
        "off": (["agent_disabled"], 0),
        "paused": (["lane_paused"], 0),
        "full": (["lane_full"], 0),
        "spent": (["cost_budget"], 0),
    }


def _window_reads(conn: psycopg.Connection) -> list[int]:
    """How many times the claim's count of its lane read the window's runs."""
    with explained(conn) as plans, conn.transaction(force_rollback=True):
        conn.execute("select count(*) from ceaseless.claim_jobs('w1', 10)")
    (capacity,) = [p for p in plans if "from agent_run r" in p["Query Text"]]
    return [
        int(node["Actual Loops"])
        for node in nodes(capacity["Plan"])
        if node.get("Relation Name") == "agent_run"
        or node.get("Index Name") == "agent_run_lane_window_idx"
    ]


def test_a_claim_reads_the_window_of_a_lane_only_when_the_lane_has_a_budget(
    conn: psycopg.Connection,
) -> None:
    # A busy lane without a window budget has thousands of runs in its window;
    # counting them on every claim would cost in proportion to its throughput.
    make_agent(conn, max_concurrent=1_000)
    conn.execute(
        "insert into ceaseless.job (kind, agent, prompt) "
        "select 'task', 'noop', 'p' from generate_series(1, 500)"
    )
    runs = claim_started(conn, limit=500)
    payload = json.dumps([{"run_id": str(r), "outcome": "succeeded"} for r in runs.values()])
    conn.execute("select ceaseless.finish_runs('w1', %s::jsonb)", (payload,))
    make_job(conn)

    assert set(_window_reads(conn)) == {0}
    conn.execute("update ceaseless.agents set window_budget = 10000")
    assert 1 in _window_reads(conn)
