"""What a person must do when an agent could not authenticate: which OS user, which HOME, which
command.

An agent's CLI keeps its login in its HOME, and a lane runs as an OS user and HOME of its own
(users.py), which is neither the operator's nor, usually, the listener's. So "log the CLI in"
is only useful with the exact user, HOME and command, and those are known only here, where
the run was started. The advice is appended to the run's error, which the job's notification
quotes (functions/60_notifications.sql).

Guarantees: the advice names the user and the HOME the agent ran with, and its command runs
as that user on this host: as it is, when the agent ran as the listener's own user; through
`sudo -u` where sudo is installed, else through `runuser -u` (util-linux, present where sudo
is not, run as root). It never raises.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
from collections.abc import Mapping

from listener.agents.base import STDERR_MARKER, AgentConfig
from listener.agents.environment import Identity
from listener.enums import Adapter

# The subcommand that logs a CLI in, and the variables that move where it keeps the login
# (set in agents.env, they must be set for the login too).
_LOGIN: dict[Adapter, tuple[tuple[str, ...], tuple[str, ...]]] = {
    Adapter.CLAUDE_CODE: (("auth", "login"), ("CLAUDE_CONFIG_DIR",)),
    Adapter.OPENCODE: (("auth", "login"), ("XDG_CONFIG_HOME", "XDG_DATA_HOME")),
}


def login_advice(
    agent: AgentConfig, env: Mapping[str, str], identity: Identity | None
) -> str | None:
    """How to log lane `agent` in, as it ran (its environment `env`, its `identity`; None: the
    listener's own user); None for an adapter with no CLI login."""
    login = _LOGIN.get(Adapter(agent.adapter))
    if login is None or not agent.argv:
        return None
    subcommand, config_vars = login
    user = identity.name if identity is not None else _own_user()
    home = env.get("HOME") or (identity.home if identity is not None else "~")
    settings = [f"HOME={home}", *(f"{v}={env[v]}" for v in config_vars if env.get(v))]
    command = ["env", *settings, agent.argv[0], *subcommand]
    lines = [f"Log lane {agent.name} in as OS user {user} with HOME={home}:"]
    if user == _own_user():
        lines.append(f"  {shlex.join(command)}")
    elif shutil.which("sudo"):
        lines.append(f"  sudo -u {shlex.quote(user)} {shlex.join(command)}")
    else:
        lines.append(f"  runuser -u {shlex.quote(user)} -- {shlex.join(command)}   # as root")
    if Adapter(agent.adapter) is Adapter.CLAUDE_CODE:
        lines.append(
            f"or make a long-lived token with `{shlex.quote(agent.argv[0])} setup-token` and set "
            "it as CLAUDE_CODE_OAUTH_TOKEN in the lane's agents.env."
        )
    return "\n".join(lines)


def with_login_advice(error: str | None, advice: str | None) -> str | None:
    """The run's error with the advice after its first part, before the agent's stderr tail, so
    a notification cut to its first characters keeps it."""
    if advice is None:
        return error
    if not error:
        return advice
    head, marker, tail = error.partition(STDERR_MARKER)
    return f"{head}\n{advice}{marker}{tail}"


def _own_user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())
