"""Running one agent process from spawn to reaped exit, whatever the adapter.

`run_agent` starts the adapter's argv without a shell, writes the prompt to stdin,
feeds stdout to the adapter's parser line by line and returns the parser's RunResult.

Guarantees:
- The agent is confined as `sandbox.Isolation` says: an allowlisted environment
  (environment.py), the bubblewrap sandbox when this host has one, its lane's OS
  user and HOME (users.py; never root when the listener is root). A lane whose
  user cannot be made is a FAILED RunResult: nothing runs as root instead.
- The agent runs under its keeper (reaper.py), a child subreaper in a session of its
  own, holding the agent's processes as containment.py chose for this host. When
  `run_agent` returns, or is cancelled, no descendant of the agent is alive, not
  even one that called setsid(), forked twice or stopped its keeper, and the
  keeper is reaped.
- If the listener dies, even by SIGKILL, the kernel tells the keeper
  (PR_SET_PDEATHSIG, Linux), which kills every descendant. The signal follows the
  *thread* that spawned the keeper, i.e. the thread running the event loop. The
  keeper arms it itself, first thing, and exits if the listener is already gone;
  so the listener runs no code in the child between fork and exec, and Python
  starts the keeper with vfork instead of copying the listener's memory.
- Memory is bounded whatever the agent prints: one stdout line of at most
  `line_limit` bytes (a longer line keeps its first and last halves around a
  marker of what was cut, so that a result line with a long answer in it still
  parses), the last `stderr_limit` bytes of stderr, and what the parser keeps.
- A program that cannot be started is a FAILED RunResult, never an exception.
- An AUTH_FAILED run's error ends its first part with how to log the lane in:
  the OS user and HOME it ran as, and a command that works here (login.py).
- Timeout and cancel both send SIGTERM to every descendant, then SIGKILL after
  `agent.kill_grace_secs` — or sooner when the cancel is a `StopRequest` that asks
  for a shorter grace, even one made while the SIGTERM is already out (a lease
  about to lapse cannot wait for a polite exit). Processes an agent leaves behind
  after exiting by itself get the same treatment: a finished run owns no processes.
- `on_session` is called with the session id as soon as the agent's output names
  one (before the run ends), and again only if it changes.

No decision about *whether* a job may run is made here; that is the database's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterable

from listener import pids
from listener.agents.base import (
    AgentAdapter,
    AgentConfig,
    OutputParser,
    RunResult,
    Task,
    join_cut_line,
    truncate_message,
    with_stderr,
)
from listener.agents.containment import Containment
from listener.agents.environment import agent_environment
from listener.agents.login import login_advice, with_login_advice
from listener.agents.sandbox import Isolation
from listener.enums import Outcome

log = logging.getLogger(__name__)

_CHUNK = 64 << 10
_POLL_SECS = 0.05
# After the group is gone, the pipes reach EOF at once; only a process that escaped
# the group (setsid) can hold them open, and we stop reading after this long.
_DRAIN_SECS = 2.0
_REAP_SECS = 2.0


class StopRequest(asyncio.Event):
    """A cancel that can also say how long SIGTERM lasts before SIGKILL.

    `stop(grace)` sets it; a later call can only shorten the grace. None keeps
    the agent's own kill_grace_secs.
    """

    def __init__(self) -> None:
        super().__init__()
        self.grace: float | None = None

    def stop(self, grace: float | None = None) -> None:
        if grace is not None:
            self.grace = grace if self.grace is None else min(self.grace, grace)
        self.set()


async def run_agent(
    adapter: AgentAdapter,
    agent: AgentConfig,
    task: Task,
    *,
    cancel: asyncio.Event,
    on_session: Callable[[str], None] | None = None,
    line_limit: int = 1 << 20,
    stderr_limit: int = 64 << 10,
    isolation: Isolation | None = None,
) -> RunResult:
    """Run one agent invocation to its end and say what happened.

    `isolation` defaults to what this host and its settings give (Isolation.current).
    """
    if cancel.is_set():
        return RunResult(outcome=Outcome.CANCELLED, error="cancelled before the agent started")
    argv = adapter.argv(agent, task)
    if not argv or not argv[0]:
        return RunResult(outcome=Outcome.FAILED, error=f"agent {agent.name!r} has an empty argv")
    parser = adapter.parser()
    isolation = isolation or Isolation.current()
    if isolation.refusal is not None:
        return RunResult(outcome=Outcome.FAILED, error=f"agent {agent.name!r}: {isolation.refusal}")
    try:
        identity = await asyncio.to_thread(isolation.identity_for, agent.name)
    except (OSError, subprocess.SubprocessError) as exc:
        return RunResult(
            outcome=Outcome.FAILED,
            error=f"agent {agent.name!r}: its lane's OS user or HOME cannot be made: {exc}",
        )
    env = agent_environment(agent, task, identity=identity, tmpdir=isolation.tmpdir())
    try:
        _check_startable(argv[0], env, task.cwd)
        launch = isolation.launch(
            argv,
            task.cwd,
            grace=agent.kill_grace_secs,
            identity=identity,
            private=task.private,
            egress=agent.egress,
        )
        proc = await _spawn(launch, env, task.cwd)
    except (OSError, subprocess.SubprocessError) as exc:
        return RunResult(outcome=Outcome.FAILED, error=_spawn_error(exc, argv[0], agent, task))
    held = isolation.containment

    stderr_tail = bytearray()
    spent = asyncio.Event()
    watch = _budget_watch(parser, task, spent)
    io_tasks = [
        asyncio.create_task(_write_prompt(proc, task.prompt)),
        asyncio.create_task(_read_lines(proc, parser, line_limit, on_session, watch)),
        asyncio.create_task(_read_tail(proc, stderr_tail, stderr_limit)),
    ]
    try:
        ending = await _supervise(proc, agent, cancel, held, spent)
        await _finish_io(io_tasks)
    except BaseException:
        # Listener shutdown (or a bug here): the agent must not outlive this call.
        _kill_now(proc.pid)
        _cancel_all(io_tasks)
        await _reap_briefly(proc)
        _kill_without_keeper(proc, held)
        raise
    stderr_text = bytes(stderr_tail).decode("utf-8", "replace")
    result = _finalize(
        _parse_result(parser, proc.returncode, stderr_text),
        agent,
        proc.returncode,
        ending,
        stderr_text,
    )
    if result.outcome is Outcome.AUTH_FAILED:
        # Only here are the user and HOME the agent ran as known.
        advice = login_advice(agent, env, identity)
        result.error = truncate_message(with_login_advice(result.error, advice))
    return result


def _check_startable(executable: str, env: dict[str, str], cwd: str | None) -> None:
    """Raise what exec() would, here, so the error names the agent's executable.

    The keeper (and the sandbox) execute the agent; an error there would read as
    theirs. Run as the listener's user, so it cannot prove the agent's user may
    execute it: that error still comes, later, from the keeper's stderr.
    """
    if cwd is not None and not os.path.isdir(cwd):
        raise FileNotFoundError(2, "No such directory", cwd)
    if os.sep in executable:
        path = executable if os.path.isabs(executable) else os.path.join(cwd or ".", executable)
    else:
        path = shutil.which(executable, os.F_OK, env.get("PATH")) or ""
    if not path or not os.path.exists(path):
        raise FileNotFoundError(2, "No such file or directory", executable)
    if os.path.isdir(path) or not os.access(path, os.X_OK):
        raise PermissionError(13, "Permission denied", executable)


async def _spawn(
    argv: list[str], env: dict[str, str], cwd: str | None
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,
        limit=_CHUNK,
    )


def _spawn_error(exc: BaseException, executable: str, agent: AgentConfig, task: Task) -> str:
    if isinstance(exc, OSError) and task.cwd is not None and exc.filename == task.cwd:
        return f"agent {agent.name!r}: working directory {task.cwd!r} unusable: {exc.strerror}"
    if isinstance(exc, FileNotFoundError):
        problem = "not found"
    elif isinstance(exc, PermissionError):
        problem = "is not executable (permission denied)"
    else:
        problem = "could not be started"
    return f"agent {agent.name!r}: executable {executable!r} {problem} ({exc})"


async def _write_prompt(proc: asyncio.subprocess.Process, prompt: str) -> None:
    stdin = proc.stdin
    assert stdin is not None
    try:
        stdin.write(prompt.encode("utf-8", "replace"))
        await stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the agent closed stdin or exited without reading; its output tells why
    finally:
        stdin.close()


class _Line:
    """One stdout line being read, holding at most `limit` bytes of it.

    A line that grows past the limit keeps its first and its last `limit // 2`
    bytes and counts what fell between (join_cut_line puts the two together).
    """

    def __init__(self, limit: int) -> None:
        self._keep = max(limit // 2, 1)
        self._limit = limit
        self._head = bytearray()
        self._tail = bytearray()
        self._dropped = 0
        self._over = False

    def add(self, piece: bytes) -> None:
        if not self._over:
            if len(self._head) + len(piece) <= self._limit:
                self._head += piece
                return
            self._over = True
            combined = bytes(self._head) + piece
            self._head = bytearray(combined[: self._keep])
            piece = combined[self._keep :]
        self._tail += piece
        if len(self._tail) > self._keep:
            self._dropped += len(self._tail) - self._keep
            del self._tail[: len(self._tail) - self._keep]

    def __bool__(self) -> bool:
        return bool(self._head)

    def take(self) -> bytearray:
        """The whole line (or its head and tail around a marker), and start the next."""
        line = self._head
        if self._over:
            line = bytearray(join_cut_line(bytes(self._head), bytes(self._tail), self._dropped))
        self._head, self._tail, self._dropped, self._over = bytearray(), bytearray(), 0, False
        return line


def _budget_watch(
    parser: OutputParser, task: Task, spent: asyncio.Event
) -> Callable[[], None] | None:
    """A check, run after each line, that sets `spent` once the agent's reported usage reaches
    what its job may still spend (task.budget_usd, task.budget_tokens, from claim_jobs); None
    when the job has no ceiling or the parser reports no usage (the command adapter).

    For the CLIs without a budget flag of their own (opencode; Claude Code's tokens). Whether
    the run passed its ceiling is judged again in finish_runs, on the usage it reports.
    """
    usage = getattr(parser, "spent", None)
    if usage is None or (task.budget_usd is None and task.budget_tokens is None):
        return None

    def check() -> None:
        cost, tokens = usage()
        if (task.budget_usd is not None and cost is not None and cost >= task.budget_usd) or (
            task.budget_tokens is not None and tokens is not None and tokens >= task.budget_tokens
        ):
            spent.set()

    return check


async def _read_lines(
    proc: asyncio.subprocess.Process,
    parser: OutputParser,
    limit: int,
    on_session: Callable[[str], None] | None,
    watch: Callable[[], None] | None = None,
) -> None:
    """Feed stdout to the parser one line at a time, holding at most `limit` bytes of one."""
    stream = proc.stdout
    assert stream is not None
    line = _Line(limit)
    session: str | None = None
    while chunk := await stream.read(_CHUNK):
        pieces = chunk.split(b"\n")
        for i, piece in enumerate(pieces):
            line.add(piece)
            if i < len(pieces) - 1:
                _feed(parser, line.take())
        if watch is not None:
            watch()
        if on_session is not None and parser.session_id not in (None, session):
            session = parser.session_id
            _report_session(on_session, session)
    if line:
        _feed(parser, line.take())


def _report_session(on_session: Callable[[str], None], session: str | None) -> None:
    if session is None:
        return
    try:
        on_session(session)
    except Exception:
        log.exception("session callback failed; the run goes on")


def _feed(parser: OutputParser, line: bytearray) -> None:
    if line.endswith(b"\r"):
        del line[-1:]
    try:
        parser.feed(bytes(line))
    except Exception:
        # A parser bug must not stop the draining, or the agent blocks on a full pipe.
        log.exception("agent output parser failed on a line; line skipped")


async def _read_tail(proc: asyncio.subprocess.Process, tail: bytearray, limit: int) -> None:
    stream = proc.stderr
    assert stream is not None
    while chunk := await stream.read(_CHUNK):
        tail += chunk
        if len(tail) > limit:
            del tail[: len(tail) - limit]


async def _supervise(
    proc: asyncio.subprocess.Process,
    agent: AgentConfig,
    cancel: asyncio.Event,
    held: Containment,
    spent: asyncio.Event | None = None,
) -> Outcome | None:
    """Wait for the agent to end; None if it exited by itself, else why it was stopped."""
    exited = asyncio.ensure_future(_leader_exit(proc))
    cancelled = asyncio.ensure_future(cancel.wait())
    over = asyncio.ensure_future((spent or asyncio.Event()).wait())
    try:
        done, _ = await asyncio.wait(
            {exited, cancelled, over},
            timeout=agent.timeout_secs,
            return_when=asyncio.FIRST_COMPLETED,
        )
    finally:
        _cancel_all((exited, cancelled, over))
    if exited in done:
        ending = None
    elif cancelled in done:
        ending = Outcome.CANCELLED
    else:
        ending = Outcome.BUDGET_EXHAUSTED if over in done else Outcome.TIMED_OUT
    await _stop_group(proc, lambda: _grace(agent, cancel), held)
    return ending


def _grace(agent: AgentConfig, cancel: asyncio.Event) -> float:
    requested = cancel.grace if isinstance(cancel, StopRequest) else None
    return agent.kill_grace_secs if requested is None else min(requested, agent.kill_grace_secs)


async def _stop_group(
    proc: asyncio.subprocess.Process, grace: Callable[[], float], held: Containment
) -> None:
    """SIGTERM the group, SIGKILL it after `grace()` seconds, and reap the leader.

    The grace is read again while waiting, so a stop request that shortens it
    takes effect at once.
    """
    pgid = proc.pid
    if proc.returncode is None or _group_alive(pgid):
        _signal_group(pgid, signal.SIGTERM)
        started = asyncio.get_running_loop().time()
        while asyncio.get_running_loop().time() < started + grace() and (
            proc.returncode is None or _group_alive(pgid)
        ):
            await asyncio.sleep(_POLL_SECS)
        while proc.returncode is None:
            _kill_now(pgid)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_leader_exit(proc), _REAP_SECS)
            if not held.needs_keeper:
                break
            # Only the keeper can find what it holds: it is waited for, never
            # killed, and woken should an agent of the same user have stopped it.
            _signal_group(pgid, signal.SIGCONT)
        _kill_without_keeper(proc, held)
    await _leader_exit(proc)


async def _leader_exit(proc: asyncio.subprocess.Process) -> None:
    """Wait until the agent itself has exited and been reaped.

    Not `proc.wait()`: that also waits for stdout and stderr to close, which a
    process the agent left behind can hold open for as long as it lives.
    """
    while proc.returncode is None:
        await asyncio.sleep(_POLL_SECS)


def _kill_now(keeper: int) -> None:
    """Ask the keeper to SIGKILL every descendant of the agent, then exit (reaper.py)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(keeper, signal.SIGUSR1)
        os.kill(keeper, signal.SIGCONT)  # an agent running as our user may have stopped it


def _kill_without_keeper(keeper: asyncio.subprocess.Process, held: Containment) -> None:
    """End a keeper that did not answer, and what it holds (its pid namespace dies
    with it; its cgroup is killed here). Only while it is unreaped: then its pid,
    and the cgroup named after it, cannot be another run's."""
    if keeper.returncode is None:
        held.kill_all(keeper.pid)
        _signal_group(keeper.pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # nothing left in the group
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    """Whether a non-zombie process is in the group (zombies wait for a reaper, not us)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return pids.exists(pgid, group=True)
    return any(e.isdigit() and _proc_group_state(e) == (pgid, True) for e in entries)


def _proc_group_state(pid: str) -> tuple[int, bool] | None:
    """(process group, alive) of a /proc entry; None if it vanished meanwhile."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
    fields = stat[stat.rfind(b")") + 2 :].split()
    if len(fields) < 3:
        return None
    return int(fields[2]), fields[0] not in (b"Z", b"X")


async def _finish_io(tasks: list[asyncio.Task[None]]) -> None:
    _, pending = await asyncio.wait(tasks, timeout=_DRAIN_SECS)
    _cancel_all(pending)
    for outcome in await asyncio.gather(*tasks, return_exceptions=True):
        if isinstance(outcome, Exception):
            log.error("agent I/O failed: %r", outcome)


def _cancel_all(tasks: Iterable[asyncio.Future[object]]) -> None:
    for task in tasks:
        task.cancel()


async def _reap_briefly(proc: asyncio.subprocess.Process) -> None:
    try:
        await asyncio.wait_for(_leader_exit(proc), _REAP_SECS)
    except Exception:
        log.warning("agent pid %d not reaped after SIGKILL", proc.pid)


def _parse_result(parser: OutputParser, exit_status: int | None, stderr_text: str) -> RunResult:
    try:
        return parser.finish(exit_status, stderr_text)
    except Exception as exc:
        log.exception("agent output parser failed at finish")
        return RunResult(
            outcome=Outcome.FAILED,
            error=with_stderr(f"could not read the agent's output: {exc!r}", stderr_text),
        )


def _finalize(
    result: RunResult,
    agent: AgentConfig,
    exit_status: int | None,
    ending: Outcome | None,
    stderr_text: str,
) -> RunResult:
    result.exit_status = exit_status
    if ending is Outcome.TIMED_OUT:
        result.outcome = ending
        result.error = with_stderr(
            f"timed out after {agent.timeout_secs}s; the agent's process group was stopped",
            stderr_text,
        )
    elif ending is Outcome.CANCELLED:
        result.outcome = ending
        result.error = "cancelled; the agent's process group was stopped"
    elif ending is Outcome.BUDGET_EXHAUSTED and result.outcome is not ending:
        # Stopped on its streamed usage; an agent that stopped at its own
        # budget flag (Claude Code's result line) keeps its own words.
        result.outcome = ending
        result.error = (
            "the agent's reported usage reached what its job may still spend (job.max_cost_usd, "
            "job.max_tokens); the agent's process group was stopped"
        )
    if result.model is None:
        result.model = agent.model  # the stream did not say; the requested one is still true
    result.final_message = truncate_message(result.final_message)
    result.error = truncate_message(result.error)
    return result
