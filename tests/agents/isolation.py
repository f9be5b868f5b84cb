"""Helpers for the isolation tests: workspaces an agent's OS user can write, and
the two isolations a host can give (sandbox, or the keeper alone)."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from listener.agents.containment import CONTAINMENT_VAR
from listener.agents.sandbox import AGENT_USER_VAR, SANDBOX_VAR, Isolation
from listener.config import JOB_DIRECTORIES

from .support import FAKES

FAKE_ESCAPER = str(FAKES / "fake_escaper")
FAKE_INTRUDER = str(FAKES / "fake_intruder")
MODES = ["sandbox", "no_sandbox"]


def isolate(monkeypatch: pytest.MonkeyPatch, mode: str) -> Isolation:
    """Set this process's environment (which a listener subprocess inherits) for `mode`.

    Both modes run each lane as an unprivileged user of its own when the tests run
    as root; "no_sandbox" is a host without bubblewrap, where only the keeper (and
    how this host lets it hold processes) is left.
    """
    monkeypatch.delenv(AGENT_USER_VAR, raising=False)
    monkeypatch.delenv(CONTAINMENT_VAR, raising=False)
    if mode == "sandbox":
        monkeypatch.delenv(SANDBOX_VAR, raising=False)
    else:
        monkeypatch.setenv(SANDBOX_VAR, "off")
    isolation = Isolation.current()
    if mode == "sandbox" and not isolation.sandboxed:
        pytest.skip(f"no sandbox on this host: {isolation.warning()}")
    return isolation


@contextmanager
def workspace() -> Iterator[Path]:
    """A directory the agent's OS user can write: /tmp/…, mode 0777 (pytest's are 0700)."""
    path = Path(tempfile.mkdtemp(prefix="ceaseless-ws-", dir="/tmp"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def job_directory(root: Path, job_id: object) -> Path:
    """The working directory a listener with this workspace root gives a job."""
    return root / JOB_DIRECTORIES / str(job_id)


def new_token() -> str:
    return f"escapee-{uuid.uuid4().hex}"


def processes_with(token: str) -> list[int]:
    """Live processes whose command line holds `token`, whatever pid namespace they run in."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if token.encode() in cmdline and state not in (b"Z", b"X"):
            found.append(int(entry))
    return found


def escaper_env(ws: Path, token: str, then: str = "sleep") -> dict[str, str]:
    return {"FAKE_ESCAPE_DIR": str(ws), "FAKE_ESCAPE_TOKEN": token, "FAKE_ESCAPE_THEN": then}


def escapees_started(ws: Path) -> bool:
    return (ws / "escapee-1").exists() and (ws / "escapee-2").exists()
