"""The contract between the listener and an agent adapter.

An adapter knows two things about one kind of agent: the argv that starts it for a
task, and how to read what it prints. Spawning, timeouts, cancellation and bounded
capture are the same for every adapter and live in `process.py`.

Guarantees: a parser never holds more than one line plus the bounded final message in
memory, whatever the agent prints.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from listener.enums import Adapter, Billing, Forge, Outcome

# The final assistant message is stored on agent_run; the database CHECK caps it at
# this many characters, so the parser truncates first rather than failing the write.
FINAL_MESSAGE_LIMIT = 65_536


@dataclass(frozen=True)
class AgentConfig:
    """One row of `ceaseless.agents`, as the listener caches it."""

    # No defaults: the database owns them (agents' column defaults), and a
    # copy here would drift from them.
    name: str
    adapter: Adapter
    argv: list[str]
    env: dict[str, str]
    model: str | None
    timeout_secs: int
    kill_grace_secs: int
    # Names of the listener's variables this agent may see (agents.env_passthrough).
    # The one default here: an empty list is what the column defaults to, and it
    # is the safe reading of an AgentConfig built without one.
    env_passthrough: tuple[str, ...] = ()
    # Where the agent may connect (agents.egress): {none}, {open} or host[:port]
    # entries (network.py). Built without one, an agent has no network: the safe
    # reading again, not the column's default.
    egress: tuple[str, ...] = ("none",)


@dataclass(frozen=True)
class Task:
    """What one agent invocation is asked to do (taken from the claimed job)."""

    job_id: str
    run_id: str
    prompt: str
    max_turns: int | None = None
    resume_session_id: str | None = None
    cwd: str | None = None
    # Directories holding other jobs' own (the listener's workspace root): the
    # sandbox shows nothing of them but `cwd`.
    private: tuple[str, ...] = ()
    # A lightweight routine's reply budget (action_config.max_tokens).
    max_tokens: int | None = None
    # What the job may still spend (claim_jobs: its ceilings less its runs so
    # far); None: no ceiling. The agent is stopped once its reported usage
    # reaches either (process.py), or told the USD one (--max-budget-usd).
    budget_usd: float | None = None
    budget_tokens: int | None = None


@dataclass(frozen=True)
class PullRequestRef:
    forge: str
    owner: str
    repo: str
    number: int
    head_branch: str
    url: str


@dataclass
class RunResult:
    """What one invocation produced; maps 1:1 onto the agent_run columns."""

    outcome: Outcome
    exit_status: int | None = None
    final_message: str | None = None
    session_id: str | None = None
    billing: Billing = Billing.UNKNOWN
    model: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost_usd: float | None = None
    num_turns: int | None = None
    rate_limit_reset_at: datetime | None = None
    error: str | None = None
    pull_request: PullRequestRef | None = None


class OutputParser(Protocol):
    """Reads an agent's stdout one line at a time, then says what happened.

    `session_id` is the agent's session as soon as its output names one (None
    until then): the runner records it while the agent still runs, so a run
    cut short can be resumed.
    """

    @property
    def session_id(self) -> str | None: ...

    def feed(self, line: bytes) -> None: ...

    def finish(self, exit_status: int | None, stderr_tail: str) -> RunResult: ...


class StreamParser:
    """What the parsers of a JSON event stream (Claude Code's, opencode's) share: the session,
    model, billing and usage they tally as the agent reports them, and the RunResult they make.

    A subclass reads its events in `feed` and says in `_outcome` how the run ended and in
    `_final_message` what the agent answered; `finish` puts the rest together, so every
    adapter reports the same fields the same way.
    """

    def __init__(self, now: Callable[[], datetime] | None = None) -> None:
        self._now = now or (lambda: datetime.now(UTC))
        self._session_id: str | None = None
        self._model: str | None = None
        self._billing = Billing.UNKNOWN
        self._tokens_in: int | None = None
        self._tokens_out: int | None = None
        self._cost_usd: float | None = None
        self._num_turns: int | None = None

    @property
    def session_id(self) -> str | None:
        return self._session_id

    def spent(self) -> tuple[float | None, int | None]:
        """The cost and tokens the agent has reported so far (None: not reported)."""
        tokens = None
        if self._tokens_in is not None or self._tokens_out is not None:
            tokens = (self._tokens_in or 0) + (self._tokens_out or 0)
        return self._cost_usd, tokens

    def finish(self, exit_status: int | None, stderr_tail: str) -> RunResult:
        outcome, error, reset_at = self._outcome(exit_status, stderr_tail)
        final = self._final_message()
        return RunResult(
            outcome=outcome,
            exit_status=exit_status,
            final_message=final,
            session_id=self._session_id,
            # A CLI that could not authenticate still says how it would have
            # (Claude Code's apiKeySource "none" without any login): nothing
            # was billed to anyone.
            billing=Billing.UNKNOWN if outcome is Outcome.AUTH_FAILED else self._billing,
            model=self._model,
            tokens_in=self._tokens_in,
            tokens_out=self._tokens_out,
            cost_usd=self._cost_usd,
            num_turns=self._num_turns,
            rate_limit_reset_at=reset_at,
            error=error,
            pull_request=find_pull_request(final),
        )

    def _outcome(
        self, exit_status: int | None, stderr_tail: str
    ) -> tuple[Outcome, str | None, datetime | None]:
        """How the run ended: its outcome, its error, and when a rate limit resets."""
        raise NotImplementedError

    def _final_message(self) -> str | None:
        raise NotImplementedError


class AgentAdapter(Protocol):
    """How to start one kind of agent and how to read its output."""

    def argv(self, agent: AgentConfig, task: Task) -> list[str]: ...

    def parser(self) -> OutputParser: ...


# What PostgreSQL's text and jsonb cannot hold, though a JSON string may carry it:
# NUL, and surrogates that are not half of a pair (Python keeps them as they came).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(text: str) -> str:
    """The text with every character PostgreSQL cannot store replaced by U+FFFD."""
    return _UNSTORABLE.sub("\ufffd", text)


# A JSON escape cut short at the end of a text: a lone backslash, or \u with
# fewer than four hex digits after it (an even run of backslashes before it is
# escaped backslashes, which end nothing).
_CUT_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\(?:u[0-9A-Fa-f]{0,3})?$")
# How far into the kept end a cut may have landed inside an escape (\uXXXX).
_ESCAPE_CHARS = 6


def join_cut_line(head: bytes, tail: bytes, dropped: int) -> bytes:
    """A line too long to keep, as its head and tail around a marker of what was cut.

    Most such lines are one JSON object with one long string in it (an agent's
    whole answer on its result line): both cuts then fall inside that string,
    and the marker, which holds no quote or backslash, keeps the line a valid
    object with the string shortened, so the parser still reads the result. The
    cuts are moved off any character or escape they split; a line that is still
    not valid JSON (the cuts fell in different places) is returned joined all
    the same, and reads as ordinary output.
    """
    first = head.decode("utf-8", "ignore")
    last = tail.decode("utf-8", "ignore")
    first = _CUT_ESCAPE.sub("", first)
    marker = f"…[{dropped} bytes cut]…"
    if first.lstrip().startswith("{"):
        for skip in range(_ESCAPE_CHARS + 1):
            candidate = first + marker + last[skip:]
            try:
                json.loads(candidate)
            except (ValueError, RecursionError):
                continue
            return candidate.encode("utf-8", "surrogatepass")
    return (first + marker + last).encode("utf-8", "surrogatepass")


def truncate_message(text: str | None) -> str | None:
    """Bound a final message to what agent_run accepts, keeping its end (the answer)."""
    if text is None or len(text) <= FINAL_MESSAGE_LIMIT:
        return text
    return "…" + text[-(FINAL_MESSAGE_LIMIT - 1) :]


# Helpers shared by the parsers. They never raise on odd input: agents print noise.


def decode_json_object(line: bytes) -> dict[str, Any] | None:
    """The line as a JSON object, or None for anything else (noise, half lines, arrays)."""
    line = line.strip()
    if not line.startswith(b"{"):
        return None
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def parse_timestamp(value: object) -> datetime | None:
    """An instant from epoch seconds (number or digits) or ISO-8601 text, as aware UTC.

    ISO text without an offset is taken as UTC.
    """
    if isinstance(value, bool):
        return None
    try:
        if isinstance(value, int | float):
            return datetime.fromtimestamp(value, UTC)
        if isinstance(value, str) and re.fullmatch(r"\d+(\.\d+)?", value.strip()):
            return datetime.fromtimestamp(float(value), UTC)
        if isinstance(value, str):
            parsed = datetime.fromisoformat(value.strip())
            return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except (ValueError, OverflowError, OSError):
        return None
    return None


# Where an error's own text ends and the agent's stderr tail begins.
STDERR_MARKER = "\nstderr (tail):\n"


def with_stderr(message: str, stderr_tail: str) -> str:
    """An error message followed by the agent's stderr tail, which usually says why."""
    tail = stderr_tail.strip()
    return f"{message}{STDERR_MARKER}{tail}" if tail else message


