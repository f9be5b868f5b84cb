"""Replies and spend ceilings end to end: a real listener runs the fake claude, which asks for a
human or spends past its ceiling; a reply (reply_job, `ceaseless job reply`) or a raised ceiling
(raise_job_budget) resumes the same session, checked from the fake's own record of its argv and
its stdin.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg

from tests.e2e.support import FAKES, ListenerProcess, run_cli, scalar, wait_until
from tests.factories import make_agent, make_job, make_routine
from tests.sql.loops import live, make_loop
from tests.sql.topology import graph, job_of, node


def _claude(conn: psycopg.Connection, log: Path, mode: str = "success", **env: str) -> None:
    make_agent(
        conn,
        "claude",
        "claude_code",
        [str(FAKES / "fake_claude")],
        env={"FAKE_CLAUDE_MODE": mode, "FAKE_CLAUDE_ARGV_LOG": str(log), **env},
    )
    conn.commit()


def _invocations(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def _state_becomes(db_url: str, job: UUID, state: str, timeout: float = 30) -> None:
    wait_until(
        lambda: scalar(db_url, "select state from ceaseless.job where id = %s", (job,)) == state,
        timeout,
        lambda: (
            f"job never became {state}: "
            + str(
                scalar(
                    db_url,
                    "select state || ' ' || coalesce(last_error, '') "
                    "from ceaseless.job where id = %s",
                    (job,),
                )
            )
        ),
    )


def _session_of(invocation: dict[str, Any]) -> str:
    return str(invocation["session_id"])


def test_an_agent_asking_for_help_is_resumed_with_the_reply_as_its_prompt(
    conn: psycopg.Connection,
    db_url: str,
    start_listener: Callable[..., ListenerProcess],
    tmp_path: Path,
) -> None:
    log = tmp_path / "claude.jsonl"
    _claude(conn, log, "needs_human_unless_resumed")
    start_listener("--poll-interval", "1")
    job = make_job(conn, agent="claude", prompt="migrate the database")
    conn.commit()
    _state_becomes(db_url, job, "blocked")
    body = scalar(db_url, "select body from ceaseless.notifications where source_id = %s", (job,))
    assert f'ceaseless job reply {job} "your answer"' in body

    done = run_cli(db_url, "job", "reply", str(job), "Use the staging database.")
    assert done.returncode == 0, done.stderr
    _state_becomes(db_url, job, "delivered")

    first, resumed = _invocations(log)
    assert first["stdin"] == "migrate the database"
    assert not any(arg.startswith("--resume") for arg in first["argv"])
    session = _session_of(first)
    assert f"--resume={session}" in resumed["argv"]
    assert resumed["stdin"] == "Use the staging database."
    runs = conn.execute(
        "select outcome, session_id, reply, replied_by is not null from ceaseless.agent_run "
        "where job_id = %s order by started_at",
        (job,),
    ).fetchall()
    assert runs == [
        ("needs_human", session, None, False),
        ("succeeded", session, "Use the staging database.", True),
    ]


def test_a_run_past_max_cost_usd_blocks_and_raising_the_budget_resumes_its_session(
    conn: psycopg.Connection,
    db_url: str,
    start_listener: Callable[..., ListenerProcess],
    tmp_path: Path,
) -> None:
    log = tmp_path / "claude.jsonl"
    # Every run of the fake costs 0.10 USD; its ceiling is 0.05.
    _claude(conn, log, FAKE_CLAUDE_COST="0.10")
    start_listener("--poll-interval", "1")
    job = make_job(conn, agent="claude", prompt="long work", max_cost_usd=0.05)
    conn.commit()
    _state_becomes(db_url, job, "blocked")
    outcome = scalar(db_url, "select outcome from ceaseless.agent_run where job_id = %s", (job,))
    assert outcome == "budget_exhausted"
    subject = scalar(
        db_url, "select subject from ceaseless.notifications where source_id = %s", (job,)
    )
    assert subject == f"job {job} blocked: agent claude spent its budget"

    done = run_cli(db_url, "job", "raise-budget", str(job), "1")
    assert done.returncode == 0, done.stderr
    _state_becomes(db_url, job, "delivered")

    first, resumed = _invocations(log)
    # The CLI's own budget flag carries what is left: all of it, then 1 - 0.10.
    assert first["argv"][-2:] == ["--max-budget-usd", "0.050000"]
    assert resumed["argv"][-2:] == ["--max-budget-usd", "0.900000"]
    assert f"--resume={_session_of(first)}" in resumed["argv"]
    assert resumed["stdin"].startswith("Your spend ceiling was raised (1 USD).")


def test_a_run_past_max_tokens_blocks_and_raising_the_tokens_resumes_its_session(
    conn: psycopg.Connection,
    db_url: str,
    start_listener: Callable[..., ListenerProcess],
    tmp_path: Path,
) -> None:
    # Claude Code has no token ceiling flag: the listener watches the usage the
    # stream reports, and finish_runs judges the run on it (6,357 tokens a run).
    log = tmp_path / "claude.jsonl"
    _claude(conn, log)
    start_listener("--poll-interval", "1")
    job = make_job(conn, agent="claude", prompt="long work", max_tokens=1000)
    conn.commit()
    _state_becomes(db_url, job, "blocked")
    assert (
        scalar(db_url, "select outcome from ceaseless.agent_run where job_id = %s", (job,))
        == "budget_exhausted"
    )
    conn.execute("select ceaseless.raise_job_budget(%s, null, 100000)", (job,))
    conn.commit()
    _state_becomes(db_url, job, "delivered")
    first, resumed = _invocations(log)
    assert "--max-budget-usd" not in first["argv"]
    assert f"--resume={_session_of(first)}" in resumed["argv"]


def test_a_reply_committed_while_its_listener_dies_is_not_lost(
    conn: psycopg.Connection,
    db_url: str,
    start_listener: Callable[..., ListenerProcess],
    tmp_path: Path,
) -> None:
    log = tmp_path / "claude.jsonl"
    _claude(conn, log, "needs_human_unless_resumed")
    first = start_listener("--poll-interval", "1", worker_id="first")
    job = make_job(conn, agent="claude", prompt="migrate the database")
    conn.commit()
    _state_becomes(db_url, job, "blocked")

    # Frozen, it cannot claim the job the reply sends back to pending; killed
    # after the reply committed, before any claim.
    os.kill(first.proc.pid, signal.SIGSTOP)
    conn.execute("select ceaseless.reply_job(%s, 'Use the staging database.')", (job,))
    conn.commit()
    first.kill()
    assert scalar(db_url, "select count(*) from ceaseless.agent_run where job_id = %s", (job,)) == 1

    start_listener("--poll-interval", "1", worker_id="second")
    _state_becomes(db_url, job, "delivered")
    asked, resumed = _invocations(log)
    assert f"--resume={_session_of(asked)}" in resumed["argv"]
    assert resumed["stdin"] == "Use the staging database."
    assert (
        scalar(
            db_url,
            "select worker from ceaseless.agent_run where job_id = %s and reply is not null",
            (job,),
        )
        == "second"
    )


def _reply_and_await(db_url: str, job: UUID, runs: str, run: UUID, status: str) -> None:
    """Reply to the blocked job from the command line, then wait for the run it belongs to
    (a row of ceaseless.`runs`) to reach `status`."""
    done = run_cli(db_url, "job", "reply", str(job), "Use the staging database.")
    assert done.returncode == 0, done.stderr
    query = f"select status from ceaseless.{runs} where id = %s"
    wait_until(
        lambda: scalar(db_url, query, (run,)) == status,
        30,
        lambda: f"the run is {scalar(db_url, query, (run,))} after the reply, not {status}",
    )


def test_a_loop_node_asking_for_help_waits_and_its_iteration_goes_on_after_the_reply(
    conn: psycopg.Connection,
    db_url: str,
    start_listener: Callable[..., ListenerProcess],
    tmp_path: Path,
) -> None:
    log = tmp_path / "claude.jsonl"
    _claude(conn, log, "needs_human_unless_resumed")
    loop = make_loop(
        conn, g=graph([node("A", "claude")]), policy={"kind": "iters", "spec": {"n": 1}}
    )
    conn.commit()
    start_listener("--poll-interval", "1")
    conn.execute("select ceaseless.run_loop(%s)", (loop,))
    conn.commit()
    run = live(conn, loop)
    conn.commit()
    job = job_of(conn, run, "A")
    conn.commit()
    _state_becomes(db_url, job, "blocked")
    # The iteration waits with its node: still the loop's live one.
    assert (
        scalar(
            db_url,
            "select r.status || ' ' || n.state from ceaseless.topology_runs r "
            "join ceaseless.topology_nodes n on n.topology_run_id = r.id where r.id = %s",
            (run,),
        )
        == "running blocked"
    )

    _reply_and_await(db_url, job, "topology_runs", run, "succeeded")
    first, resumed = _invocations(log)
    assert f"--resume={_session_of(first)}" in resumed["argv"]
    assert resumed["stdin"] == "Use the staging database."


def test_a_routine_run_waits_for_the_reply_and_is_counted_once(
    conn: psycopg.Connection,
    db_url: str,
    start_listener: Callable[..., ListenerProcess],
    tmp_path: Path,
) -> None:
    log = tmp_path / "claude.jsonl"
    _claude(conn, log, "needs_human_unless_resumed")
    routine = make_routine(conn, agent="claude", action_type="full_job")
    conn.commit()
    start_listener("--poll-interval", "1")
    run = scalar(db_url, "select ceaseless.run_routine(%s)", (routine,))
    job = scalar(db_url, "select job_id from ceaseless.routine_runs where id = %s", (run,))
    _state_becomes(db_url, job, "blocked")
    assert scalar(db_url, "select status from ceaseless.routine_runs where id = %s", (run,)) == (
        "running"
    )

    _reply_and_await(db_url, job, "routine_runs", run, "ok")
    assert scalar(db_url, "select run_count from ceaseless.routines where id = %s", (routine,)) == 1
