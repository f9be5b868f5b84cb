"""Which OS user an agent runs as, and its HOME: one of each per lane, where the listener can.

A lane (a row of `agents`) is the unit agents are trusted as: its credentials
(an API key in `agents.env`, a CLI login in HOME) serve every job on it. So
lanes are kept apart from each other, each with a HOME of its own that lasts
across runs (the CLI stays logged in, its transcripts stay for `--resume`).

`AgentUsers.current()` chooses one of three modes, from the listener's user and
CEASELESS_AGENT_USER:

- **per_lane** (the listener is root, CEASELESS_AGENT_USER unset): lane <name>
  runs as the system user `ceaseless-a-<16 hex digits of sha256(name)>` (a
  bounded name: useradd takes 32 characters), created on first use with a group
  of its own, no login shell, the comment `ceaseless lane <name>`, and the HOME
  /var/lib/ceaseless-agents/<user>, mode 0700. Different lanes are different
  uids, so the kernel keeps /proc/<pid>/environ, HOME and working directories of
  one closed to another, sandbox or not.
- **pinned** (CEASELESS_AGENT_USER=<user>): every lane runs as that one user,
  with that user's own HOME: for deployments (and tests) that give agents one
  identity on purpose. Lanes then share a uid and a HOME; only the sandbox's pid
  namespace keeps their processes apart. Naming root (or, for a listener that is
  not root, its own user) runs agents as the listener's user, as that user's HOME.
- **own** (the listener is not root): it cannot switch users, so every lane runs
  as the listener's user, and each gets a HOME of its own under
  $XDG_STATE_HOME/ceaseless/agent-homes (default ~/.local/state/…), mode 0700.
  Only the sandbox keeps lanes apart then: it shows a lane its own HOME alone,
  and its pid namespace hides the other lanes' processes.

Guarantees: `current()` never raises (what cannot be used is a refusal or a
problem); `for_lane` returns the same user and HOME for a lane every time, and
never root in per_lane mode; two listeners creating one lane's user at once
both end up with it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pwd
import stat
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from listener.agents.environment import Identity

AGENT_USER_VAR = "CEASELESS_AGENT_USER"
LANE_USER_PREFIX = "ceaseless-a-"
LANE_HOMES = Path("/var/lib/ceaseless-agents")
_NOLOGIN = "/usr/sbin/nologin"
# Lane names are `[a-z0-9][a-z0-9_.-]*` (agents' CHECK name_url_safe), safe as
# a directory name; only their length needs a bound.
_LANE_DIR_MAX = 100
# uid and gid of `nobody`: an unprivileged user like any lane's.
_NOBODY = 65534
_creating = threading.Lock()


def lane_user_name(lane: str) -> str:
    """The OS user of a lane in per_lane mode: the same name for the same lane, on any host."""
    return LANE_USER_PREFIX + hashlib.sha256(lane.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class AgentUsers:
    """Who agents run as on this host; see the module docstring for the modes."""

    mode: str  # "per_lane" | "pinned" | "own"
    # pinned: the one user every lane runs as (None: the listener's own).
    pinned: Identity | None = None
    # per_lane, own: the directory that holds every lane's HOME.
    homes: str | None = None
    problems: tuple[str, ...] = field(default=())
    # Set when agents should run as another OS user and cannot: they do not
    # run at all then, rather than silently as root.
    refusal: str | None = None

    @classmethod
    def current(cls) -> AgentUsers:
        """The mode this host and CEASELESS_AGENT_USER give."""
        name = os.environ.get(AGENT_USER_VAR)
        me = _own_name()
        if os.geteuid() != 0:
            if name and name != me:
                problem = (
                    f"{AGENT_USER_VAR}={name} is ignored: a listener that is not root runs "
                    "agents as its own user"
                )
                return cls("own", homes=str(_own_homes()), problems=(problem,))
            if name:
                return cls("pinned", problems=(_shared(me),))
            return cls("own", homes=str(_own_homes()))
        if not name:
            return cls("per_lane", homes=str(LANE_HOMES))
        try:
            user = pwd.getpwnam(name)
        except KeyError:
            refusal = (
                f"agents must not run as root, and the OS user {name!r} named by "
                f"{AGENT_USER_VAR} does not exist; create it, or unset {AGENT_USER_VAR} so "
                "that each lane runs as an OS user of its own"
            )
            return cls("pinned", problems=(refusal,), refusal=refusal)
        if user.pw_uid == 0:
            return cls("pinned", problems=(f"agents run as root ({AGENT_USER_VAR}={name})",))
        identity = Identity(user.pw_name, user.pw_uid, user.pw_gid, user.pw_dir)
        return cls("pinned", pinned=identity, problems=(_shared(name),))

    def problems_without_sandbox(self) -> tuple[str, ...]:
        """What only the sandbox makes up for: lanes that share one OS user (own mode)."""
        if self.mode != "own":
            return ()
        return (
            f"the listener is not root, so every lane runs as its user {_own_name()}, and "
            "without the sandbox lanes can read each other's HOME and processes",
        )

    def probe_uid(self) -> tuple[int, int] | None:
        """The uid and gid agents run as, to try the sandbox as; None: the listener's own."""
        if self.mode == "per_lane":
            return _NOBODY, _NOBODY
        if self.pinned is not None:
            return self.pinned.uid, self.pinned.gid
        return None

    def for_lane(self, lane: str) -> Identity | None:
        """The user and HOME lane `lane` runs as; None for the listener's own user and HOME.

        Creates the lane's user (per_lane) or HOME (own) on first use. Raises
        OSError or subprocess.SubprocessError when that fails.
        """
        if self.refusal is not None:
            raise PermissionError(self.refusal)
        if self.mode == "pinned":
            return self.pinned
        assert self.homes is not None
        if self.mode == "per_lane":
            return lane_user(lane)
        directory = lane if len(lane) <= _LANE_DIR_MAX else lane_user_name(lane)
        home = Path(self.homes) / directory
        Path(self.homes).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        private_directory(Path(self.homes), os.geteuid(), os.getegid(), mode=0o700)
        private_directory(home, os.geteuid(), os.getegid(), mode=0o700)
        return Identity(_own_name(), os.geteuid(), os.getegid(), str(home))


