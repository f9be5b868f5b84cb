"""AgentWatch against real processes: it finds the agents of one test, tells which
process spawned each, and reports a job running on two spawners at once."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Mapping

from tests.chaos.agents import AgentRecord, AgentWatch, find_overlaps

# A stand-in for a listener: runs `copies` agents at once with the given environment,
# which the wrapper itself does not have; or, with `leak_for`, starts one and sleeps
# that long without reaping it.
_SPAWNER = """
import json, os, subprocess, sys, time
label, mode, env, *argv = sys.argv[1:]
env = {**os.environ, **json.loads(env)}
if mode.startswith("leak:"):
    subprocess.Popen(argv, env=env)
    time.sleep(float(mode[5:]))
else:
    agents = [subprocess.Popen(argv, env=env) for _ in range(int(mode))]
    sys.exit(max(agent.wait() for agent in agents))
"""


def spawner(
    label: str,
    env: Mapping[str, str],
    *argv: str,
    copies: int = 1,
    leak_for: float | None = None,
) -> subprocess.Popen[bytes]:
    mode = str(copies) if leak_for is None else f"leak:{leak_for}"
    return subprocess.Popen(
        [sys.executable, "-c", _SPAWNER, label, mode, json.dumps(dict(env)), *argv]
    )


def agent_env(watch: AgentWatch, job_id: str, **extra: str) -> dict[str, str]:
    return {
        **watch.match,
        "CEASELESS_JOB_ID": job_id,
        "CEASELESS_RUN_ID": f"run-{uuid.uuid4().hex[:8]}",
        **extra,
    }


def record(pid: int, spawner: int, first_seen: float, last_seen: float) -> AgentRecord:
    return AgentRecord(
        pid=pid,
        start_ticks=pid,
        job_id="job",
        run_id=None,
        env={},
        cmdline=(),
        ppid=spawner,
        spawner=spawner,
        spawner_start_ticks=spawner,
        spawner_cmdline=(),
        root=True,
        first_seen=first_seen,
        last_seen=last_seen,
        exited=True,
    )


def test_one_job_on_two_spawners_at_once_is_an_overlap(agent_watch: AgentWatch) -> None:
    job = str(uuid.uuid4())
    first_env = agent_env(agent_watch, job, CEASELESS_WORKER="listener-a")
    first = spawner("listener-a", first_env, "sleep", "2")
    agent_watch.wait_for(lambda records: len(records) == 1, message="the first agent")
    second = spawner("listener-b", agent_env(agent_watch, job), "sleep", "0.5")
    assert first.wait(10) == 0 and second.wait(10) == 0
    agent_watch.sync()

    a, b = agent_watch.agents(job)
    assert (a.exited, b.exited) == (True, True)
    assert a.spawner == first.pid and b.spawner == second.pid
    assert a.spawner_cmdline[3] == "listener-a" and b.spawner_cmdline[3] == "listener-b"
    assert a.cmdline == ("sleep", "2")
    assert (a.run_id, a.env) == (first_env["CEASELESS_RUN_ID"], {"CEASELESS_WORKER": "listener-a"})
    assert b.env == {}
    [overlap] = agent_watch.overlaps()
    assert (overlap.job_id, overlap.first, overlap.second) == (job, a, b)
    assert overlap.end - overlap.start > 0.2


def test_consecutive_runs_on_two_spawners_do_not_overlap(agent_watch: AgentWatch) -> None:
    job = str(uuid.uuid4())
    assert spawner("listener-a", agent_env(agent_watch, job), "sleep", "0.3").wait(10) == 0
    agent_watch.sync()
    assert spawner("listener-b", agent_env(agent_watch, job), "sleep", "0.3").wait(10) == 0
    agent_watch.sync()

    a, b = agent_watch.agents(job)
    assert a.spawner != b.spawner
    assert a.last_seen < b.first_seen
    assert agent_watch.overlaps() == []


def test_children_of_an_agent_never_overlap_it(agent_watch: AgentWatch) -> None:
    job = str(uuid.uuid4())
    shell = "sleep 1 & sleep 1; wait"
    assert spawner("listener-a", agent_env(agent_watch, job), "sh", "-c", shell).wait(10) == 0
    agent_watch.sync()

    records = agent_watch.records(job)
    [agent] = [r for r in records if r.root]
    children = [r for r in records if not r.root]
    assert agent.cmdline == ("sh", "-c", shell)
    assert [child.cmdline for child in children] == [("sleep", "1"), ("sleep", "1")]
    assert {child.ppid for child in children} == {agent.pid}
    assert {child.spawner for child in children} == {agent.spawner}
    assert agent_watch.overlaps(across_spawners=False) == []


def test_two_agents_of_one_spawner_overlap_only_when_asked(agent_watch: AgentWatch) -> None:
    job = str(uuid.uuid4())
    env = agent_env(agent_watch, job)
    assert spawner("listener-a", env, "sleep", "1", copies=2).wait(10) == 0
    agent_watch.sync()

    a, b = agent_watch.agents(job)
    assert a.spawner == b.spawner
    assert agent_watch.overlaps() == []
    [overlap] = agent_watch.overlaps(across_spawners=False)
    assert {overlap.first.pid, overlap.second.pid} == {a.pid, b.pid}


def test_only_processes_with_the_job_and_the_marker_are_recorded(
    agent_watch: AgentWatch,
) -> None:
    job = str(uuid.uuid4())
    others = [
        spawner("other-test", {"CEASELESS_JOB_ID": job, "CHAOS_TAG": "other"}, "sleep", "0.5"),
        spawner("no-job", dict(agent_watch.match), "sleep", "0.5"),
        spawner("ours", agent_env(agent_watch, job), "sleep", "0.5"),
    ]
    assert [process.wait(10) for process in others] == [0, 0, 0]
    agent_watch.sync()
    [ours] = agent_watch.records()
    assert ours.spawner == others[2].pid


def test_an_unreaped_agent_counts_as_exited(agent_watch: AgentWatch) -> None:
    job = str(uuid.uuid4())
    parent = spawner("listener-a", agent_env(agent_watch, job), "sleep", "0.3", leak_for=30)
    try:
        [agent] = agent_watch.wait_for(
            lambda records: len(records) == 1 and records[0].exited,
            message="the agent's exit",
        )
        # It has exited but is not reaped: a zombie, still listed in /proc.
        with open(f"/proc/{agent.pid}/stat") as stat:
            assert stat.read().rsplit(")", 1)[1].split()[0] == "Z"
        assert parent.poll() is None
    finally:
        parent.kill()
        parent.wait(10)


def test_overlap_needs_the_intervals_to_cross() -> None:
    a = record(1, spawner=10, first_seen=100.0, last_seen=101.0)
    touching = record(2, spawner=20, first_seen=101.0, last_seen=102.0)
    crossing = record(3, spawner=30, first_seen=100.5, last_seen=103.0)
    same_spawner = record(4, spawner=10, first_seen=100.2, last_seen=100.8)

    found = {(o.first.pid, o.second.pid, o.start, o.end) for o in find_overlaps([a, touching])}
    assert found == set()
    found = {
        (o.first.pid, o.second.pid, o.start, o.end)
        for o in find_overlaps([a, touching, crossing, same_spawner])
    }
    assert found == {(1, 3, 100.5, 101.0), (4, 3, 100.5, 100.8), (3, 2, 101.0, 102.0)}
    assert (1, 4, 100.2, 100.8) in {
        (o.first.pid, o.second.pid, o.start, o.end)
        for o in find_overlaps([a, same_spawner], across_spawners=False)
    }
