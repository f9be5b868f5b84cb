"""An agent must not outlive its listener, even one killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from listener.agents.process import ORPHANED_EXIT_STATUS, _die_with_parent

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


def test_a_child_whose_parent_is_already_gone_does_not_run():
    # The child's parent is this process; telling it to expect another one
    # reproduces the race where the parent died before prctl took effect.
    started = time.monotonic()
    done = subprocess.run(["sleep", "30"], preexec_fn=_die_with_parent(os.getpid() + 1_000_000))
    assert done.returncode == ORPHANED_EXIT_STATUS
    assert time.monotonic() - started < 10


def test_a_child_with_its_parent_runs_normally():
    done = subprocess.run(["true"], preexec_fn=_die_with_parent(os.getpid()))
    assert done.returncode == 0
