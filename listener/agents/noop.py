"""The noop agent: succeeds at once, in-process, without spawning anything.

It exists so the whole claim → run → record path can be exercised (and timed)
without an agent. The listener calls `run_noop` directly; it must stay trivial.
"""

from __future__ import annotations

from listener.agents.base import RunResult
from listener.enums import Outcome


def run_noop() -> RunResult:
    """SUCCEEDED with final message "noop". It takes no task: it would not look at one, and
    building one per job was a measurable share of the listener's time in the benchmark."""
    return RunResult(outcome=Outcome.SUCCEEDED, final_message="noop")
