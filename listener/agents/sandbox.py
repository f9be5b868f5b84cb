"""How an agent process is confined: sandbox, OS user, and the keeper that outlives it.

Agents read untrusted text (event content, webhook bodies, issue bodies), so a
prompt injection must not reach the queue's database or the listener's host.
`Isolation` decides, once per listener, three things, and `launch` turns an
agent's argv into the argv that process.py executes:

- **Sandbox** (`bwrap`, Debian package `bubblewrap`, when on PATH and working):
  the filesystem is read-only except the run's working directory (the task's
  cwd) and its lane's HOME; the workspace root and the directory of every
  lane's HOME are empty but for those two, so no other job's directory and no
  other lane's HOME is there at all; /tmp is a fresh tmpfs; CEASELESS_HOME (the
  embedded data directory and its password file), the embedded server's socket
  directory and PostgreSQL's (/run/postgresql, and those DATABASE_URL and PGHOST
  name) are empty directories; /proc shows only the sandbox's own processes (a
  pid namespace, so no other agent's or the listener's environment can be read
  there). `--die-with-parent` and the pid namespace make the kernel kill every
  process of the sandbox when it ends.
- **Network** (network.py): a namespace of the agent's own, with its own
  loopback and, unless `agents.egress` is `{none}`, its run's egress proxy as
  the only way out. Never the host's loopback, so never the listener's HTTP
  server or a trust-auth PostgreSQL on 127.0.0.1.
- **OS user** (users.py): a listener running as root runs each lane as a system
  user of its own, with a HOME of its own, never as root; one that is not root
  runs every lane as itself, each with a HOME of its own.
- **Keeper** (reaper.py): always the parent of the agent, a child subreaper that
  kills every remaining descendant on timeout, cancel, the agent's own exit and
  the listener's death, including descendants that called setsid() or forked
  twice, with no time limit. Without a sandbox it holds them in a pid namespace
  or a cgroup of their own where the host allows (containment.py); inside one,
  it is what gives the agent a polite SIGTERM before the pid namespace is torn
  down.

Settings, from the environment, each for a real deployment need:
- CEASELESS_SANDBOX=off runs agents without bubblewrap even when it is installed
  (hosts where user namespaces are forbidden, agents that need host paths). The
  listener then warns at startup and `ceaseless status` says so, as when bwrap
  is missing.
- CEASELESS_AGENT_USER pins the one OS user every lane runs as (users.py);
  unset, each lane has its own. Naming root itself is allowed, and warned about.
- CEASELESS_AGENT_CONTAINMENT chooses how keepers hold agents without a sandbox
  (containment.py; default: the strongest the host allows).

Guarantees: `Isolation.current()` never raises; a sandbox that cannot start on
this host (bwrap present but refused by the kernel) counts as no sandbox, with
the kernel's reason in `problems`; a sandbox whose network namespace cannot be
made (tried once, the way runs make it) runs agents on the host's network, said
in `problems` too; `launch` never shows a run another lane's HOME or another
job's working directory in the sandbox.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from listener.agents import containment, network
from listener.agents.containment import Containment
from listener.agents.environment import Identity
from listener.agents.users import AGENT_USER_VAR, AgentUsers
from listener.database.embedded import EmbeddedServer, default_home

SANDBOX_VAR = "CEASELESS_SANDBOX"
REAPER = Path(__file__).with_name("reaper.py")
__all__ = ["AGENT_USER_VAR", "SANDBOX_VAR", "Identity", "Isolation"]
# Files under an agent's HOME that hold database credentials for libpq.
_PG_FILES = (".pgpass", ".pg_service.conf")
# Where Debian's (and most distributions') PostgreSQL puts its sockets.
_PG_SOCKET_DIRS = ("/run/postgresql", "/var/run/postgresql")


@dataclass(frozen=True)
class Isolation:
    """What confines the agents this listener starts."""

    bwrap: str | None
    users: AgentUsers
    containment: Containment
    hidden: tuple[str, ...] = ()
    problems: tuple[str, ...] = field(default=())
    # Whether a sandboxed agent gets a network namespace of its own (network.py);
    # False only where trying one failed on this host.
    own_network: bool = True

    @classmethod
    def current(cls) -> Isolation:
        """The isolation this host and its settings give (CEASELESS_SANDBOX, _AGENT_USER, …)."""
        users = AgentUsers.current()
        problems = list(users.problems)
        bwrap = None
        if os.environ.get(SANDBOX_VAR, "auto").lower() in ("off", "none", "0", "false"):
            problems.append(f"the sandbox is turned off ({SANDBOX_VAR}=off)")
        elif (found := shutil.which("bwrap")) is None:
            problems.append("bubblewrap (bwrap) is not installed")
        elif (broken := _bwrap_refusal(found, users.probe_uid())) is not None:
            problems.append(f"bubblewrap cannot start a sandbox here: {broken}")
        else:
            bwrap = found
        if bwrap is None:
            problems += users.problems_without_sandbox()
        held = containment.choose(sandboxed=bwrap is not None)
        if held.problem is not None:
            problems.append(held.problem)
        own_network = True
        if bwrap is not None and (broken := _network_refusal(bwrap, users.probe_uid())):
            own_network = False
            problems.append(
                f"agents share the host's network, loopback services included, because a "
                f"network namespace of their own cannot be made here: {broken}"
            )
        return cls(bwrap, users, held, _hidden_paths(), tuple(dict.fromkeys(problems)), own_network)

    @property
    def refusal(self) -> str | None:
        """Why agents may not run at all here (an OS user that cannot be used), or None."""
        return self.users.refusal

    @property
    def identity(self) -> Identity | None:
        """The one OS user every lane runs as when pinned; None otherwise (see identity_for)."""
        return self.users.pinned

    def identity_for(self, lane: str) -> Identity | None:
        """The OS user and HOME lane `lane` runs as (None: the listener's own), made on first use.

        Raises OSError or subprocess.SubprocessError when they cannot be made.
        """
        return self.users.for_lane(lane)

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
        """Why agents' OS users cannot reach their directories in the workspace root, or None.

        The listener makes each job's directory itself; its agent needs only to
        pass through the root to it. Per-lane users are checked by the modes
        (any user must be able to search every directory on the way); a pinned
        one by trying as that user.
        """
        path = os.path.realpath(workdir or os.getcwd())
        if self.users.mode == "per_lane":
            for directory in [path, *(str(p) for p in Path(path).parents)]:
                try:
                    mode = os.stat(directory).st_mode
                except OSError as exc:
                    return f"the workspace root {path} is unusable: {exc}"
                if not mode & stat.S_IXOTH:
                    return (
                        f"each lane's agent runs as an OS user of its own, and cannot pass "
                        f"through {directory} (not searchable by others) to reach its job's "
                        f"directory under the workspace root {path}; allow it "
                        f"(chmod o+x {directory}) or choose another root with --workdir"
                    )
            return None
        if self.identity is None:
            return None
        try:
            done = subprocess.run(
                ["test", "-x", path],
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
            f"agents run as the OS user {self.identity.name!r}, who cannot pass through the "
            f"workspace root {path} to its jobs' directories; allow it (chmod o+x {path}, and "
            "the directories above) or choose another root with --workdir"
        )

    def launch(
        self,
        argv: list[str],
        cwd: str | None,
        *,
        grace: float,
        identity: Identity | None,
        private: tuple[str, ...] = (),
        egress: Sequence[str] = network.NO_EGRESS,
    ) -> list[str]:
        """The argv to execute for `argv`: the keeper, and the sandbox when there is one.

        `identity` is the run's lane user (identity_for; required, so that no
        caller runs an agent as the listener's user by leaving it out); `private` names
        directories (the workspace root) of which the sandbox shows only `cwd`;
        `egress` is the agent's agents.egress (without a sandbox it has no effect).
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
            *self.containment.keeper_args(),
        ]
        if identity is not None and identity.uid != os.geteuid():
            keeper += ["--uid", str(identity.uid), "--gid", str(identity.gid)]
        if self.bwrap is None:
            return [*keeper, "--", *argv]
        sandbox = self._bwrap_argv(argv, cwd, identity, private)
        if self.own_network:
            keeper += network.keeper_args(egress)
            sandbox += network.bwrap_args(egress)
        return [*keeper, "--spare-child", "--", *sandbox, "--", *argv]

    def tmpdir(self) -> str | None:
        """TMPDIR inside the sandbox (a fresh /tmp), or None to keep the listener's."""
        return "/tmp" if self.sandboxed else None

    def _bwrap_argv(
        self,
        argv: list[str],
        cwd: str | None,
        identity: Identity | None = None,
        private: tuple[str, ...] = (),
    ) -> list[str]:
        assert self.bwrap is not None
        args = [self.bwrap, *_BASE_MOUNTS]
        args += ["--tmpfs", "/tmp", "--tmpfs", "/var/tmp"]
        workspace = os.path.realpath(cwd or os.getcwd())
        home = identity.home if identity else os.path.expanduser("~")
        # Other jobs' directories and other lanes' HOMEs are not there at all:
        # what holds this run's own directory is emptied before it is bound
        # back, the rest after, so that the bind cannot uncover them.
        # Under /tmp and /var/tmp there is nothing to empty: both are fresh already.
        candidates = (os.path.realpath(p) for p in (*private, self.users.homes) if p)
        emptied = [
            p
            for p in candidates
            if os.path.isdir(p) and p != "/" and not p.startswith(("/tmp/", "/var/tmp/"))
        ]
        around = [p for p in emptied if _contains(p, workspace)]
        for path in around:
            args += ["--tmpfs", path]
        if workspace != "/":
            args += ["--bind", workspace, workspace]
        for path in emptied:
            if path not in around:
                args += ["--tmpfs", path]
        # The fresh /tmp (or an emptied directory) would hide an executable (or a
        # script its argv names) that lives there: those stay visible, read-only.
        covered = tuple(os.path.join(p, "") for p in ("/tmp", "/var/tmp", *emptied))
        for arg in argv:
            if arg.startswith(covered) and os.path.exists(arg):
                args += ["--ro-bind", arg, arg]
        if os.path.isdir(home) and home != "/":
            args += ["--bind", home, home]
            for name in _PG_FILES:
                if os.path.lexists(os.path.join(home, name)):
                    args += ["--ro-bind", "/dev/null", os.path.join(home, name)]
        # Last, so that no bind above (a HOME that holds CEASELESS_HOME, as a
        # non-root user's default does) uncovers them again. /tmp is fresh
        # already; a directory holding the workspace or HOME stays.
        kept = (workspace, os.path.realpath(home))
        for path in self.hidden:
            if os.path.isdir(path) and _hideable(path, kept):
                args += ["--tmpfs", path]
        args += ["--chdir", workspace]
        args += _NAMESPACES
        return args


