"""Spend ceilings: job.max_cost_usd and job.max_tokens over all a job's runs.

A run whose report reaches what is left blocks its job budget_exhausted with a notification;
raise_job_budget (or a reply, while budget is left) resumes the same session. A job's ceiling is
its own, else its loop node's, else its routine's, else its agent's, resolved at insert.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

import psycopg
import pytest

from tests.factories import finish, make_agent, make_job, make_routine
from tests.sql.plans import explained, nodes, statement

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
SESSION = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"


def _claim(conn: psycopg.Connection, when: datetime) -> dict[str, Any]:
    cur = conn.execute(
        "select id, prompt, resume_session_id, reply, run_id, budget_usd, budget_tokens "
        "from ceaseless.claim_jobs('w1', 10, p_now => %s, p_start => true)",
        (when,),
    )
    names = [d.name for d in cur.description or ()]
    rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    assert len(rows) == 1
    return rows[0]


def _job(conn: psycopg.Connection, job: UUID) -> tuple[Any, ...]:
    row = conn.execute(
        "select state, max_cost_usd, max_tokens, resume_session_id from ceaseless.job "
        "where id = %s",
        (job,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def test_claim_returns_what_is_left_of_the_ceiling_after_the_job_s_runs(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    job = make_job(conn, run_after=T0, max_cost_usd=1, max_tokens=1000)
    first = _claim(conn, T0)
    assert (first["budget_usd"], first["budget_tokens"]) == (Decimal(1), 1000)
    finish(conn, first["run_id"], "rate_limited", cost_usd=0.25, tokens_in=100, tokens_out=50)
    second = _claim(conn, datetime.now(UTC) + timedelta(hours=2))
    assert second["id"] == job
    assert (second["budget_usd"], second["budget_tokens"]) == (Decimal("0.75"), 850)


def test_a_job_without_a_ceiling_claims_none(conn: psycopg.Connection) -> None:
    make_agent(conn)
    make_job(conn, run_after=T0)
    claimed = _claim(conn, T0)
    assert (claimed["budget_usd"], claimed["budget_tokens"]) == (None, None)


def test_a_run_passing_max_cost_usd_blocks_its_job_with_a_notification(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    job = make_job(conn, run_after=T0, max_cost_usd=0.5)
    run = _claim(conn, T0)["run_id"]
    state = finish(conn, run, "succeeded", final_message="half", cost_usd=0.6, session_id=SESSION)
    assert state == "blocked"
    outcome, error = conn.execute(
        "select outcome, error from ceaseless.agent_run where id = %s", (run,)
    ).fetchone()  # type: ignore[misc]
    assert outcome == "budget_exhausted"
    assert error.startswith("the job's spend reached its ceiling with this run (max_cost_usd")
    subject, body = conn.execute(
        "select subject, body from ceaseless.notifications where source_id = %s", (job,)
    ).fetchone()  # type: ignore[misc]
    assert subject == f"job {job} blocked: agent noop spent its budget"
    assert f"ceaseless job raise-budget {job} USD" in body
    assert f"select ceaseless.raise_job_budget('{job}', <usd>);" in body


def test_the_ceiling_counts_the_job_s_spend_across_its_runs(conn: psycopg.Connection) -> None:
    make_agent(conn, max_attempts=5)
    job = make_job(conn, run_after=T0, max_cost_usd=1)
    first = _claim(conn, T0)["run_id"]
    # A failure under the ceiling is retried as ever.
    assert finish(conn, first, "failed", error="flaky", cost_usd=0.6) == "pending"
    second = _claim(conn, datetime.now(UTC) + timedelta(hours=2))
    assert second["budget_usd"] == Decimal("0.4")
    # The second failure takes the job past it: blocked, not retried.
    assert finish(conn, second["run_id"], "failed", error="flaky", cost_usd=0.5) == "blocked"
    assert conn.execute(
        "select outcome from ceaseless.agent_run where job_id = %s order by started_at", (job,)
    ).fetchall() == [("failed",), ("budget_exhausted",)]


def test_a_run_passing_max_tokens_blocks_its_job(conn: psycopg.Connection) -> None:
    make_agent(conn)
    job = make_job(conn, run_after=T0, max_tokens=500)
    run = _claim(conn, T0)["run_id"]
    assert finish(conn, run, "succeeded", final_message="x", tokens_in=400, tokens_out=200) == (
        "blocked"
    )
    assert _job(conn, job)[0] == "blocked"


def test_raise_job_budget_resumes_the_same_session_with_a_prompt_to_continue(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    job = make_job(conn, run_after=T0, max_cost_usd=0.5)
    run = _claim(conn, T0)["run_id"]
    finish(
        conn,
        run,
        "budget_exhausted",
        error="error_max_budget_usd",
        cost_usd=0.5,
        session_id=SESSION,
    )
    conn.execute("select ceaseless.raise_job_budget(%s, 2, null, %s)", (job, T0))
    assert _job(conn, job) == ("pending", Decimal("2.000000"), None, SESSION)
    claimed = _claim(conn, T0 + timedelta(seconds=1))
    assert claimed["resume_session_id"] == SESSION
    assert claimed["reply"] == (
        "Your spend ceiling was raised (2 USD). Continue the task where you left off."
    )
    assert claimed["budget_usd"] == Decimal("1.5")
    audit = conn.execute(
        "select action, detail from ceaseless.audit_log where entity_id = %s "
        "and action in ('raise_budget', 'reply') order by id",
        (job,),
    ).fetchall()
    assert [a for a, _ in audit] == ["raise_budget", "reply"]
    assert audit[0][1]["max_cost_usd"] == 2


def test_raise_job_budget_of_tokens_resumes_a_job_blocked_on_tokens(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    job = make_job(conn, run_after=T0, max_tokens=500)
    run = _claim(conn, T0)["run_id"]
    finish(
        conn, run, "succeeded", final_message="x", tokens_in=400, tokens_out=200, session_id=SESSION
    )
    # Raising the USD ceiling alone cannot help a job out of tokens.
    conn.execute("select ceaseless.raise_job_budget(%s, 5, null, %s)", (job, T0))
    assert _job(conn, job)[0] == "blocked"
    conn.execute("select ceaseless.raise_job_budget(%s, null, 2000, %s)", (job, T0))
    assert _job(conn, job) == ("pending", Decimal("5.000000"), 2000, SESSION)
    assert _claim(conn, T0 + timedelta(seconds=1))["budget_tokens"] == 1400


def test_a_reply_resumes_a_job_blocked_on_max_turns_but_not_one_whose_ceiling_is_spent(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    turns = make_job(conn, run_after=T0, max_cost_usd=5)
    run = _claim(conn, T0)["run_id"]
    finish(conn, run, "budget_exhausted", error="error_max_turns", cost_usd=1, session_id=SESSION)
    conn.execute("select ceaseless.reply_job(%s, 'keep going', %s)", (turns, T0))
    assert _job(conn, turns)[0] == "pending"
    conn.execute(
        "update ceaseless.job set state = 'cancelled', finished_at = now() where id = %s", (turns,)
    )

    spent = make_job(conn, run_after=T0, max_cost_usd=0.5)
    run = _claim(conn, T0)["run_id"]
    finish(conn, run, "succeeded", final_message="x", cost_usd=0.5, session_id=SESSION)
    with pytest.raises(psycopg.Error) as caught:
        conn.execute("select ceaseless.reply_job(%s, 'keep going')", (spent,))
    assert caught.value.sqlstate == "CE409"
    assert caught.value.diag.message_primary == (
        f"reply_job: job {spent} has spent its whole max_cost_usd (0.500000 USD): raise it "
        f"first, e.g. select ceaseless.raise_job_budget('{spent}', 1.000000);"
    )


def test_raise_job_budget_below_what_was_spent_is_refused(conn: psycopg.Connection) -> None:
    make_agent(conn)
    job = make_job(conn, run_after=T0, max_cost_usd=0.5)
    run = _claim(conn, T0)["run_id"]
    finish(conn, run, "succeeded", final_message="x", cost_usd=0.75)
    with pytest.raises(psycopg.Error) as caught:
        conn.execute("select ceaseless.raise_job_budget(%s, 0.7)", (job,))
    assert caught.value.sqlstate == "CE422"
    assert caught.value.diag.message_primary == (
        f"raise_job_budget.usd: must be above what job {job} has spent (0.750000 USD); got 0.7"
    )
    with pytest.raises(psycopg.Error) as caught:
        conn.execute("select ceaseless.raise_job_budget(%s, null)", (job,))
    assert caught.value.sqlstate == "CE422"


def test_raise_job_budget_of_a_finished_job_is_refused(conn: psycopg.Connection) -> None:
    make_agent(conn)
    job = make_job(conn, run_after=T0)
    run = _claim(conn, T0)["run_id"]
    finish(conn, run, "succeeded", final_message="x")
    with pytest.raises(psycopg.Error) as caught:
        conn.execute("select ceaseless.raise_job_budget(%s, 3)", (job,))
    assert caught.value.sqlstate == "CE409"


def test_a_job_gets_its_agent_s_ceiling_unless_it_sets_its_own(conn: psycopg.Connection) -> None:
    make_agent(conn, max_cost_usd=2, max_tokens=9000)
    plain = make_job(conn)
    own = make_job(conn, max_cost_usd=0.25)
    assert _job(conn, plain)[1:3] == (Decimal("2.000000"), 9000)
    assert _job(conn, own)[1:3] == (Decimal("0.250000"), 9000)


def _routine_job_ceilings(conn: psycopg.Connection, routine: UUID) -> tuple[Any, ...] | None:
    run = conn.execute("select ceaseless.run_routine(%s)", (routine,)).fetchone()[0]  # type: ignore[index]
    return conn.execute(
        "select max_cost_usd, max_tokens from ceaseless.job where routine_run_id = %s", (run,)
    ).fetchone()


def test_a_routine_s_ceiling_wins_over_its_agent_s(conn: psycopg.Connection) -> None:
    make_agent(conn, max_cost_usd=2)
    routine = make_routine(conn, max_cost_usd=0.5, max_tokens=100)
    assert _routine_job_ceilings(conn, routine) == (Decimal("0.500000"), 100)


def test_a_routine_s_job_gets_its_agent_s_ceiling_where_the_routine_sets_none(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, max_cost_usd=2, max_tokens=9000)
    tokens_only = make_routine(conn, "tokens-only", max_tokens=100)
    neither = make_routine(conn, "neither")
    assert _routine_job_ceilings(conn, tokens_only) == (Decimal("2.000000"), 100)
    assert _routine_job_ceilings(conn, neither) == (Decimal("2.000000"), 9000)


def test_a_job_a_user_inserts_gets_its_agent_s_ceiling_whatever_its_kind(
    conn: psycopg.Connection, login_role: Callable[..., psycopg.Connection]
) -> None:
    # A routine run's job takes its ceilings from the fire, not from the trigger; a user,
    # who cannot name a routine run, gets the agent's default even calling a job a routine's.
    make_agent(conn, max_cost_usd=2, max_tokens=9000)
    alice = login_role("alice")
    job = alice.execute(
        "insert into ceaseless.job (kind, agent, prompt) values ('routine', 'noop', 'x') "
        "returning id"
    ).fetchone()
    assert job is not None
    assert _job(conn, job[0])[1:3] == (Decimal("2.000000"), 9000)


def test_a_loop_node_s_ceiling_wins_over_its_agent_s(conn: psycopg.Connection) -> None:
    make_agent(conn, max_cost_usd=2)
    graph = {
        "nodes": [
            {"id": "a", "agent": "noop", "prompt": "one", "max_cost_usd": 0.3, "max_tokens": 50}
        ],
        "edges": [],
    }
    run = conn.execute(
        "insert into ceaseless.topology_runs (graph, task) values (%s, 't') returning id",
        (json.dumps(graph),),
    ).fetchone()[0]  # type: ignore[index]
    row = conn.execute(
        "select max_cost_usd, max_tokens from ceaseless.job where topology_run_id = %s", (run,)
    ).fetchone()
    assert row == (Decimal("0.300000"), 50)


@pytest.mark.parametrize(
    ("node_field", "message"),
    [
        ({"max_cost_usd": 0}, 'node "a": max_cost_usd must be a number of USD above 0'),
        ({"max_cost_usd": "1"}, 'node "a": max_cost_usd must be a number of USD above 0'),
        ({"max_tokens": -3}, 'node "a": max_tokens must be a positive integer'),
    ],
)
def test_a_loop_node_s_bad_ceiling_is_refused(
    conn: psycopg.Connection, node_field: dict[str, Any], message: str
) -> None:
    make_agent(conn)
    graph = {"nodes": [{"id": "a", "agent": "noop", "prompt": "one", **node_field}], "edges": []}
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(
            "insert into ceaseless.topology_runs (graph, task) values (%s, 't')",
            (json.dumps(graph),),
        )
    assert caught.value.sqlstate == "CE422"
    assert message in (caught.value.diag.message_primary or "")


@pytest.mark.parametrize("column", ["max_cost_usd", "max_tokens"])
def test_a_ceiling_of_zero_is_refused_by_name(conn: psycopg.Connection, column: str) -> None:
    make_agent(conn)
    with pytest.raises(psycopg.errors.CheckViolation) as caught:
        make_job(conn, **{column: 0})
    assert caught.value.diag.constraint_name == f"{column}_positive"


def test_the_spend_left_is_read_by_the_job_s_runs_only(conn: psycopg.Connection) -> None:
    # claim_jobs and finish_runs read a ceiling's job's spend for each such job
    # of a batch: a probe of agent_run_job_idx, whatever the other jobs ran.
    make_agent(conn, max_concurrent=100)
    conn.execute(
        "insert into ceaseless.job (kind, agent, prompt, state, finished_at, attempts) "
        "select 'task', 'noop', 'old', 'delivered', now(), 1 from generate_series(1, 2000)"
    )
    conn.execute(
        "insert into ceaseless.agent_run (job_id, agent, adapter, worker, attempt, outcome, "
        "                                 finished_at, cost_usd) "
        "select j.id, 'noop', 'noop', 'w0', 1, 'succeeded', now(), 0.01 "
        "from ceaseless.job j, generate_series(1, 10)"
    )
    make_job(conn, max_cost_usd=1)
    conn.execute("analyze ceaseless.agent_run")
    with explained(conn) as plans, conn.transaction(force_rollback=True):
        assert _claim(conn, datetime.now(UTC))["budget_usd"] == Decimal(1)
    plan = statement(plans, "select p_max_cost_usd")
    assert not [n for n in nodes(plan) if n["Node Type"] == "Seq Scan"], plan
    assert [n for n in nodes(plan) if n.get("Index Name") == "agent_run_job_idx"], plan
    assert int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"]) <= 4
