"""What an agent prints is not trusted: the adapters read limits and logins only where
the CLI itself reports an error, and pass a session id as one argv element.

The unauthenticated outputs below are the real CLIs' (Claude Code 2.1.197, opencode
1.18.33), captured with no credentials; the fakes print the same. When the real CLIs
are installed (CEASELESS_AGENT_CLIS names their directory, `.ci/run` installs them),
they are run through the adapters too.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from listener.agents.claude_code import ClaudeCodeAdapter, ClaudeStreamParser
from listener.agents.opencode import OpencodeAdapter, OpencodeJsonParser
from listener.enums import Adapter, Billing, Outcome

from .support import FAKE_CLAUDE, FAKE_OPENCODE, agent, feed, run, task

NOW = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)
SESSION = "2e9efa04-03b0-4d19-8375-7bd5817c3e8b"
OPENCODE_SESSION = "ses_dcfda6cdfffephB54bHuC7SIsm"
LEGACY_9999 = "Claude AI usage limit reached|253402300799"

# Claude Code 2.1.197, no credentials: the synthetic message and the result line
# (the init line before them is an ordinary one).
CLAUDE_NOT_LOGGED_IN = [
    '{"type":"assistant","message":{"id":"c628aefb-a974-4dc9-bfc4-31baa0c57c4b","container":null,'
    '"model":"<synthetic>","role":"assistant","stop_details":null,"stop_reason":"stop_sequence",'
    '"stop_sequence":"","type":"message","usage":{"input_tokens":0,"output_tokens":0},'
    '"content":[{"type":"text","text":"Not logged in · Please run /login"}],'
    '"context_management":null},"parent_tool_use_id":null,'
    f'"session_id":"{SESSION}","uuid":"63ad99c1-b78b-443f-80f3-b96000d35f3f",'
    '"error":"authentication_failed"}',
    '{"type":"result","subtype":"success","is_error":true,"api_error_status":null,'
    '"duration_ms":129,"duration_api_ms":0,"num_turns":1,'
    '"result":"Not logged in · Please run /login","stop_reason":"stop_sequence",'
    f'"session_id":"{SESSION}","total_cost_usd":0,"usage":{{"input_tokens":0,'
    '"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0},'
    '"modelUsage":{},"permission_denials":[],"terminal_reason":"completed"}',
]
# opencode 1.18.33: an anthropic provider without a key, and one whose API said 401.
OPENCODE_NO_KEY = (
    '{"type":"error","timestamp":1796104101216,"sessionID":"ses_dcfda6cdfffephB54bHuC7SIsm",'
    '"error":{"name":"ProviderAuthError","data":{"providerID":"anthropic","message":'
    "\"Anthropic API key is missing. Pass it using the 'apiKey' parameter or the "
    'ANTHROPIC_API_KEY environment variable."}}}'
)
OPENCODE_KEY_REFUSED = (
    '{"type":"error","timestamp":1796104092926,"sessionID":"ses_dcfda8966ffeIhKVpBtfJXCsoN",'
    '"error":{"name":"APIError","data":{"message":"invalid x-api-key","statusCode":401,'
    '"isRetryable":false,"responseHeaders":{"content-type":"application/json"},'
    '"responseBody":"{\\"type\\": \\"error\\", \\"error\\": {\\"type\\": '
    '\\"authentication_error\\", \\"message\\": \\"invalid x-api-key\\"}}",'
    '"metadata":{"url":"http://127.0.0.1:18777/v1/messages"}}}}'
)


def init() -> dict:
    return {"type": "system", "subtype": "init", "session_id": SESSION, "apiKeySource": "none"}


def result(text: str, *, is_error: bool = False, **extra: object) -> dict:
    return {
        "type": "result",
        "subtype": "success",
        "is_error": is_error,
        "result": text,
        "session_id": SESSION,
    } | extra


def claude(*lines: str | dict, exit_status: int | None = 0):
    parser = feed(ClaudeStreamParser(now=lambda: NOW), lines)
    return parser.finish(exit_status, "")


def opencode(*lines: str | dict, exit_status: int | None = 1):
    parser = feed(OpencodeJsonParser(now=lambda: NOW), lines)
    return parser.finish(exit_status, "")


# --- the legacy limit text counts only on an error result --------------------------


def test_a_successful_reply_of_the_legacy_limit_text_is_a_success_with_no_reset():
    r = claude(init(), result(LEGACY_9999))
    assert r.outcome == Outcome.SUCCEEDED
    assert r.rate_limit_reset_at is None
    assert r.final_message == LEGACY_9999


def test_the_legacy_limit_text_on_an_error_result_is_a_rate_limit():
    r = claude(init(), result(LEGACY_9999, is_error=True), exit_status=1)
    assert r.outcome == Outcome.RATE_LIMITED
    assert r.rate_limit_reset_at == datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)


def test_the_legacy_limit_text_with_a_failed_exit_is_a_rate_limit():
    r = claude(init(), result(LEGACY_9999), exit_status=1)
    assert r.outcome == Outcome.RATE_LIMITED


def test_the_legacy_limit_text_in_the_model_s_own_message_is_not_a_rate_limit():
    text_only = {
        "type": "assistant",
        "message": {"content": [{"type": "text", "text": LEGACY_9999}]},
    }
    r = claude(init(), text_only, exit_status=1)
    assert r.outcome == Outcome.FAILED
    assert r.rate_limit_reset_at is None


def test_the_legacy_limit_text_in_the_cli_s_synthetic_error_message_is_a_rate_limit():
    synthetic = {
        "type": "assistant",
        "message": {"model": "<synthetic>", "content": [{"type": "text", "text": LEGACY_9999}]},
        "error": "rate_limit",
        "isApiErrorMessage": True,
    }
    r = claude(init(), synthetic, exit_status=1)
    assert r.outcome == Outcome.RATE_LIMITED
    assert r.rate_limit_reset_at is not None


# --- an unauthenticated CLI is auth_failed -------------------------------------------


def test_claude_code_not_logged_in_is_auth_failed():
    r = claude(init(), *CLAUDE_NOT_LOGGED_IN, exit_status=1)
    assert r.outcome == Outcome.AUTH_FAILED
    # What happened, not the result's subtype ("success" on this error).
    assert r.error == "not logged in: Not logged in · Please run /login"
    assert r.session_id == SESSION
    # init said apiKeySource "none", which reads as a subscription; nobody was logged in.
    assert r.billing == Billing.UNKNOWN


@pytest.mark.parametrize(
    "text",
    [
        "Invalid API key · Please run /login",
        "Failed to authenticate: OAuth session expired and could not be refreshed",
        "OAuth token has expired. Please obtain a new token or refresh your existing token.",
    ],
)
def test_claude_code_login_errors_without_a_synthetic_message_are_auth_failed(text: str):
    r = claude(init(), result(text, is_error=True), exit_status=1)
    assert r.outcome == Outcome.AUTH_FAILED
    label = "not logged in" if "/login" in text else "authentication failed"
    assert r.error == f"{label}: {text}"


def test_claude_code_401_is_auth_failed():
    r = claude(init(), result("API Error: 401", is_error=True, api_error_status=401), exit_status=1)
    assert r.outcome == Outcome.AUTH_FAILED


def test_a_synthetic_authentication_error_without_a_result_line_is_auth_failed():
    r = claude(init(), CLAUDE_NOT_LOGGED_IN[0], exit_status=1)
    assert r.outcome == Outcome.AUTH_FAILED
    assert r.error == "not logged in: Not logged in · Please run /login"


def test_a_successful_reply_that_says_not_logged_in_is_a_success():
    assert claude(init(), result("Not logged in · Please run /login")).outcome == (
        Outcome.SUCCEEDED
    )


@pytest.mark.parametrize("line", [OPENCODE_NO_KEY, OPENCODE_KEY_REFUSED])
def test_opencode_without_a_working_key_is_auth_failed(line: str):
    r = opencode(line)
    assert r.outcome == Outcome.AUTH_FAILED
    name = json.loads(line)["error"]["name"]
    assert (r.error or "").startswith(f"{name}: ")


# --- a session id is one argv element ------------------------------------------------


def test_a_flag_like_session_id_cannot_become_a_flag_of_its_own():
    # The database refuses such an id (job.resume_session_id); the argv does not rely on it.
    bad = "--dangerously-skip-permissions"
    claude_argv = ClaudeCodeAdapter().argv(
        agent(Adapter.CLAUDE_CODE, ["claude"]), task(resume_session_id=bad)
    )
    opencode_argv = OpencodeAdapter().argv(
        agent(Adapter.OPENCODE, ["opencode"]), task(resume_session_id=bad)
    )
    assert claude_argv[-1] == f"--resume={bad}" and bad not in claude_argv
    assert opencode_argv[-1] == f"--session={bad}" and bad not in opencode_argv


def test_the_fake_claude_receives_resume_as_one_element(tmp_path: Path):
    log = tmp_path / "argv.jsonl"
    config = agent(Adapter.CLAUDE_CODE, [FAKE_CLAUDE], env={"FAKE_CLAUDE_ARGV_LOG": str(log)})
    r = run(config, task(resume_session_id=SESSION))
    assert r.outcome == Outcome.SUCCEEDED and r.session_id == SESSION
    (invocation,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert f"--resume={SESSION}" in invocation["argv"] and "--resume" not in invocation["argv"]


def test_the_fake_opencode_resumes_the_session_given_as_one_element():
    r = run(agent(Adapter.OPENCODE, [FAKE_OPENCODE]), task(resume_session_id=OPENCODE_SESSION))
    assert r.outcome == Outcome.SUCCEEDED and r.session_id == OPENCODE_SESSION


# --- the real CLIs, when installed ----------------------------------------------------

# Credentials the CLIs read from the environment: removed, so a developer's own
# login is never used (nor billed) by the suite.
_CREDENTIALS = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "OPENAI_API_KEY",
    "OPENCODE_CONFIG",
    "OPENCODE_CONFIG_CONTENT",
)


def _real_cli(name: str) -> str:
    default = Path.home() / ".cache" / "ceaseless" / "agent-clis" / "node_modules" / ".bin"
    found = shutil.which(name, path=os.environ.get("CEASELESS_AGENT_CLIS", str(default)))
    if found is None:
        pytest.skip(f"the real {name} CLI is not installed (see CEASELESS_AGENT_CLIS)")
    return found


def _no_login(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name in _CREDENTIALS:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
    }


def test_the_real_claude_code_without_a_login_is_auth_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    config = agent(
        Adapter.CLAUDE_CODE,
        [_real_cli("claude")],
        env=_no_login(tmp_path, monkeypatch),
        timeout_secs=120,
    )
    r = run(config, task("say hi", cwd=str(tmp_path)))
    assert r.outcome == Outcome.AUTH_FAILED, r.error
    assert (r.error or "").startswith("not logged in: Not logged in · Please run /login\n")
    assert r.billing == Billing.UNKNOWN


def test_the_real_opencode_without_a_key_is_auth_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # An anthropic model named in the project's config, its API on a port where
    # nothing listens: without a key opencode stops before any request.
    (tmp_path / "opencode.json").write_text(
        json.dumps(
            {
                "provider": {
                    "anthropic": {
                        "options": {"baseURL": "http://127.0.0.1:9/v1"},
                        "models": {"claude-test": {"name": "test"}},
                    }
                }
            }
        )
    )
    config = agent(
        Adapter.OPENCODE,
        [_real_cli("opencode")],
        env=_no_login(tmp_path, monkeypatch),
        model="anthropic/claude-test",
        timeout_secs=120,
    )
    r = run(config, task("say hi", cwd=str(tmp_path)))
    assert r.outcome == Outcome.AUTH_FAILED, r.error
    assert (r.error or "").startswith("ProviderAuthError: Anthropic API key is missing")


def test_opencode_is_told_its_working_directory(tmp_path: Path):
    # opencode reads its project from $PWD, which the listener's process passes down.
    argv = OpencodeAdapter().argv(agent(Adapter.OPENCODE, ["opencode"]), task(cwd=str(tmp_path)))
    assert argv[-1] == f"--dir={tmp_path}"
