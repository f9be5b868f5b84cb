"""The opencode adapter: `opencode run --format json`, prompt on stdin.

`opencode run` reads a piped stdin as the message and, with `--format json`, prints
one JSON event per line: `step_start`, `text`, `reasoning`, `tool_use`,
`step_finish` (tokens, cost, finish reason), `error` and, in newer versions, `done`.
Every event carries `sessionID`. The stream names neither the model nor how the
provider bills, so model is left to the caller and billing is UNKNOWN.
Formats and sources are in docs/agents.md.

Guarantees: the parser keeps counters, one bounded error and texts bounded by
FINAL_MESSAGE_LIMIT; it never raises on unknown or malformed lines.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

from listener.agents.base import (
    AgentConfig,
    StreamParser,
    Task,
    TextTail,
    decode_json_object,
    json_count,
    json_number,
    json_str,
    truncate_message,
    with_stderr,
)
from listener.enums import Outcome

_FLAGS = ["--format", "json"]
_RATE_LIMIT_TEXT = re.compile(r"rate[ _-]?limit|usage limit|too many requests", re.IGNORECASE)
# The error opencode prints when a provider has no credentials at all (1.x:
# "Anthropic API key is missing. Pass it using the 'apiKey' parameter or the
# ANTHROPIC_API_KEY environment variable."); a refused key is an APIError
# with statusCode 401.
_AUTH_ERROR = "ProviderAuthError"
# step_finish reasons (the AI SDK's finish reasons) that mean the answer is not there.
_FAILED_REASONS = {"content-filter": "the provider's content filter stopped the response"}


class OpencodeAdapter:
    """Starts `agent.argv` (e.g. ["opencode"]) with `run --format json`.

    `agent.argv` may already contain the `run` subcommand followed by extra run
    flags (["opencode", "run", "--auto"]); then `run` is not added again.
    """

    def argv(self, agent: AgentConfig, task: Task) -> list[str]:
        argv = list(agent.argv)
        if "run" not in argv[1:]:
            argv.append("run")
        argv += _FLAGS
        if agent.model:
            argv += ["--model", agent.model]
        if task.resume_session_id:
            # One element, so a value that looks like a flag cannot be read as one.
            argv.append(f"--session={task.resume_session_id}")
        if task.cwd:
            # opencode takes its project directory from $PWD, which a child
            # inherits from the listener whatever its working directory is: it
            # read the listener's directory's config and worked on its files.
            argv.append(f"--dir={task.cwd}")
        # opencode run has no turn limit flag; task.max_turns cannot be passed on.
        return argv

    def parser(self) -> OpencodeJsonParser:
        return OpencodeJsonParser()


@dataclass
class _Error:
    name: str
    message: str
    status: int | None
    reset_at: datetime | None


class OpencodeJsonParser(StreamParser):
    """Reads `opencode run --format json` events; see the module docstring."""

    def __init__(self, now: Callable[[], datetime] | None = None) -> None:
        super().__init__(now)
        self._steps = 0
        self._last_reason: str | None = None
        self._step_text = TextTail()
        self._step_has_text = False
        self._answer: str | None = None
        self._error: _Error | None = None

    def feed(self, line: bytes) -> None:
        event = decode_json_object(line)
        if event is None:
            return
        self._session_id = json_str(event.get("sessionID")) or self._session_id
        part = event.get("part") if isinstance(event.get("part"), dict) else {}
        kind = event.get("type")
        if kind == "step_start":
            self._step_text = TextTail()
            self._step_has_text = False
        elif kind == "text":
            self._on_text(part)
        elif kind == "step_finish":
            self._on_step_finish(part)
        elif kind == "error":
            self._on_error(event.get("error"))

    def _final_message(self) -> str | None:
        return self._step_text.text() if self._step_has_text else self._answer

    def _on_text(self, part: dict[str, Any]) -> None:
        text = json_str(part.get("text"))
        if text:
            self._step_text.append(("\n" if self._step_has_text else "") + text)
            self._step_has_text = True

    def _on_step_finish(self, part: dict[str, Any]) -> None:
        self._steps += 1
        # opencode reports no turns: each step is one.
        self._num_turns = self._steps
        self._last_reason = json_str(part.get("reason"))
        if self._step_has_text:
            self._answer = self._step_text.text()
            self._step_text = TextTail()
            self._step_has_text = False
        cost = json_number(part.get("cost"))
        if cost is not None:
            self._cost_usd = (self._cost_usd or 0.0) + cost
        tokens = part.get("tokens")
        if isinstance(tokens, dict):
            self._add_tokens(tokens)

    def _add_tokens(self, tokens: dict[str, Any]) -> None:
        # opencode reports input without cache and output without reasoning; the
        # totals here count all of each, as Claude Code's usage does.
        cache = tokens.get("cache") if isinstance(tokens.get("cache"), dict) else {}
        read_in = [tokens.get("input"), cache.get("read"), cache.get("write")]
        written = [tokens.get("output"), tokens.get("reasoning")]
        self._tokens_in = _add(self._tokens_in, read_in)
        self._tokens_out = _add(self._tokens_out, written)

    def _on_error(self, error: object) -> None:
        if not isinstance(error, dict):
            self._error = _Error("error", truncate_message(str(error)) or "", None, None)
            return
        data = error.get("data") if isinstance(error.get("data"), dict) else {}
        message = json_str(data.get("message")) or json_str(error.get("message")) or ""
        headers = data.get("responseHeaders")
        self._error = _Error(
            name=json_str(error.get("name")) or "error",
            message=truncate_message(message) or "",
            status=json_count(data.get("statusCode")),
            reset_at=_retry_after(headers, self._now()) if isinstance(headers, dict) else None,
        )

    def _outcome(
        self, exit_status: int | None, stderr_tail: str
    ) -> tuple[Outcome, str | None, datetime | None]:
        if self._error is not None:
            return self._error_outcome(self._error, stderr_tail)
        if self._last_reason == "length":
            return Outcome.OUTPUT_BUDGET_EXHAUSTED, "the response hit the output token limit", None
        if self._last_reason in _FAILED_REASONS:
            return Outcome.FAILED, _FAILED_REASONS[self._last_reason], None
        if exit_status == 0 and self._steps:
            return Outcome.SUCCEEDED, None, None
        if exit_status == 0:
            return Outcome.FAILED, with_stderr("opencode finished no step", stderr_tail), None
        message = f"opencode exited with status {exit_status}"
        return Outcome.FAILED, with_stderr(message, stderr_tail), None

    @staticmethod
    def _error_outcome(
        error: _Error, stderr_tail: str
    ) -> tuple[Outcome, str | None, datetime | None]:
        text = f"{error.name}: {error.message}" if error.message else error.name
        if error.name == "MessageOutputLengthError":
            return Outcome.OUTPUT_BUDGET_EXHAUSTED, text, None
        if error.name == _AUTH_ERROR or error.status == 401:
            return Outcome.AUTH_FAILED, with_stderr(text, stderr_tail), None
        if error.status == 429 or _RATE_LIMIT_TEXT.search(error.message):
            return Outcome.RATE_LIMITED, text, error.reset_at
        return Outcome.FAILED, with_stderr(text, stderr_tail), None


def _add(total: int | None, values: list[object]) -> int | None:
    counts = [c for c in map(json_count, values) if c is not None]
    if not counts:
        return total
    return (total or 0) + sum(counts)


def _retry_after(headers: dict[str, Any], now: datetime) -> datetime | None:
    """The instant a provider's Retry-After (or retry-after-ms) header names."""
    lowered = {str(k).lower(): v for k, v in headers.items() if isinstance(v, str)}
    try:
        if "retry-after-ms" in lowered:
            return now + timedelta(milliseconds=float(lowered["retry-after-ms"]))
        value = lowered.get("retry-after", "").strip()
        if value.replace(".", "", 1).isdigit():
            return now + timedelta(seconds=float(value))
        if value:
            return parsedate_to_datetime(value).astimezone(UTC)
    except (ValueError, TypeError, OverflowError):
        return None
    return None
