"""What holding an agent costs: run_agent for `true`, and ending a fork bomb, per containment.

    python -m bench.agent_spawn [--runs N]

For each way the keeper can hold an agent on this host (the sandbox's pid
namespace, a pid namespace of its own, a cgroup, the rounds), it reports the
median and worst wall time of `run_agent` for an agent that exits at once
(keeper start, hold, agent, reap), and, as root, the time from a run's timeout
to its end for a crowd of 48 fork-hoppers (tests/fakes/fake_escaper), which is
how long the kill takes. Run it on a quiet host: it measures wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import statistics
import tempfile
import time
from pathlib import Path

from listener.agents import adapter_for, run_agent
from listener.agents.base import AgentConfig, Task
from listener.agents.containment import CONTAINMENT_VAR
from listener.agents.sandbox import SANDBOX_VAR, Isolation
from listener.enums import Adapter

FAKE_ESCAPER = str(Path(__file__).resolve().parents[1] / "tests" / "fakes" / "fake_escaper")
_HOLDS = {"sandbox": ("auto", None), "pidns": ("off", "pidns"), "cgroup": ("off", "cgroup")}
_HOLDS["rounds"] = ("off", "rounds")


def _isolation(sandbox: str, containment: str | None) -> Isolation:
    os.environ[SANDBOX_VAR] = sandbox
    os.environ.pop(CONTAINMENT_VAR, None)
    if containment is not None:
        os.environ[CONTAINMENT_VAR] = containment
    return Isolation.current()


def _config(argv: list[str], env: dict[str, str], timeout: int) -> AgentConfig:
    return AgentConfig("bench-spawn", Adapter.COMMAND, argv, env, None, timeout, 1)


async def _once(config: AgentConfig, cwd: str, isolation: Isolation) -> float:
    started = time.monotonic()
    await run_agent(
        adapter_for(Adapter.COMMAND),
        config,
        Task("bench", "bench", "", cwd=cwd),
        cancel=asyncio.Event(),
        isolation=isolation,
    )
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.agent_spawn")
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    os.environ.pop("CEASELESS_AGENT_USER", None)
    with tempfile.TemporaryDirectory(dir="/tmp") as ws:
        os.chmod(ws, 0o777)
        print("| containment | run_agent(true) median | worst | fork bomb: timeout to end |")
        print("|---|---|---|---|")
        for name, (sandbox, containment) in _HOLDS.items():
            isolation = _isolation(sandbox, containment)
            held = isolation.containment.mode
            if held not in (name, "userns" if name == "pidns" else name):
                print(f"| {name} | unavailable here ({held}) | | |")
                continue
            true = _config(["true"], {}, 30)
            times = [asyncio.run(_once(true, ws, isolation)) for _ in range(args.runs)]
            bomb = "(needs root)"
            if os.geteuid() == 0:
                env = {
                    "FAKE_ESCAPE_DIR": ws,
                    "FAKE_ESCAPE_TOKEN": f"bench-{name}",
                    "FAKE_ESCAPE_HOP_SECS": "30",
                    "FAKE_ESCAPE_HOP_CROWD": "48",
                }
                hoppers = dataclasses.replace(_config([FAKE_ESCAPER], env, 2), kill_grace_secs=0)
                bomb = f"{asyncio.run(_once(hoppers, ws, isolation)) - 2:.2f} s"
            median = statistics.median(times) * 1000
            print(f"| {name} | {median:.0f} ms | {max(times) * 1000:.0f} ms | {bomb} |")


if __name__ == "__main__":
    main()
