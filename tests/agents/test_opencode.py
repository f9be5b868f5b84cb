"""opencode adapter: argv and the reading of `opencode run --format json` events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from listener.agents.opencode import OpencodeAdapter, OpencodeJsonParser
from listener.enums import Adapter, Billing, Outcome

from .support import agent, feed, task

SESSION = "ses_494719016ffe85dkDMj0FPRbHK"
NOW = datetime(2026, 8, 26, 19, 0, tzinfo=UTC)


def event(kind: str, **data) -> dict:
    return {"type": kind, "timestamp": 1767036059338, "sessionID": SESSION} | data


def step_start() -> dict:
    return event("step_start", part={"type": "step-start", "snapshot": "4b825dc6"})


def text(value: str) -> dict:
    return event("text", part={"type": "text", "text": value, "time": {"start": 1, "end": 2}})


def step_finish(reason: str = "stop", cost: float = 0.01) -> dict:
    tokens = {"input": 100, "output": 40, "reasoning": 10, "cache": {"read": 2000, "write": 300}}
    return event(
        "step_finish",
        part={"type": "step-finish", "reason": reason, "cost": cost, "tokens": tokens},
    )


def error(name: str, **data) -> dict:
    return event("error", error={"name": name, "data": data})


def parse(*lines, exit_status: int | None = 0, stderr: str = ""):
    return feed(OpencodeJsonParser(now=lambda: NOW), lines).finish(exit_status, stderr)


def test_argv_adds_run_and_json_format():
    config = agent(
        Adapter.OPENCODE, ["/usr/local/bin/opencode"], model="anthropic/claude-sonnet-4-5"
    )
    argv = OpencodeAdapter().argv(config, task(resume_session_id=SESSION, max_turns=5))
    assert argv == [
        "/usr/local/bin/opencode",
        "run",
        "--format",
        "json",
        "--model",
        "anthropic/claude-sonnet-4-5",
        f"--session={SESSION}",
    ]


def test_argv_keeps_a_configured_run_subcommand_and_its_flags():
    argv = OpencodeAdapter().argv(agent(Adapter.OPENCODE, ["opencode", "run", "--auto"]), task())
    assert argv == ["opencode", "run", "--auto", "--format", "json"]


def test_success_sums_steps_and_keeps_the_last_answer():
    r = parse(
        step_start(),
        text("Let me look."),
        event("tool_use", part={"type": "tool", "tool": "bash", "state": {"status": "completed"}}),
        step_finish("tool-calls", cost=0.02),
        step_start(),
        text("All done."),
        text("Bye."),
        step_finish("stop", cost=0.03),
        event("done", reason="idle", rejected=[]),
    )
    assert r.outcome == Outcome.SUCCEEDED
    assert r.final_message == "All done.\nBye."
    assert r.session_id == SESSION
    assert r.tokens_in == 2 * (100 + 2000 + 300)
    assert r.tokens_out == 2 * (40 + 10)
    assert r.cost_usd is not None and abs(r.cost_usd - 0.05) < 1e-9
    assert r.num_turns == 2
    assert r.billing == Billing.UNKNOWN
    assert r.model is None


def test_final_step_without_text_keeps_the_earlier_answer():
    r = parse(
        step_start(), text("The answer."), step_finish("tool-calls"), step_start(), step_finish()
    )
    assert r.final_message == "The answer."


def test_finish_reason_length_is_output_budget_exhausted():
    r = parse(step_start(), text("partial"), step_finish("length"))
    assert r.outcome == Outcome.OUTPUT_BUDGET_EXHAUSTED


def test_output_length_error_is_output_budget_exhausted():
    r = parse(step_start(), error("MessageOutputLengthError"), exit_status=1)
    assert r.outcome == Outcome.OUTPUT_BUDGET_EXHAUSTED


def test_rate_limit_with_retry_after_seconds():
    r = parse(
        step_start(),
        error(
            "APIError",
            message="Too Many Requests",
            statusCode=429,
            isRetryable=True,
            responseHeaders={"Retry-After": "120"},
        ),
        exit_status=1,
    )
    assert r.outcome == Outcome.RATE_LIMITED
    assert r.rate_limit_reset_at == NOW + timedelta(seconds=120)
    assert "Too Many Requests" in (r.error or "")


def test_rate_limit_with_retry_after_ms_and_http_date():
    ms = parse(
        error("APIError", message="x", statusCode=429, responseHeaders={"retry-after-ms": "1500"})
    )
    assert ms.rate_limit_reset_at == NOW + timedelta(milliseconds=1500)
    dated = parse(
        error(
            "APIError",
            message="x",
            statusCode=429,
            responseHeaders={"retry-after": "Wed, 26 Aug 2026 21:00:00 GMT"},
        )
    )
    assert dated.rate_limit_reset_at == datetime(2026, 8, 26, 21, 0, tzinfo=UTC)


def test_rate_limit_named_only_in_the_message():
    r = parse(
        error("APIError", message="Rate limit reached for requests", isRetryable=True),
        exit_status=1,
    )
    assert r.outcome == Outcome.RATE_LIMITED
    assert r.rate_limit_reset_at is None


def test_other_errors_fail_with_name_message_and_stderr():
    r = parse(
        step_start(),
        error("UnknownError", message="Unexpected server error.", ref="err_5cafe27d"),
        exit_status=1,
        stderr="server trace",
    )
    assert r.outcome == Outcome.FAILED
    assert "UnknownError: Unexpected server error." in (r.error or "")
    assert "server trace" in (r.error or "")


def test_odd_error_shapes_still_fail():
    assert parse(event("error", error="plain string"), exit_status=1).outcome == Outcome.FAILED
    assert (
        parse(event("error", error={"message": "no name"}), exit_status=1).outcome == Outcome.FAILED
    )


def test_crash_without_error_event_fails_with_stderr():
    r = parse(step_start(), text("working"), exit_status=3, stderr="segfault")
    assert r.outcome == Outcome.FAILED
    assert "status 3" in (r.error or "")
    assert "segfault" in (r.error or "")
    assert r.final_message == "working"


def test_clean_exit_without_any_step_is_a_failure():
    assert parse(exit_status=0).outcome == Outcome.FAILED


def test_content_filter_is_a_failure():
    assert parse(step_start(), step_finish("content-filter")).outcome == Outcome.FAILED


def test_garbage_lines_are_ignored():
    r = parse(
        b"not json",
        b"\xff\xfe",
        b'{"type": "step_finish", "part": {"tok',
        b"[" * 50_000,
        event("step_finish", part="not a dict"),
        event("text", part={"text": 42}),
        event("something_new", part={}),
        step_start(),
        text("ok"),
        step_finish(),
    )
    assert r.outcome == Outcome.SUCCEEDED
    assert r.final_message == "ok"
    assert r.num_turns == 2  # the malformed step_finish still counts as a step


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=20), st.integers(-9, 255) | st.none())
def test_any_output_gives_a_result_and_never_raises(lines, exit_status):
    parser = OpencodeJsonParser()
    for line in lines:
        parser.feed(line)
    assert parser.finish(exit_status, "").outcome in set(Outcome)
