"""Claude Code adapter: argv and the reading of stream-json output, line by line."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from listener.agents.base import FINAL_MESSAGE_LIMIT
from listener.agents.claude_code import ClaudeCodeAdapter, ClaudeStreamParser, reset_from_text
from listener.enums import Adapter, Billing, Forge, Outcome

from .support import agent, feed, task

SESSION = "3b926aac-d113-4b86-9dc1-0c36b2013f93"
NOW = datetime(2026, 8, 26, 19, 0, tzinfo=UTC)


def init(api_key_source: str | None = "none") -> dict:
    line = {
        "type": "system",
        "subtype": "init",
        "cwd": "/home/user/project",
        "session_id": SESSION,
        "tools": ["Bash"],
        "model": "claude-opus-4-1",
        "permissionMode": "default",
    }
    if api_key_source is not None:
        line["apiKeySource"] = api_key_source
    return line


def assistant(text: str, *, error: str | None = None) -> dict:
    line: dict = {
        "type": "assistant",
        "message": {
            "role": "assistant",
            "model": "<synthetic>" if error else "claude-opus-4-1",
            "content": [{"type": "text", "text": text}],
        },
        "session_id": SESSION,
    }
    if error:
        line |= {"error": error, "isApiErrorMessage": True}
    return line


def result(
    subtype: str = "success", *, is_error: bool = False, text: str | None = "Done.", **extra
) -> dict:
    line = {
        "type": "result",
        "subtype": subtype,
        "is_error": is_error,
        "num_turns": 7,
        "session_id": SESSION,
        "total_cost_usd": 0.25,
        "usage": {
            "input_tokens": 20,
            "cache_creation_input_tokens": 700,
            "cache_read_input_tokens": 5000,
            "output_tokens": 900,
        },
    }
    if text is not None:
        line["result"] = text
    return line | extra


def parse(*lines, exit_status: int | None = 0, stderr: str = ""):
    parser = feed(ClaudeStreamParser(now=lambda: NOW), lines)
    return parser.finish(exit_status, stderr)


def test_argv_appends_print_mode_flags_to_the_configured_command():
    config = agent(Adapter.CLAUDE_CODE, ["/opt/bin/claude", "--dangerously-skip-permissions"])
    argv = ClaudeCodeAdapter().argv(config, task())
    assert argv == [
        "/opt/bin/claude",
        "--dangerously-skip-permissions",
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
    ]


def test_argv_passes_model_turns_and_resume():
    config = agent(Adapter.CLAUDE_CODE, ["claude"], model="opus")
    argv = ClaudeCodeAdapter().argv(config, task(max_turns=12, resume_session_id=SESSION))
    assert argv[-5:] == ["--model", "opus", "--max-turns", "12", f"--resume={SESSION}"]


def test_success_reads_session_usage_cost_and_final_text():
    r = parse(init(), assistant("Looking."), result(text="All done."))
    assert r.outcome == Outcome.SUCCEEDED
    assert r.final_message == "All done."
    assert r.session_id == SESSION
    assert r.model == "claude-opus-4-1"
    assert r.tokens_in == 20 + 700 + 5000
    assert r.tokens_out == 900
    assert r.cost_usd == 0.25
    assert r.num_turns == 7
    assert r.error is None
    assert r.rate_limit_reset_at is None


def test_billing_follows_api_key_source():
    assert parse(init("none"), result()).billing == Billing.SUBSCRIPTION
    assert parse(init("ANTHROPIC_API_KEY"), result()).billing == Billing.API_KEY
    assert parse(init("/login managed key"), result()).billing == Billing.API_KEY
    assert parse(init(None), result()).billing == Billing.UNKNOWN
    assert parse(result()).billing == Billing.UNKNOWN


def test_max_turns_is_budget_exhausted():
    r = parse(init(), result("error_max_turns", is_error=True, text=None))
    assert r.outcome == Outcome.BUDGET_EXHAUSTED
    assert "error_max_turns" in (r.error or "")
    assert r.num_turns == 7


def test_max_budget_usd_is_budget_exhausted():
    assert (
        parse(init(), result("error_max_budget_usd", text=None)).outcome == Outcome.BUDGET_EXHAUSTED
    )


OUTPUT_LIMIT_TEXT = (
    "API Error: Claude's response exceeded the 32000 output token maximum. To configure "
    "this behavior, set the CLAUDE_CODE_MAX_OUTPUT_TOKENS environment variable."
)


def test_output_token_limit_is_output_budget_exhausted():
    r = parse(
        init(),
        assistant(OUTPUT_LIMIT_TEXT, error="max_output_tokens"),
        result(is_error=True, text=OUTPUT_LIMIT_TEXT),
        exit_status=1,
    )
    assert r.outcome == Outcome.OUTPUT_BUDGET_EXHAUSTED
    assert "32000 output token maximum" in (r.error or "")


def test_output_token_limit_is_recognised_even_when_not_flagged_as_error():
    r = parse(init(), result(text=OUTPUT_LIMIT_TEXT))
    assert r.outcome == Outcome.OUTPUT_BUDGET_EXHAUSTED


def test_an_answer_quoting_the_limit_message_is_still_a_success():
    r = parse(init(), result(text="I fixed the bug where " + OUTPUT_LIMIT_TEXT[11:]))
    assert r.outcome == Outcome.SUCCEEDED


def test_rate_limit_event_gives_the_reset_time():
    resets_at = 1_787_000_000
    r = parse(
        init(),
        {
            "type": "rate_limit_event",
            "rate_limit_info": {
                "status": "rejected",
                "resetsAt": resets_at,
                "rateLimitType": "five_hour",
            },
        },
        assistant("You've hit your session limit · resets 11pm (Asia/Nicosia)", error="rate_limit"),
        result(
            is_error=True,
            text="You've hit your session limit · resets 11pm (Asia/Nicosia)",
            api_error_status=429,
        ),
        exit_status=1,
    )
    assert r.outcome == Outcome.RATE_LIMITED
    assert r.rate_limit_reset_at == datetime.fromtimestamp(resets_at, UTC)
    assert "session limit" in (r.error or "")


def test_legacy_usage_limit_text_carries_epoch_seconds():
    r = parse(
        init(),
        result(is_error=True, text="Claude AI usage limit reached|1755615600"),
        exit_status=1,
    )
    assert r.outcome == Outcome.RATE_LIMITED
    assert r.rate_limit_reset_at == datetime(2025, 8, 19, 15, 0, tzinfo=UTC)


def test_rate_limit_reset_read_from_the_message_when_no_event_says_it():
    text = "You've hit your session limit · resets 11pm (Asia/Nicosia)"
    r = parse(init(), result(is_error=True, text=text, api_error_status=429), exit_status=1)
    assert r.outcome == Outcome.RATE_LIMITED
    # 19:00 UTC is 22:00 in Nicosia (UTC+3): the next 23:00 there is 20:00 UTC.
    assert r.rate_limit_reset_at == datetime(2026, 8, 26, 20, 0, tzinfo=UTC)


def test_rate_limit_without_any_reset_time():
    r = parse(init(), result(is_error=True, text="Rate limit reached", api_error_status=429))
    assert r.outcome == Outcome.RATE_LIMITED
    assert r.rate_limit_reset_at is None


def test_rate_limit_before_any_result_line():
    r = parse(
        init(),
        {
            "type": "rate_limit_event",
            "rate_limit_info": {"status": "rejected", "resetsAt": 1_787_000_000},
        },
        exit_status=1,
        stderr="boom",
    )
    assert r.outcome == Outcome.RATE_LIMITED
    assert r.rate_limit_reset_at == datetime.fromtimestamp(1_787_000_000, UTC)


def test_allowed_rate_limit_events_are_only_telemetry():
    r = parse(
        init(),
        {
            "type": "rate_limit_event",
            "rate_limit_info": {"status": "allowed_warning", "resetsAt": 1},
        },
        result(),
    )
    assert r.outcome == Outcome.SUCCEEDED
    assert r.rate_limit_reset_at is None


def test_reset_text_variants():
    assert reset_from_text("resets 3:30am (Europe/Moscow)", NOW) == datetime(
        2026, 8, 27, 0, 30, tzinfo=UTC
    )
    assert reset_from_text(
        "You've hit your limit - resets Feb 7, 11am (Asia/Seoul)", NOW
    ) == datetime(2027, 2, 7, 2, 0, tzinfo=UTC)
    assert reset_from_text("resets Aug 27 at 4pm (America/Recife)", NOW) == datetime(
        2026, 8, 27, 19, 0, tzinfo=UTC
    )
    assert reset_from_text("Your limit will reset at 5pm (Europe/Warsaw).", NOW) == datetime(
        2026, 8, 27, 15, 0, tzinfo=UTC
    )
    assert reset_from_text("resets 11pm (Mars/Olympus)", NOW) is None
    assert reset_from_text("resets soon", NOW) is None
    assert reset_from_text("resets 13pm (UTC)", NOW) is None


def test_error_result_is_failed_with_errors_and_stderr():
    r = parse(
        init(),
        result(
            "error_during_execution", is_error=True, text=None, errors=["Tool failed: disk full"]
        ),
        exit_status=1,
        stderr="some trace\n",
    )
    assert r.outcome == Outcome.FAILED
    assert "error_during_execution" in (r.error or "")
    assert "disk full" in (r.error or "")
    assert "some trace" in (r.error or "")


def test_is_error_on_a_success_subtype_is_a_failure():
    text = 'API Error: 500 {"type":"error","error":{"type":"api_error","message":"Overloaded"}}'
    r = parse(init(), result(is_error=True, text=text), exit_status=1)
    assert r.outcome == Outcome.FAILED
    assert text in (r.error or "")
    assert r.final_message == text


def test_crash_without_result_line_is_failed_with_stderr_tail():
    r = parse(
        init(), assistant("Working on it."), exit_status=3, stderr="TypeError: x is undefined"
    )
    assert r.outcome == Outcome.FAILED
    assert "status 3" in (r.error or "")
    assert "TypeError" in (r.error or "")
    assert r.final_message == "Working on it."
    assert r.session_id == SESSION


def test_clean_exit_without_result_line_is_still_a_failure():
    assert parse(init(), exit_status=0).outcome == Outcome.FAILED


def test_garbage_and_unknown_lines_are_ignored():
    r = parse(
        b"",
        b"not json at all",
        b"[1, 2, 3]",
        b'{"type": "result", "subtype": "succ',  # cut mid-line
        b"\xff\xfe\x00 invalid utf-8",
        b"[" * 100_000,
        b"{" * 100_000,
        {"type": "stream_event", "event": {"type": "message_start"}},
        {"type": "system", "subtype": "api_retry", "attempt": 1, "error_status": 429},
        {"no_type": True},
        init(),
        "   ",
        result(text="ok"),
    )
    assert r.outcome == Outcome.SUCCEEDED
    assert r.final_message == "ok"


def test_final_message_is_bounded():
    r = parse(init(), result(text="a" * (FINAL_MESSAGE_LIMIT + 10) + "THE END"))
    assert len(r.final_message or "") == FINAL_MESSAGE_LIMIT
    assert (r.final_message or "").endswith("THE END")


def test_pull_request_from_final_text():
    text = (
        "Opened the PR: https://github.com/acme/widgets/pull/42\n"
        "- **Branch:** `fix/login-timeout`\n"
        "Tests pass."
    )
    pr = parse(init(), result(text=text)).pull_request
    assert pr is not None
    assert (pr.forge, pr.owner, pr.repo, pr.number) == (Forge.GITHUB, "acme", "widgets", 42)
    assert pr.head_branch == "fix/login-timeout"
    assert pr.url == "https://github.com/acme/widgets/pull/42"


def test_pull_request_needs_a_branch_line():
    assert parse(init(), result(text="See https://github.com/a/b/pull/1")).pull_request is None


def test_gitea_pull_request():
    text = "Done: https://git.example.org/ops/infra/pulls/7 (branch: ceaseless/job-12)"
    pr = parse(init(), result(text="branch: ceaseless/job-12\n" + text)).pull_request
    assert pr is not None
    assert (pr.forge, pr.owner, pr.repo, pr.number) == (Forge.GITEA, "ops", "infra", 7)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=20), st.integers(-9, 255) | st.none(), st.text())
def test_any_output_gives_a_result_and_never_raises(lines, exit_status, stderr):
    parser = ClaudeStreamParser()
    for line in lines:
        parser.feed(line)
    r = parser.finish(exit_status, stderr)
    assert r.outcome in set(Outcome)
