"""The agent's keeper: a tiny parent process that no descendant of the agent outlives.

process.py starts this file (standard library only, run with `python -I`) in place
of the agent; it becomes a child subreaper (PR_SET_CHILD_SUBREAPER), starts the agent
(or the bubblewrap sandbox around it) in a process group of its own, and waits.

    python -I reaper.py --parent PID --grace SECS [--uid UID --gid GID] [--spare-child]
        [--egress-open | --egress-allow ENTRY…] [--egress-hosts FILE] -- ARGV…

Why a process of its own: an agent that calls setsid() or forks twice leaves its
process group and, once its parent exits, is reparented. To a subreaper it comes
back to us rather than to init, so every descendant stays in reach of this one
process, whatever it did to its group or session.

Signals (the protocol process.py speaks):
- SIGTERM: pass SIGTERM on to every descendant (a polite stop; the agent may save
  its session). With --spare-child the direct child, bubblewrap's monitor, is
  spared: it would die of it and take the sandbox down before the agent could exit.
- SIGUSR1: SIGKILL every descendant now, reap them, exit.
- The listener's death arrives as SIGUSR1 too (PR_SET_PDEATHSIG), so a listener
  killed with SIGKILL still leaves nothing behind.

Egress (network.py): with --egress-open or --egress-allow, the child starts in a
network namespace of its own whose only way out is the egress proxy this process
serves (egress.py), on 127.0.0.1:3128 inside it; if that namespace cannot be
made, the child is never executed.

Guarantees: this process exits only once no descendant is left alive; when the
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
_POLL_SECS = 0.02
# Killing a fork bomb is a race: kill, reap, look again, for at most this long.
_KILL_ROUNDS_SECS = 5.0
# Exit status when the agent could not be executed (the shell's convention).
CANNOT_EXECUTE = 127

_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl.argtypes = [ctypes.c_int, *[ctypes.c_ulong] * 4]
_requests: set[int] = set()


def _prctl(option: int, value: int) -> None:
    if _libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


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


def _kill_everything(me: int, child: int, status: list[int]) -> None:
    deadline = time.monotonic() + _KILL_ROUNDS_SECS
    while (left := _descendants(me)) and time.monotonic() < deadline:
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


def _start_child(args: argparse.Namespace, network: object | None) -> subprocess.Popen[bytes]:
    def preexec() -> None:
        if network is not None:
            # Raises, so that the agent is never executed on the host's network.
            network.enter()  # type: ignore[attr-defined]
        # The agent dies with us if we are ever killed ourselves (SIGKILL as a last resort).
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    user = {} if args.uid is None else {"user": args.uid, "group": args.gid, "extra_groups": []}
    child = subprocess.Popen(
        args.argv,
        process_group=0,
        preexec_fn=preexec,
        restore_signals=True,
        **user,  # type: ignore[arg-type]
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
    parser.add_argument("--spare-child", action="store_true")
    parser.add_argument("--egress-open", action="store_true")
    parser.add_argument("--egress-allow", action="append", default=[])
    parser.add_argument("--egress-hosts")
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.argv[:1] == ["--"]:
        args.argv = args.argv[1:]
    network = None
    if args.egress_open or args.egress_allow:
        values = ["open"] if args.egress_open else args.egress_allow
        try:
            network = _load_egress().KeeperNetwork(values, args.egress_hosts)
        except (OSError, ValueError) as exc:
            sys.stderr.write(f"ceaseless: cannot set up the agent's egress: {exc}\n")
            os._exit(CANNOT_EXECUTE)

    for sig in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(sig, _note)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGUSR1)
    if os.getppid() != args.parent:  # the listener died before the death signal was armed
        os._exit(CANNOT_EXECUTE)
    me = os.getpid()
    try:
        popen = _start_child(args, network)
    except (OSError, subprocess.SubprocessError) as exc:
        reason = exc if network is None else network.reason(exc)  # type: ignore[attr-defined]
        sys.stderr.write(f"ceaseless: cannot start {args.argv[0]!r}: {reason}\n")
        os._exit(CANNOT_EXECUTE)
    if network is not None:
        try:
            network.serve()  # type: ignore[attr-defined]
        except OSError as exc:
            sys.stderr.write(f"ceaseless: {exc}\n")
            popen.kill()
            _kill_everything(me, popen.pid, [])
            os._exit(CANNOT_EXECUTE)

    child = popen.pid
    status: list[int] = []
    terminated = False
    left_at: float | None = None
    while True:
        _reap(child, status)
        if signal.SIGUSR1 in _requests:
            _kill_everything(me, child, status)
            break
        if signal.SIGTERM in _requests and not terminated:
            terminated = True
            spared = {child} if args.spare_child else set()
            _signal_all([p for p in _descendants(me) if p not in spared], signal.SIGTERM)
        if status:
            left = _descendants(me)
            if not left:
                break
            if left_at is None:
                # The agent is gone; what it left behind gets the same polite stop.
                left_at = time.monotonic()
                _signal_all(left, signal.SIGTERM)
            elif time.monotonic() >= left_at + args.grace:
                _kill_everything(me, child, status)
                break
        time.sleep(_POLL_SECS)
    _exit_like(status[0] if status else None)


if __name__ == "__main__":
    main()
