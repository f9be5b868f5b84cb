"""run_agent against real processes: stdin, env, timeouts, cancel, groups, bounds."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from listener.agents import adapter_for, run_agent
from listener.agents.base import FINAL_MESSAGE_LIMIT, AgentConfig, RunResult
from listener.enums import Adapter, Billing, Outcome
from tests.factories import STARTED_AGENT_TIMEOUT_SECS

from .support import (
    FAKE_AGENT,
    FAKE_CLAUDE,
    FAKE_OPENCODE,
    agent,
    alive,
    kill_quietly,
    read_pids,
    run,
    task,
    wait_until,
)


def fake_agent(
    mode: str, tmp_path: Path | None = None, *, timeout_secs: int = 30, **env: str
) -> AgentConfig:
    """The generic fake agent; its pids go to tmp_path / "pids" when tmp_path is given."""
    env = {"FAKE_AGENT_MODE": mode, **env}
    if tmp_path is not None:
        env["FAKE_AGENT_PID_FILE"] = str(tmp_path / "pids")
    return agent(Adapter.COMMAND, [FAKE_AGENT], env=env, timeout_secs=timeout_secs)


def python_agent(code: str, **kwargs) -> AgentConfig:
    return agent(Adapter.COMMAND, [sys.executable, "-c", code], **kwargs)


def test_prompt_arrives_on_stdin():
    r = run(fake_agent("ok"), task("résumé: fix the flaky test"))
    assert r.outcome == Outcome.SUCCEEDED
    assert r.exit_status == 0
    assert r.final_message == "received prompt: résumé: fix the flaky test\nall good"


def test_a_large_prompt_is_written_while_output_is_read():
    prompt = ("p" * 1000 + "\n") * 3000 + "END-OF-PROMPT"  # 3 MB, more than any pipe buffer
    r = run(fake_agent("ok"), task(prompt))
    assert r.outcome == Outcome.SUCCEEDED
    assert (r.final_message or "").endswith("END-OF-PROMPT\nall good")


def test_an_agent_that_never_reads_stdin_is_fine():
    r = run(fake_agent("sleep", FAKE_AGENT_SLEEP="0.2"), task("x" * (2 << 20)))
    assert r.outcome == Outcome.SUCCEEDED


def test_environment_carries_agent_env_and_run_ids():
    code = (
        "import os; e = os.environ;"
        "print(e['CEASELESS_JOB_ID'], e['CEASELESS_RUN_ID'], e['TOKEN'], e['PATH'] != '')"
    )
    config = python_agent(code, env={"TOKEN": "t0k", "CEASELESS_JOB_ID": "spoofed"})
    assert run(config).final_message == "job-1 run-1 t0k True"


def test_cwd_is_the_task_directory(tmp_path):
    r = run(python_agent("import os; print(os.getcwd())"), task(cwd=str(tmp_path)))
    assert r.final_message == str(tmp_path)


def test_agent_runs_in_its_own_session_and_group():
    # The session is its keeper's (reaper.py), which leads it; the group is the agent's.
    # Read from /proc, not getsid(): a keeper's pid namespace (and a test runner whose
    # own session leader lies outside its namespace) makes getsid() answer 0.
    code = (
        "import os; s = open('/proc/self/stat').read();"
        "ppid, pgrp, sid = s[s.rfind(')') + 2:].split()[1:4];"
        "print(sid == ppid, pgrp == os.readlink('/proc/self'), sid)"
    )
    leads_its_session, leads_its_group, session = run(python_agent(code)).final_message.split()
    assert (leads_its_session, leads_its_group) == ("True", "True")
    ours = Path("/proc/self/stat").read_text()
    assert session != ours[ours.rfind(")") + 2 :].split()[3]  # not the listener's session


def test_model_falls_back_to_the_configured_one():
    assert run(python_agent("print(1)", model="gpt-x")).model == "gpt-x"


def test_timeout_kills_the_whole_group(tmp_path):
    started = time.monotonic()
    timeout = STARTED_AGENT_TIMEOUT_SECS
    r = run(fake_agent("spawn_child_and_sleep", tmp_path, timeout_secs=timeout))
    elapsed = time.monotonic() - started
    pids = read_pids(tmp_path / "pids")
    try:
        assert r.outcome == Outcome.TIMED_OUT
        assert f"timed out after {timeout}s" in (r.error or "")
        assert len(pids) == 2
        assert not os.path.exists(f"/proc/{pids[0]}"), "the agent was not reaped"
        assert wait_until(lambda: not any(map(alive, pids)), 2.0), "a group member survived"
        assert elapsed < timeout + 6  # the timeout, not the 30 s default nor the sleep
    finally:
        kill_quietly(pids)


def test_sigterm_ignorer_is_killed_after_the_grace_period(tmp_path):
    started = time.monotonic()
    timeout = STARTED_AGENT_TIMEOUT_SECS
    r = run(fake_agent("ignore_sigterm", tmp_path, timeout_secs=timeout))
    elapsed = time.monotonic() - started
    pids = read_pids(tmp_path / "pids")
    try:
        assert r.outcome == Outcome.TIMED_OUT
        assert r.exit_status == -9
        assert elapsed >= timeout + 0.9  # the timeout + 1 s grace
        assert not any(map(alive, pids))
    finally:
        kill_quietly(pids)


def test_cancel_stops_the_agent(tmp_path):
    config = agent(
        Adapter.COMMAND,
        [FAKE_AGENT],
        env={
            "FAKE_AGENT_MODE": "spawn_child_and_sleep",
            "FAKE_AGENT_PID_FILE": str(tmp_path / "pids"),
        },
        timeout_secs=60,
        kill_grace_secs=5,
    )

    async def scenario() -> RunResult:
        cancel = asyncio.Event()
        runner = asyncio.create_task(
            run_agent(adapter_for(Adapter.COMMAND), config, task(), cancel=cancel)
        )
        await _started(tmp_path / "pids")
        cancel.set()
        return await runner

    r = asyncio.run(scenario())
    pids = read_pids(tmp_path / "pids")
    try:
        assert r.outcome == Outcome.CANCELLED
        assert r.exit_status == -15  # SIGTERM was enough; no SIGKILL after the 5 s grace
        assert wait_until(lambda: not any(map(alive, pids)), 2.0)
    finally:
        kill_quietly(pids)


async def _started(pid_file: Path) -> None:
    """Wait until the fake agent has written its pids, i.e. is up and running."""
    for _ in range(500):
        if pid_file.exists():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{pid_file} never appeared")


def test_cancel_before_start_spawns_nothing(tmp_path):
    cancel = asyncio.Event()
    cancel.set()
    r = run(fake_agent("sleep", tmp_path), cancel=cancel)
    assert r.outcome == Outcome.CANCELLED
    assert not (tmp_path / "pids").exists()


def test_task_cancellation_kills_the_group_then_propagates(tmp_path):
    config = fake_agent("spawn_child_and_sleep", tmp_path, timeout_secs=60)

    async def scenario() -> None:
        runner = asyncio.create_task(
            run_agent(adapter_for(Adapter.COMMAND), config, task(), cancel=asyncio.Event())
        )
        await _started(tmp_path / "pids")
        runner.cancel()
        with pytest.raises(asyncio.CancelledError):
            await runner

    asyncio.run(scenario())
    pids = read_pids(tmp_path / "pids")
    try:
        assert wait_until(lambda: not any(map(alive, pids)), 3.0)
    finally:
        kill_quietly(pids)


def test_processes_left_behind_after_a_normal_exit_are_stopped(tmp_path):
    # The background sleeper also holds stdout open: the run must not wait for it.
    # Its pid as the host sees it (the keeper may run agents in a pid namespace):
    # the children of this process in /proc, which is the host's.
    code = (
        "import os, subprocess, sys, pathlib;"
        "p = subprocess.Popen(['sleep', '300']);"
        "me = os.readlink('/proc/self');"
        "host = open(f'/proc/{me}/task/{me}/children').read().split()[0];"
        f"pathlib.Path({str(tmp_path / 'pids')!r}).write_text(host);"
        "print('left a sleeper behind')"
    )
    started = time.monotonic()
    r = run(python_agent(code, timeout_secs=60))
    pids = read_pids(tmp_path / "pids")
    try:
        assert r.outcome == Outcome.SUCCEEDED
        assert r.final_message == "left a sleeper behind"
        assert time.monotonic() - started < 5
        assert wait_until(lambda: not alive(pids[0]), 2.0)
    finally:
        kill_quietly(pids)


def test_flood_is_read_in_bounded_memory_and_time():
    tracemalloc.start()
    try:
        started = time.monotonic()
        r = run(fake_agent("flood"))
        elapsed = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert r.outcome == Outcome.SUCCEEDED
    assert len(r.final_message or "") <= FINAL_MESSAGE_LIMIT
    assert (r.final_message or "").endswith("flood done")
    assert peak < 16 << 20, f"peak {peak} bytes while reading 50 MB"
    assert elapsed < 20


class _LineRecorder:
    def __init__(self) -> None:
        self.longest = 0
        self.lines = 0

    def feed(self, line: bytes) -> None:
        self.longest = max(self.longest, len(line))
        self.lines += 1

    def finish(self, exit_status: int | None, stderr_tail: str) -> RunResult:
        return RunResult(outcome=Outcome.SUCCEEDED, final_message=f"{self.lines} {self.longest}")


class _RecordingAdapter:
    def __init__(self, parser) -> None:
        self._parser = parser

    def argv(self, agent: AgentConfig, task) -> list[str]:
        return list(agent.argv)

    def parser(self):
        return self._parser


def test_long_lines_are_cut_at_the_line_limit():
    recorder = _LineRecorder()
    config = fake_agent("flood", FAKE_AGENT_FLOOD_MB="4")
    result = asyncio.run(
        run_agent(
            _RecordingAdapter(recorder), config, task(), cancel=asyncio.Event(), line_limit=4096
        )
    )
    assert result.outcome == Outcome.SUCCEEDED
    # The 2 MB line without a newline, cut: its first and last 2048 bytes around a
    # marker of what fell between.
    assert 4096 < recorder.longest <= 4096 + len("…[2097152 bytes cut]…".encode())
    assert recorder.lines > 2000  # the 1000-byte lines came through one by one


class _Exploding(_LineRecorder):
    def feed(self, line: bytes) -> None:
        super().feed(line)
        raise RuntimeError("parser bug")


def test_a_parser_bug_does_not_stop_the_draining():
    recorder = _Exploding()
    config = fake_agent("flood", FAKE_AGENT_FLOOD_MB="1")
    result = asyncio.run(
        run_agent(_RecordingAdapter(recorder), config, task(), cancel=asyncio.Event())
    )
    assert result.outcome == Outcome.SUCCEEDED
    assert recorder.lines > 500


def test_stderr_is_kept_as_a_bounded_tail():
    code = "import sys; sys.stderr.write('x' * 1_000_000 + 'LAST WORDS'); sys.exit(5)"
    r = asyncio.run(
        run_agent(
            adapter_for(Adapter.COMMAND),
            python_agent(code),
            task(),
            cancel=asyncio.Event(),
            stderr_limit=1000,
        )
    )
    assert r.outcome == Outcome.FAILED
    assert (r.error or "").endswith("LAST WORDS")
    assert len(r.error or "") < 1200


def test_missing_executable_fails_with_a_clear_error():
    config = agent(Adapter.CLAUDE_CODE, ["/nonexistent/bin/claude"])
    r = run(config)
    assert r.outcome == Outcome.FAILED
    assert "/nonexistent/bin/claude" in (r.error or "")
    assert "not found" in (r.error or "")
    assert config.name in (r.error or "")


def test_non_executable_file_fails_with_a_clear_error(tmp_path):
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    r = run(agent(Adapter.COMMAND, [str(script)]))
    assert r.outcome == Outcome.FAILED
    assert "not executable" in (r.error or "")


def test_missing_working_directory_fails_with_a_clear_error(tmp_path):
    r = run(fake_agent("ok"), task(cwd=str(tmp_path / "gone")))
    assert r.outcome == Outcome.FAILED
    assert "working directory" in (r.error or "")


def test_empty_argv_fails():
    r = run(agent(Adapter.COMMAND, []))
    assert r.outcome == Outcome.FAILED
    assert "empty argv" in (r.error or "")


CLAUDE_SESSION = "2e9efa04-03b0-4d19-8375-7bd5817c3e8b"
OPENCODE_SESSION = "ses_dcfda6cdfffephB54bHuC7SIsm"

CLAUDE_MODES = {
    "success": Outcome.SUCCEEDED,
    "max_turns": Outcome.BUDGET_EXHAUSTED,
    "output_limit": Outcome.OUTPUT_BUDGET_EXHAUSTED,
    "rate_limit": Outcome.RATE_LIMITED,
    "usage_limit_legacy": Outcome.RATE_LIMITED,
    "error": Outcome.FAILED,
    "crash": Outcome.FAILED,
    "hang": Outcome.TIMED_OUT,
    "not_logged_in": Outcome.AUTH_FAILED,
}


@pytest.mark.parametrize(("mode", "expected"), CLAUDE_MODES.items())
def test_fake_claude_modes_end_to_end(mode, expected):
    env = {"FAKE_CLAUDE_MODE": mode, "FAKE_CLAUDE_API_KEY_SOURCE": "ANTHROPIC_API_KEY"}
    timeout = STARTED_AGENT_TIMEOUT_SECS if mode == "hang" else 30
    config = agent(Adapter.CLAUDE_CODE, [FAKE_CLAUDE], env=env, timeout_secs=timeout)
    r = run(config, task("the prompt", resume_session_id=CLAUDE_SESSION, max_turns=9))
    assert r.outcome == expected
    assert r.session_id == CLAUDE_SESSION
    # A run that could not authenticate was billed to nobody.
    assert r.billing == (Billing.UNKNOWN if expected is Outcome.AUTH_FAILED else Billing.API_KEY)
    if mode == "success":
        assert (r.final_message or "").endswith("Prompt received: the prompt")
        assert (r.tokens_in, r.tokens_out, r.num_turns) == (6012, 345, 3)
    if mode in ("rate_limit", "usage_limit_legacy"):
        assert r.rate_limit_reset_at is not None


def test_fake_claude_reports_a_pull_request():
    env = {
        "FAKE_CLAUDE_RESULT": "Opened https://github.com/acme/app/pull/9\nbranch: ceaseless/run-1",
    }
    r = run(agent(Adapter.CLAUDE_CODE, [FAKE_CLAUDE], env=env))
    assert r.pull_request is not None
    assert (r.pull_request.number, r.pull_request.head_branch) == (9, "ceaseless/run-1")


OPENCODE_MODES = {
    "success": Outcome.SUCCEEDED,
    "output_limit": Outcome.OUTPUT_BUDGET_EXHAUSTED,
    "rate_limit": Outcome.RATE_LIMITED,
    "error": Outcome.FAILED,
    "crash": Outcome.FAILED,
    "hang": Outcome.TIMED_OUT,
    "not_logged_in": Outcome.AUTH_FAILED,
    "key_rejected": Outcome.AUTH_FAILED,
}


@pytest.mark.parametrize(("mode", "expected"), OPENCODE_MODES.items())
def test_fake_opencode_modes_end_to_end(mode, expected):
    timeout = STARTED_AGENT_TIMEOUT_SECS if mode == "hang" else 30
    config = agent(
        Adapter.OPENCODE, [FAKE_OPENCODE], env={"FAKE_OPENCODE_MODE": mode}, timeout_secs=timeout
    )
    r = run(config, task("the prompt", resume_session_id=OPENCODE_SESSION))
    assert r.outcome == expected
    assert r.session_id == OPENCODE_SESSION
    if mode == "success":
        assert (r.final_message or "").endswith("Prompt received: the prompt")
        assert r.num_turns == 2
    if mode == "rate_limit":
        assert r.rate_limit_reset_at is not None


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("ok", Outcome.SUCCEEDED), ("fail", Outcome.FAILED), ("json", Outcome.SUCCEEDED)],
)
def test_fake_agent_modes_end_to_end(mode, expected):
    r = run(fake_agent(mode), task("the prompt"))
    assert r.outcome == expected
    assert "the prompt" in (r.final_message or "") or mode == "fail"


def test_a_long_json_line_keeps_both_ends_and_stays_valid_json():
    from listener.agents.base import join_cut_line

    # Cuts that split a UTF-8 character, a \uXXXX escape or an escaped quote.
    for middle in ("é" * 3000, "\\u00e9" * 3000, '\\"' * 3000, "\\\\" * 3000):
        line = ('{"type": "result", "result": "start ' + middle + ' end", "n": 1}').encode()
        for cut in range(1, 9):
            head, tail = line[: 4000 + cut], line[-(4000 + cut) :]
            joined = join_cut_line(head, tail, len(line) - len(head) - len(tail))
            value = json.loads(joined)
            assert value["n"] == 1 and value["result"].startswith("start ")
            assert value["result"].endswith(" end") and "bytes cut]" in value["result"]
