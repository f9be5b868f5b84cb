"""A job whose listener died mid-run resumes the same agent session on its next attempt."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import psycopg

from tests.e2e.support import FAKES, ListenerProcess, scalar, wait_until
from tests.factories import make_agent, make_job


def test_killed_listener_s_job_resumes_its_session_elsewhere(
    conn: psycopg.Connection,
    db_url: str,
    start_listener: Callable[..., ListenerProcess],
    tmp_path: Path,
) -> None:
    argv_log = tmp_path / "claude-argv.jsonl"
    make_agent(
        conn,
        "claude",
        "claude_code",
        [str(FAKES / "fake_claude")],
        env={"FAKE_CLAUDE_MODE": "hang_unless_resumed", "FAKE_CLAUDE_ARGV_LOG": str(argv_log)},
    )
    first = start_listener("--lease-secs", "3", worker_id="first")
    job = make_job(conn, agent="claude", prompt="long work")

    # The session is on the run while the agent still runs: recorded from its
    # init line, not at the end.
    wait_until(
        lambda: (
            scalar(
                db_url,
                "select session_id from ceaseless.agent_run "
                "where job_id = %s and finished_at is null",
                (job,),
            )
            is not None
        ),
        15,
        "the running agent's session was never recorded",
    )
    session = scalar(db_url, "select session_id from ceaseless.agent_run where job_id = %s", (job,))
    first.kill()

    start_listener("--lease-secs", "3", "--poll-interval", "1", worker_id="second")
    listening = conn.execute(
        "select worker from ceaseless.listener_status where listening order by worker"
    ).fetchall()
    assert listening == [("second",)]
    wait_until(
        lambda: (
            scalar(db_url, "select state from ceaseless.job where id = %s", (job,)) == "delivered"
        ),
        30,
        "the rescued job was never delivered",
    )

    invocations = [json.loads(line) for line in argv_log.read_text().splitlines()]
    assert len(invocations) == 2
    first_argv = invocations[0]["argv"]
    assert invocations[0]["session_id"] == session
    assert not any(arg.startswith("--resume") for arg in first_argv)
    # One argv element, so no value can be read as a flag of its own.
    resumed = invocations[1]["argv"]
    assert f"--resume={session}" in resumed and "--resume" not in resumed
    runs = conn.execute(
        "select worker, outcome, session_id from ceaseless.agent_run where job_id = %s "
        "order by started_at",
        (job,),
    ).fetchall()
    assert runs == [("first", "lease_expired", session), ("second", "succeeded", session)]
