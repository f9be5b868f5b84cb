"""The agent's keeper: a tiny parent process that no descendant of the agent outlives.

process.py starts this file (standard library only, run with `python -I`) in place
of the agent; it becomes a child subreaper (PR_SET_CHILD_SUBREAPER), starts the agent
(or the bubblewrap sandbox around it) in a process group of its own, and waits.

    python -I reaper.py --parent PID --grace SECS [--uid UID --gid GID]
        [--contain pidns|userns|cgroup|rounds] [--cgroup DIR] [--spare-child]
        [--egress-open | --egress-allow ENTRY…] [--egress-hosts FILE] -- ARGV…

Why a process of its own: an agent that calls setsid() or forks twice leaves its
process group and, once its parent exits, is reparented. To a subreaper it comes
back to us rather than to init, so every descendant stays in reach of this one
process, whatever it did to its group or session.

How the descendants are held (--contain, chosen per host by containment.py):
- pidns: the agent starts in a pid namespace of its own, whose init is a child
  of ours that only reaps. Killing that init makes the kernel kill every process
  in the namespace, and no process can be born in it any more: a fork bomb ends
  with one signal. userns is the same for a keeper that is not root, which needs
  a user namespace (mapping only its own uid) to own a pid namespace.
- cgroup: the agent starts in a cgroup v2 directory of its own under --cgroup;
  writing cgroup.kill kills every process in it, forks under way included.
- rounds: find every descendant in /proc and SIGKILL it, again and again until
  none is left (the sandbox's own pid namespace makes this end: its init is one
  of them). Without a sandbox, a process that forks faster than the rounds find
  it can keep them going; containment.py says so when it has to choose this.
None of them has a time limit: the keeper exits only once nothing is left.

Egress (network.py): with --egress-open or --egress-allow, the child starts in a
network namespace of its own whose only way out is the egress proxy this process
serves (egress.py), on 127.0.0.1:3128 inside it; if that namespace cannot be
made, the child is never executed.

Signals (the protocol process.py speaks):
- SIGTERM: pass SIGTERM on to every descendant (a polite stop; the agent may save
  its session). With --spare-child the direct child, bubblewrap's monitor, is
  spared: it would die of it and take the sandbox down before the agent could exit.
- SIGUSR1: SIGKILL every descendant now, reap them, exit.
- The listener's death arrives as SIGUSR1 too (PR_SET_PDEATHSIG), so a listener
  killed with SIGKILL still leaves nothing behind. The namespace's init dies with
  this keeper (PR_SET_PDEATHSIG), and with it the whole namespace.

Guarantees: the agent runs with umask 077, as --uid when given; this process
exits only once no descendant is left alive; when the
agent exits by itself, what it left behind gets SIGTERM, then SIGKILL after
--grace seconds. Its exit mirrors the agent's: the same status, or death by the
same signal, so the caller reads the agent's own exit.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from types import ModuleType

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_POLL_SECS = 0.02
# Exit status when the agent could not be executed (the shell's convention).
CANNOT_EXECUTE = 127
# The name of the cgroup a keeper makes for its agent, under --cgroup.
CGROUP_PREFIX = "ceaseless-agent-"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl.argtypes = [ctypes.c_int, *[ctypes.c_ulong] * 4]
_libc.unshare.argtypes = [ctypes.c_int]
_requests: set[int] = set()


def _prctl(option: int, value: int) -> None:
    if _libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def _unshare(flags: int) -> None:
    if _libc.unshare(flags) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"unshare: {os.strerror(errno)}")


def _note(signum: int, _frame: object) -> None:
    _requests.add(signum)


def _descendants(root: int) -> list[int]:
    """Live (non-zombie) descendants of `root`, parents before children."""
    children: dict[int, list[int]] = {}
    live: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # "pid (comm) state ppid …": comm may hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
        if fields[0] not in (b"Z", b"X"):
            live.add(int(entry))
    found: list[int] = []
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return [pid for pid in found if pid in live]


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _reap(child: int, status: list[int]) -> None:
    """Collect every exited descendant; note the agent's own status."""
    while True:
        try:
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid == child:
            status.append(wait_status)


