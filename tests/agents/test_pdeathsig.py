"""An agent must not outlive its listener, even one killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from listener.agents.reaper import CANNOT_EXECUTE
from listener.agents.sandbox import REAPER

from .support import FAKE_AGENT, REPO, alive, kill_quietly, read_pids, wait_until

# A stand-in listener: runs one sleeping agent with a long timeout, and waits.
LISTENER = """
import asyncio, sys
from listener.agents import adapter_for, run_agent
from listener.agents.base import AgentConfig, Task
from listener.enums import Adapter

fake, pid_file = sys.argv[1], sys.argv[2]
env = {"FAKE_AGENT_MODE": "sleep", "FAKE_AGENT_PID_FILE": pid_file}
config = AgentConfig(
    "sleeper",
    Adapter.COMMAND,
    argv=[fake],
    env=env,
    model=None,
    timeout_secs=600,
    kill_grace_secs=10,
)
job = Task(job_id="j", run_id="r", prompt="sleep")
asyncio.run(run_agent(adapter_for(Adapter.COMMAND), config, job, cancel=asyncio.Event()))
"""


def test_agent_dies_when_the_listener_is_killed(tmp_path):
    pid_file = tmp_path / "pids"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    listener = subprocess.Popen(
        [sys.executable, "-c", LISTENER, FAKE_AGENT, str(pid_file)], env=env
    )
    agent_pids: list[int] = []
    try:
        agent_pids = read_pids(pid_file)
        assert alive(agent_pids[0])
        # The agent has its own session, so only the death signal can reach it.
        assert os.getsid(agent_pids[0]) != os.getsid(listener.pid)
        listener.send_signal(signal.SIGKILL)
        listener.wait(timeout=10)
        assert wait_until(lambda: not alive(agent_pids[0]), 3.0), "the agent outlived its listener"
    finally:
        listener.kill()
        listener.wait()
        kill_quietly(agent_pids)


def _keeper(parent: int, *argv: str) -> subprocess.CompletedProcess[bytes]:
    """The keeper as the listener starts it, told its listener is `parent`."""
    return subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            str(REAPER),
            "--parent",
            str(parent),
            "--grace",
            "1",
            "--",
            *argv,
        ],
        timeout=30,
    )


def test_a_keeper_whose_listener_is_already_gone_runs_nothing(tmp_path):
    # The keeper's parent is this process; telling it to expect another one
    # reproduces the race where the listener died before the keeper armed its
    # death signal: the agent must never start.
    started = time.monotonic()
    ran = tmp_path / "ran"
    done = _keeper(os.getpid() + 1_000_000, "/bin/sh", "-c", f"touch {ran}; sleep 30")
    assert done.returncode == CANNOT_EXECUTE
    assert not ran.exists()
    assert time.monotonic() - started < 10


def test_a_keeper_with_its_listener_runs_the_agent(tmp_path):
    ran = tmp_path / "ran"
    done = _keeper(os.getpid(), "/bin/sh", "-c", f"touch {ran}")
    assert done.returncode == 0
    assert ran.exists()
