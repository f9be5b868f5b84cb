"""The command adapter: any program, prompt on stdin, judged by its exit status.

`agent.argv` is run as is. Exit 0 is SUCCEEDED, anything else FAILED. A program
may say more with a final stdout line holding a JSON object with at least one of
these keys (other lines are ordinary output):

    summary              final message (text)
    tokens_in, tokens_out, cost_usd, session_id
    outcome              any Outcome value except "lease_expired"
    rate_limit_reset_at  ISO-8601 text or epoch seconds (with outcome "rate_limited")
    pull_request         {forge, owner, repo, number, head_branch, url}
    error                text explaining a failure

Without such a line the final message is the end of stdout (FINAL_MESSAGE_LIMIT
characters). A reported outcome wins over the exit status, except that a non-zero
exit is never SUCCEEDED. Field values of the wrong type are ignored.

Guarantees: the parser keeps one line and a tail of FINAL_MESSAGE_LIMIT characters.
"""

from __future__ import annotations

import json
from typing import Any

from listener.agents.base import (
    AgentConfig,
    PullRequestRef,
    RunResult,
    Task,
    TextTail,
    json_count,
    json_number,
    json_str,
    parse_timestamp,
    truncate_message,
    with_stderr,
)
from listener.enums import Forge, Outcome

REPORT_KEYS = frozenset(
    {
        "summary",
        "tokens_in",
        "tokens_out",
        "cost_usd",
        "session_id",
        "outcome",
        "rate_limit_reset_at",
        "pull_request",
        "error",
    }
)
# The listener, not the agent, knows when a lease expired.
_REPORTABLE = {o.value: o for o in Outcome if o is not Outcome.LEASE_EXPIRED}


class CommandAdapter:
    """Runs `agent.argv` unchanged."""

    def argv(self, agent: AgentConfig, task: Task) -> list[str]:
        return list(agent.argv)

    def parser(self) -> CommandOutputParser:
        return CommandOutputParser()


class CommandOutputParser:
    """Keeps the last non-blank stdout line apart from the tail of everything before it."""

    def __init__(self) -> None:
        self._before = TextTail()
        self._last: str | None = None
        self._blank_run = 0

    @property
    def session_id(self) -> str | None:
        """A command reports its session only in its final JSON line, after the run."""
        return None

    def feed(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace")
        if not text.strip():
            self._blank_run += 1
            return
        if self._last is not None:
            self._before.append(self._last + "\n" * (1 + self._blank_run))
        self._blank_run = 0
        self._last = text

    def finish(self, exit_status: int | None, stderr_tail: str) -> RunResult:
        report = self._report()
        if report is None:
            if self._last is not None:
                self._before.append(self._last)
            return _from_exit(exit_status, self._before.text() or None, stderr_tail)
        return _from_report(report, exit_status, self._before.text().rstrip() or None, stderr_tail)

    def _report(self) -> dict[str, Any] | None:
        if self._last is None or not self._last.lstrip().startswith("{"):
            return None
        try:
            value = json.loads(self._last)
        except (ValueError, RecursionError):
            return None
        if isinstance(value, dict) and REPORT_KEYS & value.keys():
            return value
        return None


def _from_exit(exit_status: int | None, final: str | None, stderr_tail: str) -> RunResult:
    if exit_status == 0:
        return RunResult(outcome=Outcome.SUCCEEDED, exit_status=0, final_message=final)
    return RunResult(
        outcome=Outcome.FAILED,
        exit_status=exit_status,
        final_message=final,
        error=with_stderr(_exit_text(exit_status), stderr_tail),
    )


def _from_report(
    report: dict[str, Any], exit_status: int | None, earlier: str | None, stderr_tail: str
) -> RunResult:
    outcome, error = _reported_outcome(report, exit_status, stderr_tail)
    reset_at = parse_timestamp(report.get("rate_limit_reset_at"))
    return RunResult(
        outcome=outcome,
        exit_status=exit_status,
        final_message=json_str(report.get("summary")) or earlier,
        session_id=json_str(report.get("session_id")),
        tokens_in=json_count(report.get("tokens_in")),
        tokens_out=json_count(report.get("tokens_out")),
        cost_usd=json_number(report.get("cost_usd")),
        rate_limit_reset_at=reset_at if outcome is Outcome.RATE_LIMITED else None,
        error=truncate_message(error),
        pull_request=_pull_request(report.get("pull_request")),
    )


def _reported_outcome(
    report: dict[str, Any], exit_status: int | None, stderr_tail: str
) -> tuple[Outcome, str | None]:
    said = report.get("outcome")
    error = json_str(report.get("error"))
    if said is not None and not (isinstance(said, str) and said in _REPORTABLE):
        return Outcome.FAILED, f"the command reported an unknown outcome {said!r}"
    outcome = _REPORTABLE[said] if said is not None else None
    if exit_status != 0 and outcome in (None, Outcome.SUCCEEDED):
        return Outcome.FAILED, with_stderr(error or _exit_text(exit_status), stderr_tail)
    if outcome is None:
        return Outcome.SUCCEEDED, error
    if outcome is Outcome.FAILED and error is None:
        error = with_stderr("the command reported failure", stderr_tail)
    return outcome, error


def _exit_text(exit_status: int | None) -> str:
    if exit_status is not None and exit_status < 0:
        return f"the command was killed by signal {-exit_status}"
    return f"the command exited with status {exit_status}"


def _pull_request(value: object) -> PullRequestRef | None:
    """The reported pull request, only if every field is present and well-typed."""
    if not isinstance(value, dict):
        return None
    forge = value.get("forge")
    texts = {k: json_str(value.get(k)) for k in ("owner", "repo", "head_branch", "url")}
    number = json_count(value.get("number"))
    if forge not in {f.value for f in Forge} or not number:
        return None
    owner, repo, head_branch, url = texts.values()
    if not (owner and repo and head_branch and url):
        return None
    return PullRequestRef(
        forge=Forge(forge),
        owner=owner,
        repo=repo,
        number=number,
        head_branch=head_branch,
        url=url,
    )
