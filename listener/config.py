"""The listener's options, defined once: the daemon reads them, the CLI is built from them.

Every field that carries a `help` text in its metadata is a command-line option of
`ceaseless up` and `ceaseless listen` (listener/cli builds the options from these
fields, so a new option is one field here). Policy the database owns — the lease
length, the webhook body limit — defaults to None here and is read from
`ceaseless.settings` at startup, never copied into Python.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Under the workspace root: the directory holding each job's own working
# directory (listener/daemon/producer/workdirs.py), which no context path may reach.
JOB_DIRECTORIES = ".ceaseless-jobs"


class ConfigError(ValueError):
    """A listener option that cannot be used; the message says what to pass instead."""


def workspace_root(workdir: str | None) -> Path:
    """The directory agents' job directories live in and context_paths are read from, resolved
    (symlinks too).

    Refuses `/`: context_paths are relative to the root, so with `/` a routine
    naming `etc/shadow` would have the listener paste that file into a prompt. The
    default is the current directory, which is `/` under systemd: the listener then
    refuses to start rather than serve the whole filesystem. Refuses a root that is
    not a directory too: the listener would claim jobs only to fail every one of
    them, unable to make its directory.
    """
    root = Path(workdir if workdir is not None else os.getcwd()).resolve()
    if not root.is_dir():
        raise ConfigError(
            f"the workspace root {root} is not a directory: every job would fail, its "
            f"working directory unmakeable; create it (mkdir -p {root}) or pass --workdir "
            "with an existing directory"
        )
    if root == Path(root.anchor):
        given = "--workdir " + repr(workdir) if workdir is not None else "the current directory"
        raise ConfigError(
            f"the workspace root is {given}, which resolves to {root}: agents' working "
            "directories would be made there and routines could read any file through "
            "context_paths; pass --workdir with a directory of its own, e.g. --workdir "
            "/var/lib/ceaseless/workspace"
        )
    return root


def default_forge_root() -> Path:
    """/var/tmp/ceaseless-forge-<uid>: a place every agent's sandbox replaces with an empty one.

    The sandbox gives each agent a fresh /tmp and /var/tmp and binds back only
    the agent's own working directory, so a forge agent sees its checkout and
    no other, and a task agent sees none. /var/tmp rather than /tmp: a clone
    can be large, and /tmp is often memory.
    """
    return Path("/var/tmp") / f"ceaseless-forge-{os.geteuid()}"


def forge_root(option: str | None, workspace: Path) -> Path:
    """The directory forge checkouts live in, resolved: `option`, else default_forge_root().

    Refuses a root inside the workspace root or holding it (every task agent
    works in the workspace root, so it would see every checkout), and one
    inside CEASELESS_HOME (hidden from every agent, so a forge agent would find
    its checkout empty).
    """
    from listener.database.embedded import default_home

    root = Path(option).resolve() if option is not None else default_forge_root()
    given = f"--forge-root {option!r}" if option is not None else "the default forge root"
    if root == Path(root.anchor):
        raise ConfigError(
            f"{given} resolves to {root}; pass --forge-root with a directory of its own"
        )
    if root.is_relative_to(workspace) or workspace.is_relative_to(root):
        raise ConfigError(
            f"{given} ({root}) and the workspace root ({workspace}) overlap: task agents work "
            "in the workspace root and would see the forge checkouts; pass --forge-root with a "
            f"directory outside it, e.g. --forge-root {default_forge_root()}"
        )
    home = default_home()
    if root.is_relative_to(home):
        raise ConfigError(
            f"{given} ({root}) is inside CEASELESS_HOME ({home}), which agents never see, so a "
            f"forge agent would find its checkout empty; pass e.g. --forge-root "
            f"{default_forge_root()}"
        )
    return root


def default_worker_id() -> str:
    """host:pid:random — unique per process, and readable in claimed_by."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def _help(text: str, *, flag: str | None = None, envvar: str | None = None) -> dict[str, Any]:
    """Field metadata that makes a field a command-line option (`flag` when not --name).

    `envvar`: the environment variable read when the option is not given; for
    secrets, which a command line shows to every user of the host (ps).
    """
    return {"help": text, "flag": flag, "envvar": envvar}