class Hold:
    """How this keeper holds the agent's processes, and ends them all at once."""

    def __init__(self, mode: str, cgroup_base: str | None) -> None:
        self.mode = mode
        self.init: int | None = None  # pidns, userns: the namespace's init, our child
        self.cgroup: str | None = None
        self._cgroup_procs: int | None = None
        self._alive_pipe: int | None = None
        if mode in ("pidns", "userns"):
            self._enter_pid_namespace(user=mode == "userns")
        elif mode == "cgroup":
            assert cgroup_base is not None, "--contain cgroup needs --cgroup"
            self.cgroup = os.path.join(cgroup_base, f"{CGROUP_PREFIX}{os.getpid()}")
            os.mkdir(self.cgroup)
            if not os.path.exists(os.path.join(self.cgroup, "cgroup.kill")):
                os.rmdir(self.cgroup)
                raise OSError(f"{self.cgroup} has no cgroup.kill (Linux 5.14 and newer have it)")
            self._cgroup_procs = os.open(os.path.join(self.cgroup, "cgroup.procs"), os.O_WRONLY)

    def _enter_pid_namespace(self, *, user: bool) -> None:
        if user:
            uid, gid = os.geteuid(), os.getegid()
            _unshare(_CLONE_NEWUSER)
            # Only our own uid and gid exist in it: the agent gains nothing by it.
            maps = {"setgroups": "deny", "uid_map": f"{uid} {uid} 1", "gid_map": f"{gid} {gid} 1"}
            for name, text in maps.items():
                with open(f"/proc/self/{name}", "w") as f:
                    f.write(text)
        _unshare(_CLONE_NEWPID)
        # The namespace's init: our next child. Held open by us, this pipe reads
        # EOF in the init once we are gone, whichever way we went.
        read_end, self._alive_pipe = os.pipe()
        init = os.fork()
        if init == 0:
            os.close(self._alive_pipe)
            _be_init(read_end)
        os.close(read_end)
        self.init = init

    def join(self) -> None:
        """In the agent's process, before it drops privileges: enter the hold."""
        if self._cgroup_procs is not None:
            os.write(self._cgroup_procs, b"0")

    def kill_all(self) -> None:
        """End every process of the agent at once, where the kernel can."""
        if self.init is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.init, signal.SIGKILL)
        elif self.cgroup is not None:
            kill = os.path.join(self.cgroup, "cgroup.kill")
            with contextlib.suppress(OSError), open(kill, "w") as f:
                f.write("1")

    def others(self, pids: list[int]) -> list[int]:
        """Descendants that are the agent's, not the hold's own init."""
        return [pid for pid in pids if pid != self.init]

    def release(self) -> None:
        if self.cgroup is not None:
            # Empty by now: every descendant has been reaped.
            for _ in range(500):
                try:
                    os.rmdir(self.cgroup)
                    return
                except FileNotFoundError:
                    return
                except OSError:
                    time.sleep(_POLL_SECS)


def _be_init(alive: int) -> None:
    """The pid namespace's init: reap whatever is orphaned to it, until the keeper is gone."""
    try:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        # Blocked, a SIGCHLD stays pending until sigwait takes it: none is missed.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        os.set_blocking(alive, False)
        while True:
            with contextlib.suppress(BlockingIOError):
                if os.read(alive, 1) == b"":  # the keeper died before the death signal was armed
                    os._exit(0)
            with contextlib.suppress(ChildProcessError):
                while os.waitpid(-1, os.WNOHANG)[0] > 0:
                    pass
            signal.sigtimedwait({signal.SIGCHLD}, 1.0)
    finally:
        os._exit(0)


def _kill_everything(me: int, child: int, status: list[int], hold: Hold) -> None:
    """SIGKILL every descendant and reap them, for as long as it takes."""
    hold.kill_all()
    while left := _descendants(me):
        _signal_all(left, signal.SIGKILL)
        time.sleep(_POLL_SECS)
        _reap(child, status)
    _reap(child, status)


def _exit_like(wait_status: int | None) -> None:
    if wait_status is None:
        os._exit(CANNOT_EXECUTE)
    if os.WIFSIGNALED(wait_status):
        sig = os.WTERMSIG(wait_status)
        if sig != signal.SIGKILL:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal that does not kill (SIGCHLD…): the shell's number
    os._exit(os.waitstatus_to_exitcode(wait_status))


