"""The files docs/deploy.md hands an operator work as it says.

deploy/ceaseless.service is what systemd accepts, its command lines name real options, and
its hardening leaves the agents' sandbox working: a listener started with the unit's mount and
privilege restrictions (emulated here with a private mount namespace and no_new_privs, since
the test machine's PID 1 is not systemd) still runs each agent in a bubblewrap sandbox, while
the options the unit leaves out for that reason (an overmount of part of /proc) would take the
sandbox away. deploy/Containerfile's command line names real options too; the image itself
needs a container registry to build, which the test machine cannot reach.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.agents.isolation import isolate, workspace
from tests.e2e.support import ROOT, ListenerProcess, wait_until
from tests.factories import make_agent, make_job

UNIT = ROOT / "deploy" / "ceaseless.service"
CONTAINERFILE = ROOT / "deploy" / "Containerfile"
INSTALLED = "/opt/ceaseless/.venv/bin/ceaseless"


def _unit_command() -> list[str]:
    (line,) = [x for x in UNIT.read_text().splitlines() if x.startswith("ExecStart=")]
    return shlex.split(line.removeprefix("ExecStart="))


def _container_command() -> list[str]:
    text = CONTAINERFILE.read_text()
    entrypoint = json.loads(re.search(r"^ENTRYPOINT (\[.*\])$", text, re.M).group(1))  # type: ignore[union-attr]
    command = json.loads(re.search(r"^CMD (\[.*\])$", text, re.M).group(1))  # type: ignore[union-attr]
    return [*entrypoint, *command]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is missing")
def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    # The unit names where the guide installs ceaseless; here it is this interpreter's.
    ceaseless = Path(sys.executable).with_name("ceaseless")
    unit = tmp_path / "ceaseless.service"
    unit.write_text(UNIT.read_text().replace(INSTALLED, str(ceaseless)))

    verified = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )

    assert verified.returncode == 0, verified.stderr
    assert verified.stderr.strip() == ""


@pytest.mark.parametrize("source", ["unit", "container"])
def test_the_command_lines_name_real_options(source: str) -> None:
    command = _unit_command() if source == "unit" else _container_command()
    assert command[0] == INSTALLED

    # --help is answered only when every option before it parsed.
    parsed = subprocess.run(
        [sys.executable, "-m", "listener", *command[1:], "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )

    assert parsed.returncode == 0, parsed.stderr
    assert "Usage: ceaseless listen" in parsed.stdout


def _unit_mounts(*extra: str) -> list[str]:
    """The unit's restrictions that reach the sandbox, around a command: ProtectSystem=true
    (read-only /usr and /boot) and NoNewPrivileges=true; `extra` adds mount commands."""
    mounts = ["mount --bind /usr /usr", "mount -o remount,bind,ro /usr"]
    if Path("/boot").is_dir():
        mounts += ["mount --bind /boot /boot", "mount -o remount,bind,ro /boot"]
    script = " && ".join([*mounts, *extra, 'exec setpriv --no-new-privs "$@"'])
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh"]


@pytest.fixture
def sandboxed(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("the unit runs the listener as root; so does this test")
    isolate(monkeypatch, "sandbox")
    with workspace() as ws:
        yield ws


def _pid_one_of_an_agent(db_url: str, conn: psycopg.Connection, listener: ListenerProcess) -> str:
    make_agent(conn, "init", "command", ["cat", "/proc/1/comm"])
    job = make_job(conn, "init")
    wait_until(
        lambda: (
            conn.execute(
                "select state = 'delivered' from ceaseless.job where id = %s", (job,)
            ).fetchone()
            == (True,)
        ),
        30,
        lambda: f"the job never finished: {listener.lines[-20:]}",
    )
    ((message,),) = conn.execute(
        "select final_message from ceaseless.agent_run where job_id = %s", (job,)
    ).fetchall()
    return str(message).strip()


@pytest.mark.slow
def test_the_units_hardening_keeps_the_agents_sandbox(
    db_url: str, conn: psycopg.Connection, sandboxed: Path
) -> None:
    listener = ListenerProcess(
        db_url, "--poll-interval", "1", "--workdir", str(sandboxed), wrapper=_unit_mounts()
    ).ready()
    try:
        (isolation,) = listener.events("agents.isolation")
        assert (isolation["sandbox"], isolation["network"]) == ("bwrap", "own namespace")
        assert isolation["user"] == "an OS user per lane"
        assert listener.events("agents.not_isolated") == []
        # The agent's pid 1 is bubblewrap's, in a pid namespace of its own.
        assert _pid_one_of_an_agent(db_url, conn, listener) == "bwrap"
    finally:
        listener.stop()


@pytest.mark.slow
def test_a_proc_overmount_would_take_the_sandbox_away(
    db_url: str, conn: psycopg.Connection, sandboxed: Path
) -> None:
    # What ProtectKernelTunables does: /proc/sys read-only, mounted over the host's /proc.
    overmount = ["mount --bind /proc/sys /proc/sys", "mount -o remount,bind,ro /proc/sys"]
    listener = ListenerProcess(
        db_url,
        "--poll-interval",
        "1",
        "--workdir",
        str(sandboxed),
        wrapper=_unit_mounts(*overmount),
    ).ready()
    try:
        (isolation,) = listener.events("agents.isolation")
        assert isolation["sandbox"] == "none"
        (warning,) = listener.events("agents.not_isolated")
        assert "bwrap" in warning["problem"] or "bubblewrap" in warning["problem"]
    finally:
        listener.stop()
