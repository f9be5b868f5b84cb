"""How an agent process is confined: sandbox, OS user, and the keeper that outlives it.

Agents read untrusted text (event content, webhook bodies, issue bodies), so a
prompt injection must not reach the queue's database or the listener's host.
`Isolation` decides, once per listener, three things, and `launch` turns an
agent's argv into the argv that process.py executes:

- **Sandbox** (`bwrap`, Debian package `bubblewrap`, when on PATH and working):
  the filesystem is read-only except the workspace (the task's cwd) and the
  agent's HOME; /tmp is a fresh tmpfs; CEASELESS_HOME (the embedded data
  directory and its password file), the embedded server's socket directory and
  PostgreSQL's (/run/postgresql, and those DATABASE_URL and PGHOST name) are
  empty directories; /proc shows only the sandbox's own processes (a pid
  namespace, so the listener's environment cannot be read there either).
  `--die-with-parent` and the pid namespace make the kernel kill every process
  of the sandbox when it ends.
- **Network** (network.py): a namespace of the agent's own, with its own
  loopback and, unless `agents.egress` is `{none}`, its run's egress proxy as
  the only way out. Never the host's loopback, so never the listener's HTTP
  server or a trust-auth PostgreSQL on 127.0.0.1.
- **OS user**: a listener running as root runs its agents as the unprivileged
  system user `ceaseless-agent` (created on first use, home
  /var/lib/ceaseless-agent), never as root.
- **Keeper** (reaper.py): always the parent of the agent, a child subreaper that
  kills every remaining descendant on timeout, cancel, the agent's own exit and
  the listener's death, including descendants that called setsid() or forked
  twice. Without a sandbox it is what stops escapees; inside one, it is what
  gives the agent a polite SIGTERM before the pid namespace is torn down.

Settings, from the environment, each for a real deployment need:
- CEASELESS_SANDBOX=off runs agents without bubblewrap even when it is installed
  (hosts where user namespaces are forbidden, agents that need host paths). The
  listener then warns at startup and `ceaseless status` says so, as when bwrap
  is missing.
- CEASELESS_AGENT_USER names the OS user agents run as when the listener is
  root (default ceaseless-agent). Naming root itself is allowed, and warned about.

Guarantees: `Isolation.current()` never raises; a sandbox that cannot start on
this host (bwrap present but refused by the kernel) counts as no sandbox, with
the kernel's reason in `problems`; a sandbox whose network namespace cannot be
made (tried once, the way runs make it) runs agents on the host's network, said
in `problems` too.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict

from listener.agents import network
from listener.agents.environment import Identity
from listener.embedded import EmbeddedServer, default_home

AGENT_USER = "ceaseless-agent"
AGENT_HOME = Path("/var/lib") / AGENT_USER
SANDBOX_VAR = "CEASELESS_SANDBOX"
AGENT_USER_VAR = "CEASELESS_AGENT_USER"
REAPER = Path(__file__).with_name("reaper.py")
# Files under an agent's HOME that hold database credentials for libpq.
_PG_FILES = (".pgpass", ".pg_service.conf")
# Where Debian's (and most distributions') PostgreSQL puts its sockets.
_PG_SOCKET_DIRS = ("/run/postgresql", "/var/run/postgresql")


@dataclass(frozen=True)
class Isolation:
    """What confines the agents this listener starts."""

    bwrap: str | None
    identity: Identity | None
    hidden: tuple[str, ...] = ()
    problems: tuple[str, ...] = field(default=())
    # Set when agents should run as another OS user and cannot: they do not
    # run at all then, rather than silently as root.
    refusal: str | None = None
    # Whether a sandboxed agent gets a network namespace of its own (network.py);
    # False only where trying one failed on this host.
    own_network: bool = True

    @classmethod
    def current(cls) -> Isolation:
        """The isolation this host and its settings give (CEASELESS_SANDBOX, _AGENT_USER)."""
        problems: list[str] = []
        identity = None
        refusal = None
        if os.geteuid() == 0:
            name = os.environ.get(AGENT_USER_VAR) or AGENT_USER
            try:
                identity = agent_identity(name)
            except (OSError, KeyError, subprocess.SubprocessError) as exc:
                refusal = (
                    f"agents must not run as root, and the OS user {name!r} they run as is "
                    f"unusable ({exc!r}); create it, or name another with {AGENT_USER_VAR}"
                )
                problems.append(refusal)
            if identity is not None and identity.uid == 0:
                identity = None
                problems.append(f"agents run as root ({AGENT_USER_VAR}={name})")
        bwrap = None
        if os.environ.get(SANDBOX_VAR, "auto").lower() in ("off", "none", "0", "false"):
            problems.append(f"the sandbox is turned off ({SANDBOX_VAR}=off)")
        elif (found := shutil.which("bwrap")) is None:
            problems.append("bubblewrap (bwrap) is not installed")
        elif (broken := _bwrap_refusal(found, identity)) is not None:
            problems.append(f"bubblewrap cannot start a sandbox here: {broken}")
        else:
            bwrap = found
        own_network = True
        if bwrap is not None and (broken := _network_refusal(bwrap, identity)) is not None:
            own_network = False
            problems.append(
                f"agents share the host's network, loopback services included, because a "
                f"network namespace of their own cannot be made here: {broken}"
            )
        return cls(bwrap, identity, _hidden_paths(), tuple(problems), refusal, own_network)

    @property
    def sandboxed(self) -> bool:
        return self.bwrap is not None

    def warning(self) -> str | None:
        """One sentence for the startup log and `ceaseless status`, or None when all is well."""
        if not self.problems:
            return None
        text = "agents are not fully isolated: " + "; ".join(self.problems)
        if not self.sandboxed:
            text += (
                ". Without a sandbox an agent can read whatever its OS user can, shares the "
                "host's network (the listener's HTTP server and any trust-auth PostgreSQL on "
                "127.0.0.1 included; agents.egress is not enforced), and a prompt injection may "
                "reach the database; install bubblewrap (Debian: apt-get install bubblewrap)"
            )
        return text

    def workspace_problem(self, workdir: str | None) -> str | None:
        """Why the agents' OS user cannot write the workspace, or None (checked as that user)."""
        if self.identity is None:
            return None
        path = os.path.realpath(workdir or os.getcwd())
        try:
            done = subprocess.run(
                ["test", "-w", path, "-a", "-x", path],
                user=self.identity.uid,
                group=self.identity.gid,
                extra_groups=[],
                cwd="/",
                timeout=10,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return f"could not check {path} as {self.identity.name}: {exc}"
        if done.returncode == 0:
            return None
        return (
            f"agents run as the OS user {self.identity.name!r}, who cannot write the workspace "
            f"{path}; give it the directory (chown -R {self.identity.name} {path}) or choose "
            "another with --workdir"
        )

    def launch(
        self,
        argv: list[str],
        cwd: str | None,
        *,
        grace: float,
        egress: Sequence[str] = network.NO_EGRESS,
    ) -> list[str]:
        """The argv to execute for `argv`: the keeper, and the sandbox when there is one.

        `egress` is the agent's agents.egress; without a sandbox it has no effect.
        Raises PermissionError when agents may not run at all (`refusal`).
        """
        if self.refusal is not None:
            raise PermissionError(self.refusal)
        keeper = [
            sys.executable,
            "-I",
            "-S",  # no site: the keeper needs the standard library only, and starts faster
            str(REAPER),
            "--parent",
            str(os.getpid()),
            "--grace",
            str(grace),
        ]
        if self.identity is not None:
            keeper += ["--uid", str(self.identity.uid), "--gid", str(self.identity.gid)]
        if self.bwrap is None:
            return [*keeper, "--", *argv]
        bwrap = self._bwrap_argv(argv, cwd)
        if self.own_network:
            keeper += network.keeper_args(egress)
            bwrap += network.bwrap_args(egress)
        return [*keeper, "--spare-child", "--", *bwrap, "--", *argv]

    def tmpdir(self) -> str | None:
        """TMPDIR inside the sandbox (a fresh /tmp), or None to keep the listener's."""
        return "/tmp" if self.sandboxed else None

    def _bwrap_argv(self, argv: list[str], cwd: str | None) -> list[str]:
        assert self.bwrap is not None
        args = [self.bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        args += ["--tmpfs", "/tmp", "--tmpfs", "/var/tmp"]
        # The fresh /tmp would hide an executable (or a script its argv names)
        # that lives there: those stay visible, read-only.
        for arg in argv:
            if arg.startswith(("/tmp/", "/var/tmp/")) and os.path.exists(arg):
                args += ["--ro-bind", arg, arg]
        home = self.identity.home if self.identity else os.path.expanduser("~")
        if os.path.isdir(home) and home != "/":
            args += ["--bind", home, home]
            for name in _PG_FILES:
                if os.path.lexists(os.path.join(home, name)):
                    args += ["--ro-bind", "/dev/null", os.path.join(home, name)]
        workspace = os.path.realpath(cwd or os.getcwd())
        if workspace != "/":
            args += ["--bind", workspace, workspace]
        # Last, so that no bind above (a HOME that holds CEASELESS_HOME, as a
        # non-root user's default does) uncovers them again. /tmp is fresh
        # already; a directory holding the workspace or HOME stays.
        kept = (workspace, os.path.realpath(home))
        for path in self.hidden:
            if os.path.isdir(path) and _hideable(path, kept):
                args += ["--tmpfs", path]
        args += ["--chdir", workspace]
        args += ["--unshare-pid", "--unshare-ipc", "--die-with-parent"]
        return args


def agent_identity(name: str) -> Identity:
    """The OS user `name`, created as a system user with its own home if missing (as root)."""
    try:
        user = pwd.getpwnam(name)
    except KeyError:
        if name != AGENT_USER:
            raise
        subprocess.run(
            [
                "useradd",
                "--system",
                "--create-home",
                "--home-dir",
                str(AGENT_HOME),
                "--shell",
                "/usr/sbin/nologin",
                name,
            ],
            check=True,
            capture_output=True,
        )
        user = pwd.getpwnam(name)
    return Identity(name=user.pw_name, uid=user.pw_uid, gid=user.pw_gid, home=user.pw_dir)


def _hidden_paths() -> tuple[str, ...]:
    """CEASELESS_HOME, the embedded server's socket directory and PostgreSQL's, when they exist."""
    home = default_home()
    paths = [str(home)]
    try:
        socket_dir = EmbeddedServer(home).socket_dir()
    except OSError:
        socket_dir = None
    if socket_dir is not None:
        paths.append(str(socket_dir))
    paths += _database_socket_dirs()
    return tuple(dict.fromkeys(os.path.realpath(p) for p in paths))


def _database_socket_dirs() -> list[str]:
    """Where a libpq client finds a PostgreSQL's unix sockets: the distribution's directory,
    and those the listener's DATABASE_URL and PGHOST name.

    A socket is not a network address: the network namespace does not close it,
    and a server with `local … trust` answers anyone who reaches it.
    """
    hosts: list[str] = []
    if url := os.environ.get("DATABASE_URL"):
        # A URL libpq cannot read reaches no socket through it either.
        with contextlib.suppress(psycopg.ProgrammingError):
            hosts += str(conninfo_to_dict(url).get("host") or "").split(",")
    hosts += os.environ.get("PGHOST", "").split(",")
    return [*_PG_SOCKET_DIRS, *(h.strip() for h in hosts if h.strip().startswith("/"))]


def _hideable(path: str, kept: tuple[str, ...]) -> bool:
    """Whether an empty tmpfs may cover `path`: not / or /tmp (fresh already), nor a
    directory holding one of `kept`."""
    if path in ("/", "/tmp", "/var/tmp") or path.startswith(("/tmp/", "/var/tmp/")):
        return False
    return not any(k == path or k.startswith(path.rstrip("/") + "/") for k in kept)


@functools.cache
def _bwrap_refusal_cached(bwrap: str, uid: int | None, gid: int | None) -> str | None:
    user = {} if uid is None else {"user": uid, "group": gid, "extra_groups": []}
    try:
        done = subprocess.run(
            [bwrap, "--ro-bind", "/", "/", "--unshare-pid", "--die-with-parent", "true"],
            capture_output=True,
            text=True,
            timeout=20,
            cwd="/",
            **user,  # type: ignore[arg-type]
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    if done.returncode != 0:
        return (done.stderr.strip() or f"exit status {done.returncode}")[:200]
    return None


@functools.cache
def _network_refusal_cached(bwrap: str, uid: int | None, gid: int | None) -> str | None:
    keeper = [sys.executable, "-I", "-S", str(REAPER), "--parent", str(os.getpid())]
    keeper += ["--grace", "1"]
    user = [] if uid is None else ["--uid", str(uid), "--gid", str(gid)]
    sandbox = [bwrap, "--ro-bind", "/", "/", "--unshare-pid", "--die-with-parent", "true"]
    try:
        done = subprocess.run(
            [*keeper, *user, "--egress-allow", "probe.invalid", "--spare-child", "--", *sandbox],
            capture_output=True,
            text=True,
            timeout=20,
            cwd="/",
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    if done.returncode != 0:
        return (done.stderr.strip() or f"exit status {done.returncode}")[:300]
    return None


def _network_refusal(bwrap: str, identity: Identity | None) -> str | None:
    """Why an agent cannot get a network namespace of its own here, or None.

    Tried once per process, the way runs make it: the keeper with a proxy policy,
    and the sandbox inside.
    """
    uid = identity.uid if identity else None
    gid = identity.gid if identity else None
    return _network_refusal_cached(bwrap, uid, gid)


def _bwrap_refusal(bwrap: str, identity: Identity | None) -> str | None:
    """Why bwrap cannot sandbox here (e.g. user namespaces forbidden), or None."""
    uid = identity.uid if identity else None
    gid = identity.gid if identity else None
    return _bwrap_refusal_cached(bwrap, uid, gid)