class TextTail:
    """The end of a text that arrives in pieces, holding O(limit) characters."""

    def __init__(self, limit: int = FINAL_MESSAGE_LIMIT) -> None:
        self._limit = limit
        self._pieces: deque[str] = deque()
        self._size = 0
        self._cut = False

    def append(self, piece: str) -> None:
        if len(piece) > self._limit:
            piece = piece[-self._limit :]
            self._cut = True
        if not piece:
            return
        self._pieces.append(piece)
        self._size += len(piece)
        while self._size - len(self._pieces[0]) >= self._limit:
            self._size -= len(self._pieces.popleft())
            self._cut = True

    def text(self) -> str:
        """The whole text if it fits, else "…" and its last `limit - 1` characters."""
        text = "".join(self._pieces)
        if not self._cut and len(text) <= self._limit:
            return text
        return "…" + text[-(self._limit - 1) :]


# A pull request URL: GitHub (and GitHub Enterprise) say /pull/N, Gitea and Forgejo /pulls/N.
# Anything between the host and owner/repo is a Gitea instance served under a sub-path.
_PR_URL = re.compile(
    r"https?://(?P<host>[A-Za-z0-9.-]+(?::\d+)?)(?P<prefix>(?:/[^\s/?#]+)*?)"
    r"/(?P<owner>[A-Za-z0-9_.-]+)/(?P<repo>[A-Za-z0-9_.-]+)/(?P<kind>pulls?)/(?P<number>\d+)(?!\d)"
)
# "branch: feat/x", "- **Head branch:** `feat/x`", "head_branch = feat/x"
_BRANCH_LINE = re.compile(
    r"^[\s>*_•-]*(?:head[ _-]?)?branch[*_\s]*[:=][*_\s]*`?(?P<name>[A-Za-z0-9._/-]+)`?",
    re.IGNORECASE | re.MULTILINE,
)