def _start_child(
    args: argparse.Namespace, hold: Hold, network: object | None
) -> subprocess.Popen[bytes]:
    def preexec() -> None:
        # In this order: the hold first (a cgroup is entered with our rights),
        # then the agent's user, then its network (a namespace the agent's user
        # owns), then the death signal (a change of user clears it).
        hold.join()
        # What an agent writes (in /tmp too, which lanes share without a
        # sandbox) is its user's alone.
        os.umask(0o077)
        if args.uid is not None:
            os.setgroups([])
            os.setresgid(args.gid, args.gid, args.gid)
            os.setresuid(args.uid, args.uid, args.uid)
        if network is not None:
            # Raises, so that the agent is never executed on the host's network.
            network.enter()  # type: ignore[attr-defined]
        # The agent dies with us if we are ever killed ourselves (SIGKILL as a last resort).
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    child = subprocess.Popen(
        args.argv,
        process_group=0,
        preexec_fn=preexec,
        restore_signals=True,
    )
    # The caller keeps the Popen object for our whole life: dropped, its __del__
    # would waitpid() the agent and swallow its exit status if it had already
    # ended (a fast agent), and we would wait for a status that never comes.
    return child


def _load_egress() -> ModuleType:
    """egress.py, beside this file: run with -I, the keeper has no package path to import from."""
    import importlib.util  # here: only a keeper that serves a proxy pays for it

    spec = importlib.util.spec_from_file_location(
        "ceaseless_egress", os.path.join(os.path.dirname(os.path.abspath(__file__)), "egress.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(prog="reaper")
    parser.add_argument("--parent", type=int, required=True)
    parser.add_argument("--grace", type=float, required=True)
    parser.add_argument("--uid", type=int)
    parser.add_argument("--gid", type=int)
    parser.add_argument(
        "--contain", choices=("pidns", "userns", "cgroup", "rounds"), default="rounds"
    )
    parser.add_argument("--cgroup")
    parser.add_argument("--spare-child", action="store_true")
    parser.add_argument("--egress-open", action="store_true")
    parser.add_argument("--egress-allow", action="append", default=[])
    parser.add_argument("--egress-hosts")
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.argv[:1] == ["--"]:
        args.argv = args.argv[1:]

    for sig in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(sig, _note)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGUSR1)
    if os.getppid() != args.parent:  # the listener died before the death signal was armed
        os._exit(CANNOT_EXECUTE)
    me = os.getpid()
    network = None
    if args.egress_open or args.egress_allow:
        values = ["open"] if args.egress_open else args.egress_allow
        try:
            network = _load_egress().KeeperNetwork(values, args.egress_hosts)
        except (OSError, ValueError) as exc:
            sys.stderr.write(f"ceaseless: cannot set up the agent's egress: {exc}\n")
            os._exit(CANNOT_EXECUTE)
    try:
        hold = Hold(args.contain, args.cgroup)
    except OSError as exc:
        sys.stderr.write(f"ceaseless: cannot hold the agent's processes ({args.contain}): {exc}\n")
        os._exit(CANNOT_EXECUTE)
    # Entering a user namespace may clear the death signal: armed again, checked again.
    _prctl(_PR_SET_PDEATHSIG, signal.SIGUSR1)
    if os.getppid() != args.parent:
        _kill_everything(me, -1, [], hold)
        os._exit(CANNOT_EXECUTE)
    try:
        popen = _start_child(args, hold, network)
    except (OSError, subprocess.SubprocessError) as exc:
        reason = exc if network is None else network.reason(exc)  # type: ignore[attr-defined]
        sys.stderr.write(f"ceaseless: cannot start {args.argv[0]!r}: {reason}\n")
        _kill_everything(me, -1, [], hold)
        hold.release()
        os._exit(CANNOT_EXECUTE)
    if network is not None:
        try:
            network.serve()  # type: ignore[attr-defined]
        except OSError as exc:
            sys.stderr.write(f"ceaseless: {exc}\n")
            popen.kill()
            _kill_everything(me, popen.pid, [], hold)
            hold.release()
            os._exit(CANNOT_EXECUTE)

    child = popen.pid
    status: list[int] = []
    terminated = False
    left_at: float | None = None
    while True:
        _reap(child, status)
        if signal.SIGUSR1 in _requests:
            _kill_everything(me, child, status, hold)
            break
        if signal.SIGTERM in _requests and not terminated:
            terminated = True
            spared = {child} if args.spare_child else set()
            polite = [p for p in hold.others(_descendants(me)) if p not in spared]
            _signal_all(polite, signal.SIGTERM)
        if status:
            left = hold.others(_descendants(me))
            if not left:
                _kill_everything(me, child, status, hold)  # the namespace's init, if any
                break
            if left_at is None:
                # The agent is gone; what it left behind gets the same polite stop.
                left_at = time.monotonic()
                _signal_all(left, signal.SIGTERM)
            elif time.monotonic() >= left_at + args.grace:
                _kill_everything(me, child, status, hold)
                break
        time.sleep(_POLL_SECS)
    hold.release()
    _exit_like(status[0] if status else None)


if __name__ == "__main__":
    main()
