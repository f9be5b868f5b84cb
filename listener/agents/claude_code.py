"""The Claude Code adapter: `claude -p --output-format stream-json --verbose`.

The prompt goes on stdin. Claude Code prints one JSON object per line; this module
reads the `system/init` line (session, model, how it authenticates), `assistant`
lines (only to notice API-error messages and keep the last text), `rate_limit_event`
lines and the final `result` line. Everything else, JSON or not, is ignored.
The formats, and where each fact comes from, are in docs/agents.md.

Guarantees: the parser keeps only scalar fields and texts bounded by
FINAL_MESSAGE_LIMIT; it never raises on unknown or malformed lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from listener.agents.base import (
    AgentConfig,
    StreamParser,
    Task,
    decode_json_object,
    json_count,
    json_number,
    json_str,
    parse_timestamp,
    truncate_message,
    with_stderr,
)
from listener.enums import Billing, Outcome

_FLAGS = ["-p", "--output-format", "stream-json", "--verbose"]

# Older CLIs put the reset instant, in epoch seconds, after a pipe. Read only
# on a run that failed: in a successful reply it is the agent's text, and an
# injected prompt could name any instant (year 9999 paused a lane for good).
_LEGACY_LIMIT = re.compile(r"Claude AI usage limit reached\|(\d+)")
# The `error` Claude Code puts on the synthetic message of a run it could not
# authenticate (2.1.x, unauthenticated: "Not logged in · Please run /login").
_AUTH_ERROR = "authentication_failed"
# The same, read from an error result's text when no synthetic message says it:
# the login prompt, a refused or expired key or token, the API's error type.
_AUTH_TEXT = re.compile(
    r"not logged in|please run /login|invalid api key|failed to authenticate"
    r"|oauth token (?:has )?expired|authentication_error",
    re.IGNORECASE,
)
# Of those, the ones that mean no login at all (rather than a refused one).
_NOT_LOGGED_IN = re.compile(r"not logged in|please run /login", re.IGNORECASE)
# Newer CLIs word it for people: "You've hit your session limit · resets 11pm (Asia/Nicosia)".
_LIMIT_TEXT = re.compile(
    r"usage limit|session limit|weekly limit|hit your limit|rate limit", re.IGNORECASE
)
_OUTPUT_LIMIT = re.compile(r"exceeded the \d+ output token maximum", re.IGNORECASE)
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_RESETS = re.compile(
    r"resets?\s+(?:at\s+)?"
    r"(?:(?P<month>[A-Za-z]{3})[a-z]*\.?\s+(?P<day>\d{1,2}),?\s+(?:at\s+)?)?"
    r"(?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?\s*(?P<ampm>am|pm)\s*"
    r"\((?P<zone>[A-Za-z0-9_+/-]+)\)",
    re.IGNORECASE,
)
_BUDGET_SUBTYPES = ("error_max_turns", "error_max_budget_usd")


class ClaudeCodeAdapter:
    """Starts `agent.argv` (e.g. ["claude"]) in print mode with stream-json output."""

    def argv(self, agent: AgentConfig, task: Task) -> list[str]:
        argv = [*agent.argv, *_FLAGS]
        if agent.model:
            argv += ["--model", agent.model]
        if task.max_turns:
            argv += ["--max-turns", str(task.max_turns)]
        if task.resume_session_id:
            # One element: --resume takes an optional value, so a separate
            # one that looks like a flag would be read as that flag.
            argv.append(f"--resume={task.resume_session_id}")
        if task.budget_usd is not None:
            # The CLI's own ceiling: it stops with result subtype
            # error_max_budget_usd (budget_exhausted). A job already at its
            # ceiling is never claimed to run (reply_job, raise_job_budget
            # refuse it), so the amount is above zero; the floor guards the flag.
            argv += ["--max-budget-usd", f"{max(task.budget_usd, 0.000001):.6f}"]
        return argv

    def parser(self) -> ClaudeStreamParser:
        return ClaudeStreamParser()


@dataclass
class _ResultLine:
    subtype: str | None
    is_error: bool
    text: str | None
    api_error_status: int | None
    errors: list[str]


class ClaudeStreamParser(StreamParser):
    """Reads Claude Code's stream-json output; see the module docstring."""

    def __init__(self, now: Callable[[], datetime] | None = None) -> None:
        super().__init__(now)
        self._assistant_text: str | None = None
        # `error` of the latest assistant message when it was an API error, e.g. "rate_limit".
        self._api_error: str | None = None
        self._limit_rejected = False
        self._limit_reset: datetime | None = None
        self._result: _ResultLine | None = None
        # Tokens of the assistant messages so far, each message once (its
        # content blocks arrive as lines of their own, each with the message's
        # usage): what a token ceiling is watched against before the result.
        self._message_ids: set[str] = set()
        self._streamed_tokens = 0

    def feed(self, line: bytes) -> None:
        event = decode_json_object(line)
        if event is None:
            return
        kind = event.get("type")
        if kind == "system" and event.get("subtype") == "init":
            self._on_init(event)
        elif kind == "assistant":
            self._on_assistant(event)
        elif kind == "rate_limit_event":
            self._on_rate_limit(event)
        elif kind == "result":
            self._on_result(event)

    def _final_message(self) -> str | None:
        return self._result.text if self._result else self._assistant_text

    def _on_init(self, event: dict[str, Any]) -> None:
        self._session_id = json_str(event.get("session_id")) or self._session_id
        self._model = json_str(event.get("model")) or self._model
        source = event.get("apiKeySource")
        if isinstance(source, str):
            self._billing = Billing.SUBSCRIPTION if source == "none" else Billing.API_KEY

    def _on_assistant(self, event: dict[str, Any]) -> None:
        message = event.get("message")
        if not isinstance(message, dict):
            return
        error = json_str(event.get("error"))
        flagged = event.get("isApiErrorMessage") or event.get("is_api_error_message")
        self._api_error = error or ("api_error" if flagged else None)
        self._tally(message)
        model = json_str(message.get("model"))
        # Synthetic messages (API errors) name the model "<synthetic>".
        if model and not model.startswith("<") and self._model is None:
            self._model = model
        text = _text_blocks(message.get("content"))
        if text:
            self._assistant_text = truncate_message(text)

    def _tally(self, message: dict[str, Any]) -> None:
        message_id = json_str(message.get("id"))
        usage = message.get("usage")
        if message_id is None or message_id in self._message_ids or not isinstance(usage, dict):
            return
        if len(self._message_ids) < 100_000:  # bounded, whatever the agent prints
            self._message_ids.add(message_id)
        self._streamed_tokens += sum(
            json_count(usage.get(key)) or 0
            for key in (
                "input_tokens",
                "cache_creation_input_tokens",
                "cache_read_input_tokens",
                "output_tokens",
            )
        )

    def spent(self) -> tuple[float | None, int | None]:
        """The result line's usage once it came; before it, the assistant messages' tokens
        (Claude Code reports its cost only at the end, and has no token ceiling flag)."""
        cost, tokens = super().spent()
        if tokens is None and self._streamed_tokens:
            tokens = self._streamed_tokens
        return cost, tokens

    def _on_rate_limit(self, event: dict[str, Any]) -> None:
        info = event.get("rate_limit_info")
        # "allowed" and "allowed_warning" are telemetry; only "rejected" stops work.
        if isinstance(info, dict) and info.get("status") == "rejected":
            self._limit_rejected = True
            self._limit_reset = parse_timestamp(info.get("resetsAt")) or self._limit_reset

    def _on_result(self, event: dict[str, Any]) -> None:
        errors = event.get("errors")
        self._result = _ResultLine(
            subtype=json_str(event.get("subtype")),
            is_error=event.get("is_error") is True,
            text=truncate_message(json_str(event.get("result"))),
            api_error_status=json_count(event.get("api_error_status")),
            errors=[e for e in errors if isinstance(e, str)] if isinstance(errors, list) else [],
        )
        self._session_id = json_str(event.get("session_id")) or self._session_id
        self._num_turns = json_count(event.get("num_turns"))
        self._cost_usd = json_number(event.get("total_cost_usd"))
        usage = event.get("usage")
        if isinstance(usage, dict):
            self._tokens_in = _sum_counts(
                usage, "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"
            )
            self._tokens_out = json_count(usage.get("output_tokens"))

    def _outcome(
        self, exit_status: int | None, stderr_tail: str
    ) -> tuple[Outcome, str | None, datetime | None]:
        result = self._result
        if result is None:
            return self._outcome_without_result(exit_status, stderr_tail)
        text = result.text or ""
        if result.subtype in _BUDGET_SUBTYPES:
            return Outcome.BUDGET_EXHAUSTED, self._error_text(result), None
        errored = result.is_error or _exited_badly(exit_status)
        if errored and _LEGACY_LIMIT.fullmatch(text.strip()):
            return Outcome.RATE_LIMITED, text, self._reset_at(text)
        if _OUTPUT_LIMIT.search(text) and (
            result.is_error or self._api_error or text.lstrip().startswith("API Error")
        ):
            return Outcome.OUTPUT_BUDGET_EXHAUSTED, text, None
        if not result.is_error and result.subtype in (None, "success"):
            return Outcome.SUCCEEDED, None, None
        if self._looks_unauthenticated(result, text):
            return Outcome.AUTH_FAILED, with_stderr(_auth_error(result), stderr_tail), None
        if self._looks_rate_limited(result, text):
            return Outcome.RATE_LIMITED, text or "rate limited", self._reset_at(text)
        return Outcome.FAILED, with_stderr(self._error_text(result), stderr_tail), None

    def _outcome_without_result(
        self, exit_status: int | None, stderr_tail: str
    ) -> tuple[Outcome, str | None, datetime | None]:
        text = self._assistant_text or ""
        if self._api_error == _AUTH_ERROR:
            return (
                Outcome.AUTH_FAILED,
                with_stderr(_auth_label(text) + ": " + (text or _AUTH_ERROR), stderr_tail),
                None,
            )
        # The legacy text counts only in the CLI's own synthetic error message:
        # in any other assistant message it is the model's text.
        legacy = self._api_error is not None and _LEGACY_LIMIT.search(text)
        if self._limit_rejected or self._api_error == "rate_limit" or legacy:
            message = text if self._api_error else "rate limited before a result line"
            return Outcome.RATE_LIMITED, with_stderr(message, stderr_tail), self._reset_at(text)
        if self._api_error and _OUTPUT_LIMIT.search(text):
            return Outcome.OUTPUT_BUDGET_EXHAUSTED, text, None
        message = f"claude exited with status {exit_status} without a result line"
        return Outcome.FAILED, with_stderr(message, stderr_tail), None

    def _looks_unauthenticated(self, result: _ResultLine, text: str) -> bool:
        return (
            self._api_error == _AUTH_ERROR
            or result.api_error_status == 401
            or bool(_AUTH_TEXT.search(text))
        )

    def _looks_rate_limited(self, result: _ResultLine, text: str) -> bool:
        return (
            result.api_error_status == 429
            or self._api_error == "rate_limit"
            or self._limit_rejected
            or bool(_LIMIT_TEXT.search(text))
        )

    def _reset_at(self, text: str) -> datetime | None:
        legacy = _LEGACY_LIMIT.search(text)
        if legacy:
            return parse_timestamp(legacy[1])
        return self._limit_reset or reset_from_text(text, self._now())

    @staticmethod
    def _error_text(result: _ResultLine) -> str:
        detail = "; ".join(result.errors) or result.text or "no detail given"
        return f"{result.subtype or 'error'}: {detail}"


