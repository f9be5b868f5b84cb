"""INSERT → NOTIFY → listener → agent → rows, for the command and claude_code adapters."""

from __future__ import annotations

import json
from collections.abc import Callable

import psycopg
import pytest

from tests.e2e.support import FAKES, ListenerProcess, wait_until
from tests.factories import make_agent, make_job


def _run_row(conn: psycopg.Connection, job_id: object) -> dict[str, object]:
    cur = conn.execute("select * from ceaseless.agent_run where job_id = %s", (job_id,))
    row = cur.fetchone()
    assert row is not None and cur.description is not None
    return {col.name: value for col, value in zip(cur.description, row, strict=True)}


def _wait_finished(conn: psycopg.Connection, job_id: object, timeout: float = 15) -> str:
    def done() -> bool:
        row = conn.execute(
            "select finished_at from ceaseless.job where id = %s", (job_id,)
        ).fetchone()
        return row is not None and row[0] is not None

    wait_until(done, timeout, f"job {job_id} did not finish")
    row = conn.execute("select state from ceaseless.job where id = %s", (job_id,)).fetchone()
    assert row is not None
    return row[0]


def test_inserted_job_is_delivered_by_notify_long_before_the_next_poll(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    # The listener polls once an hour here, so a delivery within the deadline
    # was woken by the INSERT's NOTIFY. The deadline is wide on purpose: how
    # fast an agent process starts on a loaded machine is a benchmark's
    # business (bench/), not this test's.
    make_agent(
        conn, "script", "command", [str(FAKES / "fake_agent")], env={"FAKE_AGENT_MODE": "json"}
    )
    start_listener("--poll-interval", "3600")
    job = make_job(conn, agent="script", prompt="summarise the logs")
    wait_until(
        lambda: (
            conn.execute("select state from ceaseless.job where id = %s", (job,)).fetchone()
            == ("delivered",)
        ),
        60.0,
        "not delivered within 60 s of the INSERT, with the next poll an hour away",
    )
    run = _run_row(conn, job)
    assert run["outcome"] == "succeeded"
    assert run["finished_at"] is not None and run["exit_status"] == 0
    assert "summarise the logs" in str(run["final_message"])
    assert run["tokens_in"] is not None and run["cost_usd"] is not None


def test_failing_command_is_retried_and_then_failed(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(
        conn,
        "script",
        "command",
        [str(FAKES / "fake_agent")],
        env={"FAKE_AGENT_MODE": "fail"},
        max_attempts=1,
    )
    start_listener("--poll-interval", "60")
    job = make_job(conn, agent="script")
    assert _wait_finished(conn, job) == "failed"
    run = _run_row(conn, job)
    assert run["outcome"] == "failed" and run["exit_status"] == 3


CLAUDE_CASES = {
    "success": ("succeeded", "delivered"),
    "max_turns": ("budget_exhausted", "blocked"),
    "output_limit": ("output_budget_exhausted", "blocked"),
    "error": ("failed", "failed"),
}


@pytest.mark.parametrize("mode", list(CLAUDE_CASES))
def test_claude_stream_json_is_recorded_on_the_run(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess], mode: str
) -> None:
    make_agent(
        conn,
        "claude",
        "claude_code",
        [str(FAKES / "fake_claude")],
        env={"FAKE_CLAUDE_MODE": mode, "FAKE_CLAUDE_API_KEY_SOURCE": "none"},
        max_attempts=1,
    )
    start_listener("--poll-interval", "60")
    job = make_job(conn, agent="claude", prompt="fix the flaky test", max_turns=3)
    outcome, state = CLAUDE_CASES[mode]
    assert _wait_finished(conn, job) == state
    run = _run_row(conn, job)
    assert run["outcome"] == outcome
    assert run["billing"] == "subscription"
    assert run["session_id"]
    if mode == "success":
        assert run["tokens_in"] and run["tokens_out"] and run["cost_usd"] is not None
        assert "fix the flaky test" in str(run["final_message"])


def test_claude_api_key_billing_is_recorded(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(
        conn,
        "claude",
        "claude_code",
        [str(FAKES / "fake_claude")],
        env={"FAKE_CLAUDE_MODE": "success", "FAKE_CLAUDE_API_KEY_SOURCE": "ANTHROPIC_API_KEY"},
    )
    start_listener("--poll-interval", "60")
    job = make_job(conn, agent="claude")
    assert _wait_finished(conn, job) == "delivered"
    assert _run_row(conn, job)["billing"] == "api_key"


def test_claude_rate_limit_sets_run_after_to_the_reset_time(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(
        conn,
        "claude",
        "claude_code",
        [str(FAKES / "fake_claude")],
        env={"FAKE_CLAUDE_MODE": "rate_limit"},
    )
    start_listener("--poll-interval", "60")
    job = make_job(conn, agent="claude")
    wait_until(
        lambda: (
            conn.execute(
                "select count(*) from ceaseless.agent_run "
                "where job_id = %s and finished_at is not null",
                (job,),
            ).fetchone()
            == (1,)
        ),
        15,
    )
    run = _run_row(conn, job)
    assert run["outcome"] == "rate_limited" and run["rate_limit_reset_at"] is not None
    row = conn.execute(
        "select state, run_after from ceaseless.job where id = %s", (job,)
    ).fetchone()
    assert row is not None
    assert row[0] == "pending" and row[1] == run["rate_limit_reset_at"]
    paused = conn.execute("select paused_until from ceaseless.lane_pauses where agent = 'claude'")
    assert paused.fetchone() == (run["rate_limit_reset_at"],)


def test_prompt_reaches_the_agent_on_stdin_and_env_names_the_job(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(
        conn, "script", "command", [str(FAKES / "fake_agent")], env={"FAKE_AGENT_MODE": "ok"}
    )
    start_listener("--poll-interval", "60")
    job = make_job(conn, agent="script", prompt=json.dumps({"multi": "line\nprompt"}))
    assert _wait_finished(conn, job) == "delivered"
    assert "line\\nprompt" in str(_run_row(conn, job)["final_message"])


def test_registry_change_reaches_a_running_listener_without_restart(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(
        conn,
        "script",
        "command",
        [str(FAKES / "fake_agent")],
        env={"FAKE_AGENT_MODE": "fail"},
        max_attempts=1,
    )
    listener = start_listener("--poll-interval", "60")
    conn.execute('update ceaseless.agents set env = \'{"FAKE_AGENT_MODE": "json"}\'')
    listener.wait_for_event("config.loaded", count=3)
    job = make_job(conn, agent="script", prompt="after the change")
    assert _wait_finished(conn, job) == "delivered"
