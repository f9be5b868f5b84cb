"""An agent that could not authenticate says how to log its lane in: the OS user and HOME it ran
as, and a command that works on this host (listener/agents/login.py)."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from listener.agents import login
from listener.agents.environment import Identity
from listener.enums import Adapter, Billing, Outcome

from .support import FAKE_AGENT, FAKE_CLAUDE, agent, run, task

ME = pwd.getpwuid(os.geteuid()).pw_name
LANE_USER = Identity("ceaseless-a-0123456789abcdef", 12345, 12345, "/var/lib/ceaseless-agents/x")


def test_a_lane_of_the_listeners_own_user_is_logged_in_without_switching_users() -> None:
    config = agent(Adapter.CLAUDE_CODE, ["/opt/bin/claude"])
    advice = login.login_advice(config, {"HOME": "/srv/lanes/claude"}, None)
    assert advice == (
        f"Log lane test-claude_code in as OS user {ME} with HOME=/srv/lanes/claude:\n"
        "  env HOME=/srv/lanes/claude /opt/bin/claude auth login\n"
        "or make a long-lived token with `/opt/bin/claude setup-token` and set it as "
        "CLAUDE_CODE_OAUTH_TOKEN in the lane's agents.env."
    )


def test_a_lane_user_is_logged_in_through_sudo_and_its_config_dir_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(login.shutil, "which", lambda name: f"/usr/bin/{name}")
    config = agent(Adapter.CLAUDE_CODE, ["claude"])
    env = {"HOME": LANE_USER.home, "CLAUDE_CONFIG_DIR": "/etc/claude lanes/x"}
    advice = login.login_advice(config, env, LANE_USER) or ""
    assert f"as OS user {LANE_USER.name} with HOME={LANE_USER.home}:" in advice
    assert (
        f"  sudo -u {LANE_USER.name} env HOME={LANE_USER.home} "
        "'CLAUDE_CONFIG_DIR=/etc/claude lanes/x' claude auth login\n"
    ) in advice


def test_without_sudo_the_command_is_runuser_as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(login.shutil, "which", lambda name: None)
    config = agent(Adapter.OPENCODE, ["opencode"])
    advice = login.login_advice(config, {"HOME": LANE_USER.home}, LANE_USER)
    assert advice == (
        f"Log lane test-opencode in as OS user {LANE_USER.name} with HOME={LANE_USER.home}:\n"
        f"  runuser -u {LANE_USER.name} -- env HOME={LANE_USER.home} opencode auth login"
        "   # as root"
    )


def test_an_agent_without_a_cli_login_gets_no_advice() -> None:
    assert login.login_advice(agent(Adapter.COMMAND, [FAKE_AGENT]), {"HOME": "/x"}, None) is None


def test_a_claude_run_without_a_login_says_what_happened_then_how_to_log_in(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    config = agent(
        Adapter.CLAUDE_CODE,
        [FAKE_CLAUDE],
        env={"FAKE_CLAUDE_MODE": "not_logged_in", "HOME": str(home)},
    )
    r = run(config, task("say hi", cwd=str(tmp_path)))
    assert r.outcome == Outcome.AUTH_FAILED
    assert r.billing == Billing.UNKNOWN
    lines = (r.error or "").split("\n")
    assert lines[0] == "not logged in: Not logged in · Please run /login"
    assert lines[1] == f"Log lane test-claude_code in as OS user {ME} with HOME={home}:"
    assert lines[2] == f"  env HOME={home} {FAKE_CLAUDE} auth login"
