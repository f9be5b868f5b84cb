"""The adapters' part of replies and spend ceilings, with the fake CLIs as real processes.

A reply is the whole prompt of a run that resumes the agent's session (Claude Code
`--resume=<id>`, opencode `--session=<id>`); a job's spend ceiling goes to Claude Code as its
own `--max-budget-usd`, and an agent without such a flag (opencode) is stopped once the usage it
streams reaches what the job may still spend.
"""

from __future__ import annotations

import json
from pathlib import Path

from listener.agents.claude_code import ClaudeCodeAdapter
from listener.enums import Adapter, Outcome

from .support import FAKE_CLAUDE, FAKES, agent, run, task

FAKE_OPENCODE = str(FAKES / "fake_opencode")
OPENCODE_SESSION = "ses_494719016ffe85dkDMj0FPRbHK"
CLAUDE_SESSION = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"


def test_opencode_resumes_its_session_with_the_reply_as_the_prompt() -> None:
    config = agent(Adapter.OPENCODE, [FAKE_OPENCODE])
    result = run(config, task("Use the staging database.", resume_session_id=OPENCODE_SESSION))
    assert result.outcome is Outcome.SUCCEEDED
    assert result.session_id == OPENCODE_SESSION
    assert result.final_message is not None
    assert result.final_message.endswith("Prompt received: Use the staging database.")


def test_claude_resumes_its_session_with_the_reply_on_stdin(tmp_path: Path) -> None:
    log = tmp_path / "argv.jsonl"
    config = agent(Adapter.CLAUDE_CODE, [FAKE_CLAUDE], env={"FAKE_CLAUDE_ARGV_LOG": str(log)})
    result = run(config, task("Use the staging database.", resume_session_id=CLAUDE_SESSION))
    assert result.outcome is Outcome.SUCCEEDED
    (record,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert f"--resume={CLAUDE_SESSION}" in record["argv"]
    assert record["stdin"] == "Use the staging database."


def test_claude_gets_what_is_left_of_the_job_s_budget_as_its_own_flag() -> None:
    config = agent(Adapter.CLAUDE_CODE, ["claude"])
    assert ClaudeCodeAdapter().argv(config, task(budget_usd=0.25))[-2:] == [
        "--max-budget-usd",
        "0.250000",
    ]
    assert "--max-budget-usd" not in ClaudeCodeAdapter().argv(config, task())


def test_claude_stopping_at_its_budget_is_budget_exhausted() -> None:
    config = agent(Adapter.CLAUDE_CODE, [FAKE_CLAUDE], env={"FAKE_CLAUDE_COST": "0.5"})
    result = run(config, task(budget_usd=0.1))
    assert result.outcome is Outcome.BUDGET_EXHAUSTED
    assert result.error == "error_max_budget_usd: Exceeded USD budget (0.100000)"
    assert result.cost_usd == 0.5


def test_an_opencode_agent_whose_streamed_cost_reaches_the_job_s_budget_is_stopped() -> None:
    config = agent(
        Adapter.OPENCODE,
        [FAKE_OPENCODE],
        env={"FAKE_OPENCODE_MODE": "spend_then_hang"},
        timeout_secs=60,
    )
    result = run(config, task(budget_usd=0.015))
    assert result.outcome is Outcome.BUDGET_EXHAUSTED
    assert result.error is not None and "job.max_cost_usd" in result.error
    assert result.cost_usd is not None and result.cost_usd >= 0.015


def test_an_opencode_agent_whose_streamed_tokens_reach_the_job_s_budget_is_stopped() -> None:
    config = agent(
        Adapter.OPENCODE,
        [FAKE_OPENCODE],
        env={"FAKE_OPENCODE_MODE": "spend_then_hang"},
        timeout_secs=60,
    )
    result = run(config, task(budget_tokens=10))
    assert result.outcome is Outcome.BUDGET_EXHAUSTED


def test_an_agent_under_its_budget_runs_to_its_end() -> None:
    config = agent(Adapter.OPENCODE, [FAKE_OPENCODE])
    result = run(config, task(budget_usd=5.0, budget_tokens=1_000_000))
    assert result.outcome is Outcome.SUCCEEDED


def test_claude_s_streamed_tokens_count_each_message_once_before_its_result() -> None:
    from listener.agents.claude_code import ClaudeStreamParser

    from .support import feed

    def line(message_id: str, text: str) -> dict[str, object]:
        usage = {"input_tokens": 10, "cache_read_input_tokens": 100, "output_tokens": 5}
        return {
            "type": "assistant",
            "message": {
                "id": message_id,
                "model": "m",
                "usage": usage,
                "content": [{"type": "text", "text": text}],
            },
        }

    parser = feed(
        ClaudeStreamParser(), [line("msg_1", "a"), line("msg_1", "b"), line("msg_2", "c")]
    )
    assert parser.spent() == (None, 230)  # type: ignore[attr-defined]
