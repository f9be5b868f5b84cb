"""No descendant of an agent outlives its run: timeout, cancel, its own exit, and a
listener killed with SIGKILL, even descendants that setsid() or fork twice.

Each test runs with the bubblewrap sandbox (the pid namespace ends them) and
without it (the keeper, a child subreaper, ends them).
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import psycopg
import pytest

from listener.agents import adapter_for, run_agent
from listener.agents.base import RunResult
from listener.agents.sandbox import Isolation
from listener.enums import Adapter, Outcome
from tests.e2e.support import ListenerProcess, wait_until
from tests.factories import make_agent, make_job

from . import support
from .isolation import (
    FAKE_ESCAPER,
    MODES,
    escapees_started,
    escaper_env,
    isolate,
    job_directory,
    new_token,
    processes_with,
    workspace,
)
from .support import agent, kill_quietly, task


def _escaper(ws: Path, token: str, *, then: str = "sleep", timeout_secs: int = 60):
    return agent(
        Adapter.COMMAND, [FAKE_ESCAPER], env=escaper_env(ws, token, then), timeout_secs=timeout_secs
    )


def _assert_none_left(token: str) -> None:
    gone = support.wait_until(lambda: not processes_with(token), 5.0)
    left = processes_with(token)
    kill_quietly(left)
    assert gone, f"descendants of the agent outlived it: pids {left}"


@pytest.mark.parametrize("mode", MODES)
def test_escapees_die_on_timeout(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    isolation = isolate(monkeypatch, mode)
    token = new_token()
    with workspace() as ws:
        config = _escaper(ws, token, timeout_secs=4)
        result = asyncio.run(_run(config, ws, isolation))
        assert escapees_started(ws), "the escapees never ran; the test proves nothing"
    assert result.outcome == Outcome.TIMED_OUT
    _assert_none_left(token)


@pytest.mark.parametrize("mode", MODES)
def test_escapees_die_on_cancel(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    isolation = isolate(monkeypatch, mode)
    token = new_token()

    async def scenario(ws: Path) -> RunResult:
        cancel = asyncio.Event()
        runner = asyncio.create_task(_run(_escaper(ws, token), ws, isolation, cancel))
        for _ in range(500):
            if escapees_started(ws):
                break
            await asyncio.sleep(0.02)
        assert escapees_started(ws), "the escapees never ran"
        cancel.set()
        return await runner

    with workspace() as ws:
        result = asyncio.run(scenario(ws))
    assert result.outcome == Outcome.CANCELLED
    _assert_none_left(token)


@pytest.mark.parametrize("mode", MODES)
def test_escapees_die_when_the_agent_exits_by_itself(
    monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    isolation = isolate(monkeypatch, mode)
    token = new_token()
    with workspace() as ws:
        result = asyncio.run(_run(_escaper(ws, token, then="exit"), ws, isolation))
    assert result.outcome == Outcome.SUCCEEDED, result.error
    _assert_none_left(token)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_escapees_die_when_the_listener_is_killed(
    monkeypatch: pytest.MonkeyPatch, mode: str, conn: psycopg.Connection, db_url: str
) -> None:
    isolate(monkeypatch, mode)  # the listener inherits this process's environment
    token = new_token()
    with workspace() as ws:
        # The escapees mark their start in the job's own directory, their cwd.
        make_agent(conn, "escaper", "command", [FAKE_ESCAPER], env=escaper_env(Path("."), token))
        listener = ListenerProcess(db_url, "--poll-interval", "60", "--workdir", str(ws)).ready()
        try:
            own = job_directory(ws, make_job(conn, agent="escaper"))
            wait_until(lambda: escapees_started(own), 20, lambda: f"no escapees: {listener.lines}")
            assert processes_with(token), "the escapees should be running"
            listener.proc.send_signal(signal.SIGKILL)
            listener.proc.wait(10)
            _assert_none_left(token)
        finally:
            listener.stop(timeout=10)


async def _run(
    config, ws: Path, isolation: Isolation, cancel: asyncio.Event | None = None
) -> RunResult:
    return await run_agent(
        adapter_for(config.adapter),
        config,
        task(cwd=str(ws)),
        cancel=cancel or asyncio.Event(),
        isolation=isolation,
    )


def test_agents_that_end_at_once_are_never_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    # The keeper once lost the exit status of an agent that ended while it was
    # still starting it, and then waited for it until the timeout.
    isolation = isolate(monkeypatch, "no_sandbox")
    config = agent(Adapter.COMMAND, ["cat"], timeout_secs=10)

    async def batch() -> list[RunResult]:
        return await asyncio.gather(
            *(
                run_agent(
                    adapter_for(Adapter.COMMAND),
                    config,
                    task(f"hello {i}"),
                    cancel=asyncio.Event(),
                    isolation=isolation,
                )
                for i in range(25)
            )
        )

    for _ in range(4):
        results = asyncio.run(batch())
        assert [r.outcome for r in results] == [Outcome.SUCCEEDED] * 25, [
            r.error for r in results if r.outcome != Outcome.SUCCEEDED
        ]
