"""The noop agent: succeeds at once, in-process, without spawning anything.

It exists so the whole claim → run → record path can be exercised (and timed)
without an agent. The listener calls `run_noop` directly; it must stay trivial.
"""

from __future__ import annotations

from listener.agents.base import RunResult, Task
from listener.enums import Outcome


def run_noop(task: Task) -> RunResult:
    """SUCCEEDED with final message "noop"; the task is not looked at."""
    return RunResult(outcome=Outcome.SUCCEEDED, final_message="noop")
