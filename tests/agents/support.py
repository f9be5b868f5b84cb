"""Shared helpers for the agent tests: fake agents, configs, running, process checks."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from listener.agents import adapter_for, run_agent
from listener.agents.base import AgentConfig, OutputParser, RunResult, Task
from listener.enums import Adapter

REPO = Path(__file__).resolve().parents[2]
FAKES = REPO / "tests" / "fakes"
FAKE_CLAUDE = str(FAKES / "fake_claude")
FAKE_OPENCODE = str(FAKES / "fake_opencode")
FAKE_AGENT = str(FAKES / "fake_agent")


def agent(
    kind: Adapter,
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    model: str | None = None,
    timeout_secs: int = 30,
    kill_grace_secs: int = 1,
) -> AgentConfig:
    return AgentConfig(
        name=f"test-{kind.value}",
        adapter=kind,
        argv=argv,
        env=env or {},
        model=model,
        timeout_secs=timeout_secs,
        kill_grace_secs=kill_grace_secs,
    )


def task(prompt: str = "please do the thing", **fields: Any) -> Task:
    return Task(job_id="job-1", run_id="run-1", prompt=prompt, **fields)


def run(config: AgentConfig, job: Task | None = None, **kwargs: Any) -> RunResult:
    """Run one agent through its adapter in a fresh event loop."""

    async def scenario() -> RunResult:
        cancel = kwargs.pop("cancel", None) or asyncio.Event()
        return await run_agent(
            adapter_for(config.adapter), config, job or task(), cancel=cancel, **kwargs
        )

    return asyncio.run(scenario())


def feed(parser: OutputParser, lines: Iterable[str | bytes | dict[str, Any]]) -> OutputParser:
    for line in lines:
        if isinstance(line, dict):
            line = json.dumps(line)
        parser.feed(line.encode() if isinstance(line, str) else line)
    return parser


def alive(pid: int) -> bool:
    """Whether pid is a live process (a zombie is dead, it only waits to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


def wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def read_pids(path: Path, timeout: float = 10.0) -> list[int]:
    assert wait_until(path.exists, timeout), f"{path} never appeared"
    return [int(x) for x in path.read_text().split()]


def kill_quietly(pids: Iterable[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
