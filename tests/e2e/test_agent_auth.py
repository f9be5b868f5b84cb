"""An agent that is not logged in blocks its job for a person, through a real listener.

With the fake (which prints what Claude Code 2.1.197 prints without credentials)
and, when it is installed, the real CLI.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from tests.e2e.support import FAKES, ListenerProcess, scalar, wait_until
from tests.factories import make_agent, make_job

ME = pwd.getpwuid(os.geteuid()).pw_name
_CREDENTIALS = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
)


def _claude(which: str) -> list[str]:
    if which == "fake":
        return [str(FAKES / "fake_claude")]
    default = Path.home() / ".cache" / "ceaseless" / "agent-clis" / "node_modules" / ".bin"
    found = shutil.which("claude", path=os.environ.get("CEASELESS_AGENT_CLIS", str(default)))
    if found is None:
        pytest.skip("the real claude CLI is not installed (see CEASELESS_AGENT_CLIS)")
    return [found]


@pytest.mark.parametrize("which", ["fake", "real"])
def test_a_claude_agent_that_is_not_logged_in_blocks_its_job_and_says_so(
    conn: psycopg.Connection,
    db_url: str,
    start_listener: Callable[..., ListenerProcess],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    which: str,
) -> None:
    # No login reaches the agent: not the developer's, not the listener's.
    for name in _CREDENTIALS:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    argv = _claude(which)
    make_agent(
        conn,
        "claude",
        "claude_code",
        argv,
        env={
            "HOME": str(home),
            "CLAUDE_CONFIG_DIR": str(home / ".claude"),
            "FAKE_CLAUDE_MODE": "not_logged_in",
        },
        max_attempts=3,
        timeout_secs=120,
    )
    listener = start_listener()
    job = make_job(conn, agent="claude", prompt="say hi")

    wait_until(
        lambda: (
            scalar(db_url, "select state from ceaseless.job where id = %s", (job,))
            not in ("pending", "claimed", "running")
        ),
        60,
        "the job never ended",
    )
    state, attempts, last_error = conn.execute(
        "select state, attempts, last_error from ceaseless.job where id = %s", (job,)
    ).fetchone() or (None, None, None)
    assert (state, attempts) == ("blocked", 0)
    # What happened, then who to log in as, where, and how.
    assert last_error is not None
    lines = last_error.split("\n")
    assert lines[0] == "not logged in: Not logged in · Please run /login"
    assert lines[1] == f"Log lane claude in as OS user {ME} with HOME={home}:"
    advised = lines[2].strip()
    assert advised == shlex.join(
        ["env", f"HOME={home}", f"CLAUDE_CONFIG_DIR={home / '.claude'}", argv[0], "auth", "login"]
    )
    # Nobody was logged in: nothing was billed to a subscription.
    assert conn.execute(
        "select outcome, billing from ceaseless.agent_run where job_id = %s", (job,)
    ).fetchall() == [("auth_failed", "unknown")]

    # Queued for the default sink (log) and delivered by the listener.
    listener.wait_for_event("notification.delivered")
    (delivered,) = listener.events("notification.delivered")
    assert delivered["source_table"] == "job" and delivered["source_id"] == str(job)
    assert delivered["kind"] == "attention"
    assert delivered["subject"] == f"job {job} blocked: agent claude could not authenticate"
    assert delivered["body"].startswith(last_error.split("\nstderr (tail):")[0] + "\n\n")
    assert delivered["body"].endswith(
        f"then run the job again: select ceaseless.retry_job('{job}');"
    )

    if which == "real":
        # The advised command is one this CLI has: asked for its help, it answers.
        shown = subprocess.run(
            [*shlex.split(advised), "--help"], capture_output=True, text=True, timeout=60
        )
        assert shown.returncode == 0 and "Sign in" in shown.stdout, shown.stderr
        token = subprocess.run(
            ["env", f"HOME={home}", argv[0], "setup-token", "--help"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert token.returncode == 0 and "long-lived" in token.stdout, token.stderr
