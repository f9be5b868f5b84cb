"""command adapter: exit status, the optional final JSON report, bounded output."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from listener.agents.base import FINAL_MESSAGE_LIMIT
from listener.agents.command import CommandAdapter, CommandOutputParser
from listener.enums import Adapter, Forge, Outcome

from .support import agent, feed, task


def parse(*lines, exit_status: int | None = 0, stderr: str = ""):
    return feed(CommandOutputParser(), lines).finish(exit_status, stderr)


def report(**fields) -> str:
    return json.dumps(fields)


def test_argv_is_the_configured_command_unchanged():
    config = agent(Adapter.COMMAND, ["/usr/bin/env", "bash", "run.sh"], model="m")
    assert CommandAdapter().argv(config, task(max_turns=3)) == ["/usr/bin/env", "bash", "run.sh"]


def test_exit_zero_succeeds_with_the_output_as_final_message():
    r = parse("line one", "", "line two", exit_status=0)
    assert r.outcome == Outcome.SUCCEEDED
    assert r.final_message == "line one\n\nline two"
    assert r.error is None


def test_no_output_gives_no_final_message():
    assert parse(exit_status=0).final_message is None


def test_nonzero_exit_fails_with_status_and_stderr():
    r = parse("trying", exit_status=4, stderr="permission denied\n")
    assert r.outcome == Outcome.FAILED
    assert r.exit_status == 4
    assert "status 4" in (r.error or "")
    assert "permission denied" in (r.error or "")
    assert r.final_message == "trying"


def test_death_by_signal_is_named():
    assert "signal 9" in (parse(exit_status=-9).error or "")


def test_final_json_line_reports_usage_and_summary():
    r = parse(
        "working",
        report(summary="Fixed it.", tokens_in=10, tokens_out=5, cost_usd=0.5, session_id="s-1"),
        "",
        "   ",
    )
    assert r.outcome == Outcome.SUCCEEDED
    assert r.final_message == "Fixed it."
    assert (r.tokens_in, r.tokens_out, r.cost_usd, r.session_id) == (10, 5, 0.5, "s-1")


def test_report_without_summary_keeps_the_earlier_output():
    assert parse("the answer", report(tokens_in=1)).final_message == "the answer"


@pytest.mark.parametrize(
    ("reset", "expected"),
    [
        ("2026-09-01T10:00:00Z", datetime(2026, 9, 1, 10, tzinfo=UTC)),
        ("2026-09-01T12:00:00+02:00", datetime(2026, 9, 1, 10, tzinfo=UTC)),
        ("2026-09-01T10:00:00", datetime(2026, 9, 1, 10, tzinfo=UTC)),
        (1788256800, datetime(2026, 9, 1, 10, tzinfo=UTC)),
        ("1788256800", datetime(2026, 9, 1, 10, tzinfo=UTC)),
        ("next tuesday", None),
    ],
)
def test_reported_rate_limit_with_reset(reset, expected):
    r = parse(report(outcome="rate_limited", rate_limit_reset_at=reset), exit_status=1)
    assert r.outcome == Outcome.RATE_LIMITED
    assert r.rate_limit_reset_at == expected


def test_reset_time_is_ignored_unless_rate_limited():
    r = parse(report(summary="ok", rate_limit_reset_at=1788256800))
    assert r.outcome == Outcome.SUCCEEDED
    assert r.rate_limit_reset_at is None


@pytest.mark.parametrize(
    "outcome", ["budget_exhausted", "output_budget_exhausted", "timed_out", "cancelled"]
)
def test_reported_outcomes_win_over_exit_zero(outcome):
    assert parse(report(outcome=outcome)).outcome == Outcome(outcome)


@pytest.mark.parametrize("outcome", ["lease_expired", "bogus", 3, ["failed"]])
def test_unknown_or_reserved_outcomes_fail(outcome):
    r = parse(report(outcome=outcome))
    assert r.outcome == Outcome.FAILED
    assert "unknown outcome" in (r.error or "")


def test_nonzero_exit_is_never_success():
    r = parse(report(outcome="succeeded", summary="all fine"), exit_status=2, stderr="oops")
    assert r.outcome == Outcome.FAILED
    assert r.final_message == "all fine"
    assert "oops" in (r.error or "")


def test_reported_failure_with_exit_zero():
    r = parse(report(outcome="failed", error="could not reach the forge"))
    assert r.outcome == Outcome.FAILED
    assert r.error == "could not reach the forge"


def test_reported_pull_request():
    pr = {
        "forge": "gitea",
        "owner": "ops",
        "repo": "infra",
        "number": 7,
        "head_branch": "ceaseless/job-1",
        "url": "https://git.example.org/ops/infra/pulls/7",
    }
    r = parse(report(summary="PR opened", pull_request=pr))
    assert r.pull_request is not None
    assert r.pull_request.forge == Forge.GITEA
    assert (r.pull_request.number, r.pull_request.head_branch) == (7, "ceaseless/job-1")
    for broken in (
        {**pr, "forge": "gitlab"},
        {**pr, "number": "7"},
        {k: v for k, v in pr.items() if k != "url"},
    ):
        assert parse(report(pull_request=broken)).pull_request is None


def test_wrongly_typed_fields_are_ignored():
    r = parse(report(summary=5, tokens_in="10", tokens_out=-1, cost_usd=True, session_id=""))
    assert r.outcome == Outcome.SUCCEEDED
    assert (r.final_message, r.tokens_in, r.tokens_out, r.cost_usd, r.session_id) == (None,) * 5


def test_json_without_known_keys_is_ordinary_output():
    r = parse('{"status": "ok"}')
    assert r.outcome == Outcome.SUCCEEDED
    assert r.final_message == '{"status": "ok"}'


def test_json_that_is_not_the_last_line_is_ordinary_output():
    r = parse(report(summary="early"), "the end")
    assert r.final_message is not None and r.final_message.endswith("the end")
    assert r.tokens_in is None


def test_output_tail_is_bounded_and_keeps_the_end():
    parser = CommandOutputParser()
    for i in range(5000):
        parser.feed(f"line {i:05d} ".encode() + b"x" * 100)
    r = parser.finish(0, "")
    assert len(r.final_message or "") <= FINAL_MESSAGE_LIMIT
    assert (r.final_message or "").startswith("…")
    assert "line 04999" in (r.final_message or "")


def test_invalid_utf8_is_replaced_not_fatal():
    assert parse(b"caf\xe9").final_message == "caf\ufffd"
