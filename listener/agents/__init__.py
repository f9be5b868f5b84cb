"""Agent adapters: how each kind of agent is started and how its output is read.

`adapter_for(kind)` gives the adapter for a subprocess agent, `run_agent` runs one
invocation of it (process.py), and `run_noop` is the in-process noop agent.
"""

from __future__ import annotations

from listener.agents.base import AgentAdapter
from listener.agents.claude_code import ClaudeCodeAdapter
from listener.agents.command import CommandAdapter
from listener.agents.noop import run_noop
from listener.agents.opencode import OpencodeAdapter
from listener.agents.process import run_agent
from listener.enums import Adapter

__all__ = ["adapter_for", "run_agent", "run_noop"]

# Adapters hold no state (each run gets a fresh parser), so one instance each is enough.
_ADAPTERS: dict[Adapter, AgentAdapter] = {
    Adapter.CLAUDE_CODE: ClaudeCodeAdapter(),
    Adapter.OPENCODE: OpencodeAdapter(),
    Adapter.COMMAND: CommandAdapter(),
}


def adapter_for(kind: Adapter) -> AgentAdapter:
    """The adapter for a subprocess agent kind; noop has none (call run_noop instead)."""
    if kind == Adapter.NOOP:
        raise ValueError("the noop agent runs in-process: call run_noop(), not run_agent")
    try:
        return _ADAPTERS[Adapter(kind)]
    except (KeyError, ValueError):
        raise ValueError(f"no agent adapter for kind {kind!r}") from None
