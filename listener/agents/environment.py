"""The environment an agent process gets: an allowlist, never the listener's own.

Agents read untrusted text, so whatever is in their environment a prompt
injection can read too. The listener's environment holds its database URL, PG*
variables and whatever secrets its host gave it; none of that is an agent's.

Guarantees: an agent's environment holds only
- the allowlisted basics (PATH, HOME, LANG, LC_*, TERM, TMPDIR, USER) taken from
  the listener's environment, with HOME, USER and LOGNAME those of its lane's
  user and HOME (users.py) when it has its own;
- the variables the agent's row names in `env_passthrough`, from the listener's
  environment, except the database's (DATABASE_URL, PG*) and ceaseless' own
  (CEASELESS_*), which no list lets through;
- the agent's configured `env`;
- the CEASELESS_JOB_ID / CEASELESS_RUN_ID / CEASELESS_MAX_TOKENS of its run, set
  last so that no configuration can mislabel which job and run it serves.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from listener.agents.base import AgentConfig, Task

ALLOWED = frozenset({"PATH", "HOME", "LANG", "TERM", "TMPDIR", "USER"})
# The same rule as the agents.env_passthrough CHECK: a list that names one of
# these is refused when it is written; this is the listener's own backstop.
_NEVER = re.compile(r"DATABASE_URL|PG.*|CEASELESS_.*", re.IGNORECASE)
# What a process finds when nothing is set: agents CLIs need a PATH to find node.
_DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class Identity:
    """The OS user an agent runs as and its HOME: a lane's own (users.py)."""

    name: str
    uid: int
    gid: int
    home: str


def passed_through(name: str) -> bool:
    """Whether a variable of the listener's may reach an agent that lists it."""
    return not _NEVER.fullmatch(name)


def agent_environment(
    agent: AgentConfig,
    task: Task,
    *,
    source: Mapping[str, str] | None = None,
    identity: Identity | None = None,
    tmpdir: str | None = None,
) -> dict[str, str]:
    """The whole environment of one agent process, built from nothing."""
    source = os.environ if source is None else source
    env = {
        name: value
        for name, value in source.items()
        if name in ALLOWED or name.startswith("LC_") or name in agent.env_passthrough
    }
    env = {name: value for name, value in env.items() if name in ALLOWED or passed_through(name)}
    env.setdefault("PATH", _DEFAULT_PATH)
    if identity is not None:
        env.update(HOME=identity.home, USER=identity.name, LOGNAME=identity.name)
    if tmpdir is not None:
        env["TMPDIR"] = tmpdir
    env.update(agent.env)
    env["CEASELESS_JOB_ID"] = task.job_id
    env["CEASELESS_RUN_ID"] = task.run_id
    if task.max_tokens is not None:
        # Every agent can read the budget; Claude Code honours its own variable.
        env["CEASELESS_MAX_TOKENS"] = str(task.max_tokens)
        env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(task.max_tokens)
    return env