def lane_user(lane: str) -> Identity:
    """Lane `lane`'s own system user (per_lane), created with its HOME on first use."""
    name = lane_user_name(lane)
    home = LANE_HOMES / name
    with _creating:
        try:
            user = pwd.getpwnam(name)
        except KeyError:
            # 0711: each lane reaches its own HOME, none lists the others.
            private_directory(LANE_HOMES, 0, 0, mode=0o711)
            done = subprocess.run(
                [
                    "useradd",
                    "--system",
                    "--user-group",
                    "--create-home",
                    "--home-dir",
                    str(home),
                    "--shell",
                    _NOLOGIN,
                    "--comment",
                    f"ceaseless lane {lane}",
                    name,
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )
            try:  # another listener may have created it meanwhile
                user = pwd.getpwnam(name)
            except KeyError:
                raise OSError(
                    f"useradd {name} (the OS user of lane {lane!r}) failed: "
                    f"{done.stderr.strip() or done.returncode}"
                ) from None
    if user.pw_uid == 0 or Path(user.pw_dir) != home:
        raise PermissionError(
            f"the OS user {name} of lane {lane!r} is not one ceaseless made (uid "
            f"{user.pw_uid}, home {user.pw_dir}); remove it (userdel {name}) and let the "
            "listener create it"
        )
    private_directory(home, user.pw_uid, user.pw_gid, mode=0o700)
    return Identity(user.pw_name, user.pw_uid, user.pw_gid, str(home))


def private_directory(path: Path, uid: int, gid: int, *, mode: int) -> None:
    """Make `path` a real directory (never a symlink) owned by uid:gid with `mode`.

    Raises PermissionError when something else is there that we may not fix.
    """
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, mode)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise PermissionError(f"{path} must be a directory, and is not (a symlink?)")
    if (info.st_uid, info.st_gid) != (uid, gid):
        os.chown(path, uid, gid, follow_symlinks=False)
    if stat.S_IMODE(info.st_mode) != mode:
        os.chmod(path, mode, follow_symlinks=False)


def _own_name() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


def _own_homes() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "ceaseless" / "agent-homes"


def _shared(name: str) -> str:
    return (
        f"every lane runs as the one OS user {name} with one HOME ({AGENT_USER_VAR}); "
        "lanes can read each other's HOME, and without the sandbox each other's processes"
    )