# What every sandbox starts from, the probes' included: a host whose kernel refuses
# one of these (a fresh /proc is refused in a user namespace when part of the host's
# /proc is mounted over, as systemd's ProtectKernelTunables does) has no sandbox,
# and is told so at start rather than by every run failing.
_BASE_MOUNTS = ("--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc")
_NAMESPACES = ("--unshare-pid", "--unshare-ipc", "--die-with-parent")


def _contains(outer: str, inner: str) -> bool:
    return inner == outer or inner.startswith(os.path.join(outer, ""))


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
        # Here, not at the top: a Python with only the standard library may
        # import this module (it then has no listener whose URL could matter).
        with contextlib.suppress(ImportError):
            import psycopg
            from psycopg.conninfo import conninfo_to_dict

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
def _bwrap_refusal(bwrap: str, user_group: tuple[int, int] | None) -> str | None:
    """Why bwrap cannot sandbox here (e.g. user namespaces forbidden), or None.

    Tried as the user agents run as (one like the lanes' own, in per_lane mode).
    """
    user = {}
    if user_group is not None and user_group[0] != os.geteuid():
        user = {"user": user_group[0], "group": user_group[1], "extra_groups": []}
    try:
        done = subprocess.run(
            [bwrap, *_BASE_MOUNTS, *_NAMESPACES, "true"],
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
def _network_refusal(bwrap: str, user_group: tuple[int, int] | None) -> str | None:
    """Why an agent cannot get a network namespace of its own here, or None.

    Tried once per process, the way runs make it: the keeper with a proxy policy,
    and the sandbox inside, as the user agents run as.
    """
    keeper = [sys.executable, "-I", "-S", str(REAPER), "--parent", str(os.getpid())]
    keeper += ["--grace", "1"]
    if user_group is not None and user_group[0] != os.geteuid():
        keeper += ["--uid", str(user_group[0]), "--gid", str(user_group[1])]
    sandbox = [bwrap, *_BASE_MOUNTS, *_NAMESPACES, "true"]
    try:
        done = subprocess.run(
            [*keeper, "--egress-allow", "probe.invalid", "--spare-child", "--", *sandbox],
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
