"""What an agent's own network costs: the start of a trivial agent, and a connection through
the egress proxy, each with and without it.

    python -m bench.agent_start [--runs 40]

The agent is `date +%s%N` run by the command adapter through `run_agent`, the
listener's own path (keeper, sandbox, OS user), one run at a time, in four
isolations; "start → agent runs" is from the call to the clock the agent reads
(wall clock, the same on both sides), "start → exit" until run_agent returns
(which its 50 ms polling rounds up):

- keeper only: CEASELESS_SANDBOX=off;
- sandbox, host network: bubblewrap sharing the host's network (what agents got
  before they had a network of their own, and what a host that cannot make a
  namespace still gives);
- sandbox, egress {none}: bubblewrap's own network namespace, loopback only;
- sandbox, egress allowlist: the keeper's namespace and its egress proxy.

Then the proxy itself: a TCP connection to a local server made directly, and
through the proxy (CONNECT to an allowlisted IP literal, answered `200`).
Times are wall-clock milliseconds on this machine, printed as p50 / p95 / mean;
nothing is asserted (docs/performance.md says why timings never are).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import socket
import statistics
import threading
import time
from collections.abc import Callable

from listener.agents import adapter_for, run_agent
from listener.agents.base import AgentConfig, Task
from listener.agents.egress import Policy, Proxy, Resolver
from listener.agents.sandbox import SANDBOX_VAR, Isolation
from listener.enums import Adapter, Outcome


def _agent(egress: tuple[str, ...]) -> AgentConfig:
    return AgentConfig(
        name="bench",
        adapter=Adapter.COMMAND,
        argv=["date", "+%s%N"],
        env={},
        model=None,
        timeout_secs=60,
        kill_grace_secs=1,
        egress=egress,
    )


def _start(isolation: Isolation, egress: tuple[str, ...]) -> tuple[float, float]:
    """Milliseconds from the call until the agent runs, and until run_agent returns."""
    config = _agent(egress)
    called = time.time_ns()
    result = asyncio.run(
        run_agent(
            adapter_for(Adapter.COMMAND),
            config,
            Task(job_id="job", run_id="run", prompt="", cwd="/tmp"),
            cancel=asyncio.Event(),
            isolation=isolation,
        )
    )
    returned = time.time_ns()
    assert result.outcome == Outcome.SUCCEEDED and result.final_message, result.error
    ran = int(result.final_message.strip())
    return (ran - called) / 1e6, (returned - called) / 1e6


def _isolations() -> list[tuple[str, Isolation, tuple[str, ...]]]:
    os.environ[SANDBOX_VAR] = "off"
    keeper_only = Isolation.current()
    os.environ.pop(SANDBOX_VAR)
    sandboxed = Isolation.current()
    if not sandboxed.sandboxed:
        return [("keeper only", keeper_only, ("none",))]
    return [
        ("keeper only", keeper_only, ("none",)),
        ("sandbox, host network", dataclasses.replace(sandboxed, own_network=False), ("none",)),
        ("sandbox, egress {none}", sandboxed, ("none",)),
        ("sandbox, egress allowlist", sandboxed, ("api.anthropic.com", "models.dev")),
    ]


def _server() -> tuple[socket.socket, int]:
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen(128)

    def answer() -> None:
        while True:
            try:
                client, _ = listening.accept()
            except OSError:
                return
            client.sendall(b"x")
            client.close()

    threading.Thread(target=answer, daemon=True).start()
    return listening, listening.getsockname()[1]


def _connections(runs: int) -> list[tuple[str, list[float]]]:
    server, port = _server()
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen(128)
    proxy_port = listening.getsockname()[1]
    Proxy(Policy.parse([f"127.0.0.1:{port}"]), Resolver(), lambda _: None).serve(listening)

    def direct() -> None:
        with socket.create_connection(("127.0.0.1", port)) as conn:
            assert conn.recv(1) == b"x"

    def proxied() -> None:
        with socket.create_connection(("127.0.0.1", proxy_port)) as conn:
            conn.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
            head = b""
            while not head.endswith(b"x"):
                head += conn.recv(4096)
            assert head.startswith(b"HTTP/1.1 200")

    found = [
        ("connect, direct", _time(direct, runs)),
        ("connect, through the proxy", _time(proxied, runs)),
    ]
    server.close()
    listening.close()
    return found


def _time(action: Callable[[], None], runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def _line(label: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return (
        f"{label:<48} p50 {statistics.median(ordered):8.2f} ms  p95 {p95:8.2f} ms  "
        f"mean {statistics.fmean(ordered):8.2f} ms  (n={len(ordered)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.agent_start")
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    scenarios = _isolations()
    runs: dict[str, list[float]] = {label: [] for label, _, _ in scenarios}
    exits: dict[str, list[float]] = {label: [] for label, _, _ in scenarios}
    for _, isolation, egress in scenarios:
        _start(isolation, egress)  # warm: probes and caches
    # Round robin, so that a busy moment of the machine weighs on every scenario alike.
    for _ in range(args.runs):
        for label, isolation, egress in scenarios:
            ran, returned = _start(isolation, egress)
            runs[label].append(ran)
            exits[label].append(returned)
    for label in runs:
        print(_line(f"start → agent runs, {label}", runs[label]))
    for label in exits:
        print(_line(f"start → exit, {label}", exits[label]))
    for label, samples in _connections(args.runs * 5):
        print(_line(label, samples))


if __name__ == "__main__":
    main()
