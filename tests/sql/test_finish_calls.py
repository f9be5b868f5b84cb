"""finish_runs calls the judges a run may need, and only those: a plain run's finish calls
neither the forge verdict nor the spend-ceiling sum (a twelfth of the whole path's database
time per job when it did, bench/profile.py); a run that needs one is still judged. The claim
likewise reads what is left of a job's ceilings only for a job that has one.

Counted by PostgreSQL itself (track_functions, read in the same transaction): calls, not time.
"""

from __future__ import annotations

import json

import psycopg

from tests.factories import make_agent, make_jobs

RUNS = 50
JUDGES = ("_forge_verdict", "_forge_block", "_job_budget_left", "_session_id_ok")


def _finish_counting(conn: psycopg.Connection, results: list[dict[str, object]]) -> dict[str, int]:
    """finish_runs('w1', results); the calls of each judge it made."""
    with conn.transaction():
        conn.execute("set local track_functions = 'all'")
        conn.execute("select ceaseless.finish_runs('w1', %s::jsonb)", (json.dumps(results),))
        calls = dict(
            conn.execute(
                "select funcname, calls from pg_stat_xact_user_functions "
                "where schemaname = 'ceaseless' and funcname = any(%s)",
                (list(JUDGES),),
            ).fetchall()
        )
    return {judge: int(calls.get(judge, 0)) for judge in JUDGES}


def _runs(conn: psycopg.Connection) -> list[str]:
    make_agent(conn, max_concurrent=RUNS)
    make_jobs(conn, RUNS)
    return [
        str(run)
        for (_, run) in conn.execute(
            "select id, run_id from ceaseless.claim_jobs('w1', %s, p_start => true)", (RUNS,)
        )
    ]


def test_a_plain_runs_finish_calls_no_judge(conn: psycopg.Connection) -> None:
    runs = _runs(conn)
    calls = _finish_counting(conn, [{"run_id": run, "outcome": "succeeded"} for run in runs])
    assert calls == dict.fromkeys(JUDGES, 0)
    delivered = conn.execute(
        "select count(*) from ceaseless.job where state = 'delivered'"
    ).fetchone()
    assert delivered == (RUNS,)


def test_a_run_that_needs_a_judge_still_gets_it(conn: psycopg.Connection) -> None:
    runs = _runs(conn)
    conn.execute("update ceaseless.job set max_cost_usd = 5")
    results = [
        {
            "run_id": run,
            "outcome": "succeeded",
            "final_message": 'done\n```ceaseless\n{"needs_human": "which branch?"}\n```',
            "session_id": "3f0c2a6e-6b7d-4c1e-9a57-0f1e2d3c4b5a",
            "cost_usd": 1,
        }
        for run in runs
    ]
    calls = _finish_counting(conn, results)
    assert calls["_forge_verdict"] == RUNS
    assert calls["_job_budget_left"] == RUNS
    assert calls["_session_id_ok"] == RUNS
    # The block's verdict was applied: every job waits for a person.
    blocked = conn.execute("select count(*) from ceaseless.job where state = 'blocked'").fetchone()
    assert blocked == (RUNS,)


def _claim_counting(conn: psycopg.Connection) -> tuple[int, int]:
    """claim_jobs('w1', RUNS, p_start): the jobs it returned with a budget, and its calls of
    _job_budget_left."""
    with conn.transaction():
        conn.execute("set local track_functions = 'all'")
        claimed = conn.execute(
            "select count(budget_usd) from ceaseless.claim_jobs('w1', %s, p_start => true)",
            (RUNS,),
        ).fetchone()
        calls = conn.execute(
            "select coalesce(sum(calls), 0) from pg_stat_xact_user_functions "
            "where schemaname = 'ceaseless' and funcname = '_job_budget_left'"
        ).fetchone()
    assert claimed is not None and calls is not None
    return int(claimed[0]), int(calls[0])


def test_a_claim_reads_no_budget_for_jobs_without_a_ceiling(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=RUNS)
    make_jobs(conn, RUNS)
    assert _claim_counting(conn) == (0, 0)


def test_a_claim_reads_the_budget_of_jobs_with_a_ceiling(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=RUNS)
    make_jobs(conn, RUNS)
    conn.execute("update ceaseless.job set max_cost_usd = 5")
    assert _claim_counting(conn) == (RUNS, RUNS)