@dataclass(frozen=True)
class ListenerConfig:
    """What one listener process does; `url` comes from the environment, the rest from flags."""

    url: str
    concurrency: int = field(default=32, metadata=_help("Agents this listener runs at once."))
    poll_interval: float = field(
        default=5.0,
        metadata=_help(
            "Seconds between fallback polls for work and schedules; NOTIFY wakes it sooner."
        ),
    )
    shutdown_grace: float = field(
        default=30.0,
        metadata=_help(
            "On SIGTERM, seconds running agents and forge polls get to finish and results get to "
            "reach the database; what remains is released and named in the log."
        ),
    )
    kinds: list[str] | None = field(
        default=None,
        metadata=_help("Only claim jobs of this kind (repeatable).", flag="--kind"),
    )
    agents: list[str] | None = field(
        default=None,
        metadata=_help("Only claim jobs of this agent lane (repeatable).", flag="--agent"),
    )
    lease_secs: int | None = field(
        default=None,
        metadata=_help(
            "Lease seconds per claim (default: the lease_secs setting in the database)."
        ),
    )
    worker_id: str = field(
        default_factory=default_worker_id,
        metadata=_help("This listener's id in job.claimed_by (default host:pid:random)."),
    )
    workdir: str | None = field(
        default=None,
        metadata=_help(
            "Workspace root: each job's agent runs in a directory of its own under it, and "
            "routine context_paths are read from it (default: the current directory)."
        ),
    )
    forge_root: str | None = field(
        default=None,
        metadata=_help(
            "Where forge jobs' checkouts live, one directory per run (default "
            "/var/tmp/ceaseless-forge-<uid>); never inside --workdir, which task agents see.",
        ),
    )
    http: str | None = field(
        default=None,
        metadata=_help(
            "Serve HTTP on HOST:PORT, e.g. 127.0.0.1:8787: the webhook ingress (POST "
            "/hooks/{path}), the run observer (GET /runs/{id}/events, /loops/{id}/events) "
            "and the dashboard (GET /)."
        ),
    )
    max_body: int | None = field(
        default=None,
        metadata=_help(
            "Largest webhook body in bytes; larger gets 413 "
            "(default: the webhook_max_body_bytes setting in the database)."
        ),
    )
    http_max_requests: int = field(
        default=256,
        metadata=_help(
            "Webhook requests in hand at once; more get 503 at once. With --max-body this "
            "bounds the memory a flood can take."
        ),
    )
    http_read_timeout: float = field(
        default=10.0,
        metadata=_help(
            "Seconds a webhook client has to send its headers, and as long again for its body "
            "(408), so slow clients cannot hold connections open."
        ),
    )
    http_token: str | None = field(
        default=None,
        repr=False,
        metadata=_help(
            "Token the dashboard (GET /, sign in at /login), the run observer (GET "
            "/runs/{id}/events, /loops/{id}/events) and GET /metrics require on every address, "
            "loopback included (default: a new one made at each start; `ceaseless dashboard` "
            "prints its sign-in URL). Prefer the environment variable to the flag.",
            envvar="CEASELESS_HTTP_TOKEN",
        ),
    )
    dashboard_user: str | None = field(
        default=None,
        metadata=_help(
            "Who approvals decided from the dashboard (GET / on --http) are recorded as: "
            "decided_by is dashboard:<this name> (default: the user running the listener).",
            envvar="CEASELESS_DASHBOARD_USER",
        ),
    )
    observer_max_clients: int = field(
        default=100,
        metadata=_help("Observer event streams open at once; more get 503."),
    )
    observer_keepalive: float = field(
        default=15.0,
        metadata=_help(
            "Seconds between keepalive comments on a quiet observer stream, so proxies "
            "and clients see it is alive."
        ),
    )
    observer_send_timeout: float = field(
        default=10.0,
        metadata=_help(
            "Seconds one send to an observer client may take; a client that reads slower "
            "is dropped (its connection closed) rather than buffered."
        ),
    )
    listen_url: str | None = field(
        default=None,
        repr=False,
        metadata=_help(
            "Where LISTEN connects when DATABASE_URL goes through a connection pooler "
            "(PgBouncer in transaction mode): a URL to the same database, the pooler left out. "
            "LISTEN needs a session of its own; everything else may share the pooler's.",
            envvar="CEASELESS_LISTEN_URL",
        ),
    )
    db_deadline: float = field(
        default=15.0,
        metadata=_help(
            "Seconds any one database call may take before its connection is given up as "
            "dead and replaced (a hung server or a silent network partition)."
        ),
    )
    # Internal tuning, not options: claims per round trip and the sweep period.
    batch_size: int = 500
    sweep_interval: float = 5.0

    def __post_init__(self) -> None:
        # At startup, not at the first routine run: a listener that cannot
        # run agents safely says so before it claims anything.
        forge_root(self.forge_root, workspace_root(self.workdir))