def _auth_error(result: _ResultLine) -> str:
    """An authentication failure as what happened, never as the result's subtype: Claude Code
    reports a missing login as subtype "success" with is_error set."""
    detail = "; ".join(result.errors) or result.text or "no detail given"
    return f"{_auth_label(detail)}: {detail}"


def _auth_label(text: str) -> str:
    return "not logged in" if _NOT_LOGGED_IN.search(text) else "authentication failed"


def _exited_badly(exit_status: int | None) -> bool:
    """A non-zero exit status (negative: killed by a signal); None is not known to be one."""
    return exit_status is not None and exit_status != 0


def reset_from_text(text: str, now: datetime) -> datetime | None:
    """The instant a "resets 3pm (Europe/Paris)" style message names, the next one after now.

    Accepts an optional month and day ("resets Feb 7, 11am (Asia/Seoul)",
    "resets Apr 23 at 4pm (America/Recife)"). None when absent or the zone is unknown.
    """
    match = _RESETS.search(text)
    if not match or not 1 <= int(match["hour"]) <= 12:
        return None
    try:
        zone = ZoneInfo(match["zone"])
    except (ZoneInfoNotFoundError, ValueError):
        return None
    hour = int(match["hour"]) % 12 + (12 if match["ampm"].lower() == "pm" else 0)
    minute = int(match["minute"] or 0)
    if minute > 59:
        return None
    local_now = now.astimezone(zone)
    try:
        if match["month"]:
            reset = _dated_reset(match, local_now, hour, minute)
        else:
            reset = local_now.replace(hour=hour, minute=minute, second=0, microsecond=0)
            if reset <= local_now:
                reset += timedelta(days=1)
    except ValueError:
        return None
    return reset.astimezone(UTC) if reset else None


def _dated_reset(
    match: re.Match[str], local_now: datetime, hour: int, minute: int
) -> datetime | None:
    month = match["month"].lower()
    if month not in _MONTHS:
        return None
    reset = local_now.replace(
        month=_MONTHS.index(month) + 1,
        day=int(match["day"]),
        hour=hour,
        minute=minute,
        second=0,
        microsecond=0,
    )
    # "resets Jan 2" read on Dec 30 is next year's January.
    if reset < local_now - timedelta(days=1):
        reset = reset.replace(year=reset.year + 1)
    return reset


def _text_blocks(content: object) -> str | None:
    if isinstance(content, str):
        return content or None
    if not isinstance(content, list):
        return None
    texts = [
        block["text"]
        for block in content
        if isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    ]
    return "\n".join(texts) or None


def _sum_counts(mapping: dict[str, Any], *keys: str) -> int | None:
    values = [json_count(mapping.get(key)) for key in keys]
    present = [v for v in values if v is not None]
    return sum(present) if present else None