def find_pull_request(text: str | None) -> PullRequestRef | None:
    """The pull request an agent's final text reports, if it names exactly one, fully.

    All six fields must come from the text: one PR URL (repeats of the same one are
    fine) and one `branch: <name>` line. Anything ambiguous or missing gives None.
    """
    if not text:
        return None
    urls = {_pr_key(m): m for m in _PR_URL.finditer(text)}
    branches = {m["name"] for m in _BRANCH_LINE.finditer(text) if _plausible_branch(m["name"])}
    if len(urls) != 1 or len(branches) != 1:
        return None
    match = next(iter(urls.values()))
    return PullRequestRef(
        forge=Forge.GITEA if match["kind"] == "pulls" else Forge.GITHUB,
        owner=match["owner"],
        repo=match["repo"],
        number=int(match["number"]),
        head_branch=branches.pop(),
        url=match[0],
    )


def _pr_key(match: re.Match[str]) -> tuple[str, ...]:
    parts = ("host", "prefix", "owner", "repo", "kind")
    return (*(match[p].lower() for p in parts), str(int(match["number"])))


def _plausible_branch(name: str) -> bool:
    return not (
        name.startswith(("-", "/", "."))
        or name.endswith(("/", ".", ".lock"))
        or ".." in name
        or "//" in name
    )


def json_str(value: object) -> str | None:
    """A non-empty JSON string field, else None."""
    return value if isinstance(value, str) and value else None


# The largest count kept: agent_run stores counts as integer (num_turns) or
# bigint (tokens); a larger number is no real count, and would be refused.
_COUNT_MAX = 2**31 - 1


def json_count(value: object) -> int | None:
    """A non-negative JSON integer (a count) up to 2**31 - 1, else None; booleans are not counts."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _COUNT_MAX:
        return None
    return value


def json_number(value: object) -> float | None:
    """A finite non-negative JSON number field (e.g. a cost), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if 0 <= number < float("inf") else None
