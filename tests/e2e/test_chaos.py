"""A listener killed with SIGKILL loses nothing and leaves nothing running."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import psycopg

from tests.e2e.support import FAKES, ListenerProcess, pid_alive, wait_until
from tests.factories import STARTED_AGENT_TIMEOUT_SECS, make_agent, make_job


def test_killed_listener_takes_its_agent_down_and_the_job_runs_again_elsewhere(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess], tmp_path: Path
) -> None:
    pid_file = tmp_path / "agent.pids"
    make_agent(
        conn,
        "script",
        "command",
        [str(FAKES / "fake_agent")],
        env={"FAKE_AGENT_MODE": "sleep", "FAKE_AGENT_PID_FILE": str(pid_file)},
    )
    first = start_listener("--poll-interval", "60", "--lease-secs", "2")
    job = make_job(conn, agent="script")
    wait_until(pid_file.exists, 10, "the agent never started")
    agent_pid = int(pid_file.read_text().split()[0])
    assert pid_alive(agent_pid)

    first.kill()
    wait_until(lambda: not pid_alive(agent_pid), 5, "agent survived its listener's SIGKILL")

    # The second listener's agent succeeds, so the job can finish.
    conn.execute('update ceaseless.agents set env = \'{"FAKE_AGENT_MODE": "ok"}\'')
    start_listener("--poll-interval", "60", "--lease-secs", "2", worker_id="listener-2")
    wait_until(
        lambda: (
            conn.execute("select state from ceaseless.job where id = %s", (job,)).fetchone()
            == ("delivered",)
        ),
        20,
    )

    runs = conn.execute(
        "select worker, outcome, started_at, finished_at from ceaseless.agent_run "
        "where job_id = %s order by started_at",
        (job,),
    ).fetchall()
    assert [(r[0], r[1]) for r in runs] == [
        ("listener-1", "lease_expired"),
        ("listener-2", "succeeded"),
    ]
    # Never two at once: the first run ended before the second began.
    assert runs[0][3] <= runs[1][2]


def test_two_listeners_deliver_every_one_of_2000_jobs_exactly_once(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(conn, max_concurrent=1000)
    one = start_listener("--poll-interval", "60", "--concurrency", "100", worker_id="one")
    two = start_listener("--poll-interval", "60", "--concurrency", "100", worker_id="two")
    conn.execute(
        "insert into ceaseless.job (kind, agent, prompt) "
        "select 'task', 'noop', 'n' || g from generate_series(1, 2000) g"
    )
    wait_until(
        lambda: (
            conn.execute("select count(*) from ceaseless.job where state = 'delivered'").fetchone()
            == (2000,)
        ),
        60,
        "not all 2000 delivered",
    )
    per_job = conn.execute(
        "select count(r.id) from ceaseless.job j "
        "left join ceaseless.agent_run r on r.job_id = j.id "
        "group by j.id"
    ).fetchall()
    assert sorted({count for (count,) in per_job}) == [1]
    workers = dict(
        conn.execute("select worker, count(*) from ceaseless.agent_run group by worker").fetchall()
    )
    assert sum(workers.values()) == 2000
    assert one.proc.poll() is None and two.proc.poll() is None


def test_timeout_kills_the_whole_process_group_and_records_timed_out(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess], tmp_path: Path
) -> None:
    pid_file = tmp_path / "agent.pids"
    make_agent(
        conn,
        "slow",
        "command",
        [str(FAKES / "fake_agent")],
        timeout_secs=STARTED_AGENT_TIMEOUT_SECS,
        kill_grace_secs=1,
        max_attempts=1,
        env={"FAKE_AGENT_MODE": "spawn_child_and_sleep", "FAKE_AGENT_PID_FILE": str(pid_file)},
    )
    start_listener("--poll-interval", "60")
    job = make_job(conn, agent="slow")
    wait_until(
        lambda: (
            conn.execute("select state from ceaseless.job where id = %s", (job,)).fetchone()
            == ("failed",)
        ),
        15,
    )
    outcome = conn.execute(
        "select outcome from ceaseless.agent_run where job_id = %s", (job,)
    ).fetchone()
    assert outcome == ("timed_out",)
    pids = [int(p) for p in pid_file.read_text().split()]
    assert len(pids) == 2
    wait_until(lambda: not any(pid_alive(p) for p in pids), 3, "an agent process outlived it")


def test_cancel_job_stops_the_running_agent(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess], tmp_path: Path
) -> None:
    pid_file = tmp_path / "agent.pids"
    make_agent(
        conn,
        "script",
        "command",
        [str(FAKES / "fake_agent")],
        env={"FAKE_AGENT_MODE": "sleep", "FAKE_AGENT_PID_FILE": str(pid_file)},
    )
    listener = start_listener("--poll-interval", "60")
    job = make_job(conn, agent="script")
    wait_until(pid_file.exists, 10, "the agent never started")
    agent_pid = int(pid_file.read_text().split()[0])
    started = time.monotonic()
    conn.execute("select ceaseless.cancel_job(%s)", (job,))
    wait_until(lambda: not pid_alive(agent_pid), 5, "cancelled agent kept running")
    assert time.monotonic() - started < 5
    row = conn.execute(
        "select j.state, r.outcome from ceaseless.job j join ceaseless.agent_run r "
        "on r.job_id = j.id where j.id = %s",
        (job,),
    ).fetchone()
    assert row == ("cancelled", "cancelled")
    listener.wait_for_event("job.cancel_requested")


def test_sigterm_lets_running_agents_finish_within_the_grace_period(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess], tmp_path: Path
) -> None:
    pid_file = tmp_path / "agent.pids"
    make_agent(
        conn,
        "script",
        "command",
        [str(FAKES / "fake_agent")],
        env={
            "FAKE_AGENT_MODE": "sleep",
            "FAKE_AGENT_SLEEP": "1",
            "FAKE_AGENT_PID_FILE": str(pid_file),
        },
    )
    listener = start_listener("--poll-interval", "60", "--shutdown-grace", "10")
    job = make_job(conn, agent="script")
    # The agent's own pid file, not the job's state: the state is `running` from the
    # claim's commit, and a claim whose reply the listener has not read yet when told to
    # stop is released, not started (no new claims after SIGTERM).
    wait_until(pid_file.exists, 10, "the agent never started")
    assert listener.stop() == 0
    assert conn.execute("select state from ceaseless.job where id = %s", (job,)).fetchone() == (
        "delivered",
    )


def test_sigterm_releases_agents_that_outlive_the_grace_period(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess], tmp_path: Path
) -> None:
    pid_file = tmp_path / "agent.pids"
    make_agent(
        conn,
        "script",
        "command",
        [str(FAKES / "fake_agent")],
        kill_grace_secs=1,
        env={"FAKE_AGENT_MODE": "sleep", "FAKE_AGENT_PID_FILE": str(pid_file)},
    )
    listener = start_listener("--poll-interval", "60", "--shutdown-grace", "0.5")
    job = make_job(conn, agent="script")
    wait_until(pid_file.exists, 10, "the agent never started")
    assert listener.stop() == 0
    assert not pid_alive(int(pid_file.read_text().split()[0]))
    row = conn.execute(
        "select state, attempts, claimed_by from ceaseless.job where id = %s", (job,)
    ).fetchone()
    assert row == ("pending", 0, None)
    outcome = conn.execute("select outcome from ceaseless.agent_run where job_id = %s", (job,))
    assert outcome.fetchone() == ("cancelled",)
