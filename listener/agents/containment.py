"""How the keeper holds an agent's processes so that none outlives its run, chosen once per host.

The keeper (reaper.py) must kill every descendant of an agent, and a fork bomb
that respawns faster than it is found must not win by outlasting a deadline.
The kernel can do it at once in two ways, tried in this order when there is no
sandbox (the sandbox brings a pid namespace of its own):

1. **pidns**: a pid namespace per run; killing its init ends every process in it
   and no new one can be born there. Root unshares one directly; a listener that
   is not root needs a user namespace to own it (**userns**), which some hosts
   forbid (the reason they also run without bubblewrap).
2. **cgroup**: a cgroup v2 directory per run under the listener's own cgroup,
   where it may write one (root, or a delegated cgroup); `cgroup.kill` ends it.
   Cgroup v1 is not used: a host whose v1 freezer is writable is a root one,
   which has pid namespaces unless it lacks CAP_SYS_ADMIN, and without that a
   cgroup file system is read-only too.
3. **rounds**: find descendants in /proc and kill them until none is left, with
   no deadline. A process that forks faster than it is found can keep this
   going, so `problem` says so and the listener warns.

CEASELESS_AGENT_CONTAINMENT=pidns|cgroup|rounds starts the search at that step
instead of the first (auto), for a host where a namespace or cgroup breaks what
agents run, and for tests of each.

Guarantees: `choose()` never raises; what it returns was tried on this host with
a real keeper running a real process; it is computed once per process.
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from listener import pids
from listener.agents.reaper import CGROUP_PREFIX

CONTAINMENT_VAR = "CEASELESS_AGENT_CONTAINMENT"
REAPER = Path(__file__).with_name("reaper.py")
_ORDER = ("pidns", "cgroup", "rounds")
_PROBE_SECS = 20


@dataclass(frozen=True)
class Containment:
    """How keepers hold agents: `mode` is reaper.py's --contain (or the sandbox's own pid
    namespace, "sandbox"), `cgroup` its --cgroup."""

    mode: str
    cgroup: str | None = None
    # Why this is weaker than a pid namespace or a cgroup, when it is.
    problem: str | None = None

    def keeper_args(self) -> list[str]:
        # In the sandbox the rounds end: the sandbox's init is one of the descendants.
        args = ["--contain", "rounds" if self.mode == "sandbox" else self.mode]
        return [*args, "--cgroup", self.cgroup] if self.cgroup is not None else args

    @property
    def needs_keeper(self) -> bool:
        """Whether only the keeper can end what it holds, so it must be waited for, never killed.

        A pid namespace (ours or the sandbox's) dies with the keeper, and a
        cgroup is killed by `kill_all`; the rounds have nobody else.
        """
        return self.mode == "rounds"

    def kill_all(self, keeper: int) -> None:
        """End what the keeper `keeper` holds without the keeper: its cgroup, if it has one."""
        if self.mode != "cgroup" or self.cgroup is None:
            return
        path = os.path.join(self.cgroup, f"{CGROUP_PREFIX}{keeper}", "cgroup.kill")
        with contextlib.suppress(OSError), open(path, "w") as f:
            f.write("1")


def choose(sandboxed: bool) -> Containment:
    """The strongest containment this host gives, from CEASELESS_AGENT_CONTAINMENT on."""
    if sandboxed:
        return Containment("sandbox")
    asked = os.environ.get(CONTAINMENT_VAR, "auto").lower()
    start = _ORDER.index(asked) if asked in _ORDER else 0
    return _choose_from(start, os.geteuid())


@functools.cache
def _choose_from(start: int, euid: int) -> Containment:
    tried: list[str] = []
    for mode in _ORDER[start:]:
        if mode == "pidns":
            found = "pidns" if euid == 0 else "userns"
            if (broken := _probe(found)) is None:
                return Containment(found)
            tried.append(f"no pid namespace ({broken})")
        elif mode == "cgroup":
            base, why = _cgroup_base()
            if base is not None and (broken := _probe("cgroup", base)) is None:
                _end_stale(base)
                return Containment("cgroup", base)
            tried.append(f"no writable cgroup v2 ({why or broken})")
    skipped = f" ({CONTAINMENT_VAR}={_ORDER[start]})" if start else ""
    reasons = "; ".join(tried) or "asked for"
    return Containment(
        "rounds",
        problem=(
            f"without a sandbox the keeper kills an agent's processes in rounds{skipped}: "
            f"{reasons}; a process that forks faster than it is found can outlive its run"
        ),
    )


def _probe(mode: str, cgroup: str | None = None) -> str | None:
    """Why a keeper cannot hold a process this way here, or None: tried for real."""
    argv = [sys.executable, "-I", "-S", str(REAPER), "--parent", str(os.getpid()), "--grace", "1"]
    argv += [*Containment(mode, cgroup).keeper_args(), "--", "true"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_PROBE_SECS, cwd="/")
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    if done.returncode != 0:
        return (done.stderr.strip() or f"exit status {done.returncode}")[:200]
    return None


def _cgroup_base() -> tuple[str | None, str | None]:
    """This process's own cgroup v2 directory, if it may make cgroups there (and why not)."""
    mount = None
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as f:
        for line in f:
            # "… mount-point options… - fstype source super-options"
            before, _, after = line.partition(" - ")
            if after.split()[:1] == ["cgroup2"]:
                mount = before.split()[4]
                break
    if mount is None:
        return None, "no cgroup2 file system is mounted"
    own = None
    with contextlib.suppress(OSError), open("/proc/self/cgroup") as f:
        for line in f:
            if line.startswith("0::"):
                own = line[3:].strip()
    if own is None:
        return None, "this process is in no cgroup v2"
    base = os.path.join(mount, own.lstrip("/"))
    if not (os.access(base, os.W_OK) and os.access(os.path.join(base, "cgroup.procs"), os.W_OK)):
        return None, f"{base} is not writable by this user"
    return base.rstrip("/") or "/", None


def _end_stale(base: str) -> None:
    """Kill and remove cgroups left by keepers that died without removing them."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(base):
            if not entry.name.startswith(CGROUP_PREFIX):
                continue
            keeper = entry.name.removeprefix(CGROUP_PREFIX)
            if not keeper.isdigit() or pids.exists(int(keeper)):
                continue
            with contextlib.suppress(OSError):
                with open(os.path.join(entry.path, "cgroup.kill"), "w") as f:
                    f.write("1")
                os.rmdir(entry.path)
