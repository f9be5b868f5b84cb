"""`ceaseless db …` on the embedded server: idempotent start, clear messages, no tracebacks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.support import ROOT


@pytest.fixture
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ceaseless-db-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        _run(path, "db", "stop")
        shutil.rmtree(path, ignore_errors=True)


def _run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL" and not k.startswith("PG")}
    env.update(CEASELESS_HOME=str(home), PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "listener", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_starting_twice_reuses_the_running_server(home: Path) -> None:
    first = _run(home, "db", "start")
    second = _run(home, "db", "start")
    assert first.returncode == 0 and second.returncode == 0
    assert first.stdout == second.stdout
    status = _run(home, "db", "status")
    assert status.returncode == 0 and "running" in status.stdout


def test_status_of_a_missing_data_directory_says_so_without_a_traceback(home: Path) -> None:
    status = _run(home, "db", "status")
    assert status.returncode == 3
    assert "no embedded database" in status.stdout
    stop = _run(home, "db", "stop")
    assert stop.returncode == 0 and "no embedded database" in stop.stdout
    assert "Traceback" not in status.stderr + stop.stderr


def test_stale_pid_file_is_reported_and_cleared_by_start(home: Path) -> None:
    assert _run(home, "db", "start").returncode == 0
    pid_file = home / "pgdata" / "postmaster.pid"
    lines = pid_file.read_text().splitlines()
    assert _run(home, "db", "stop").returncode == 0
    # A crash leaves the pid file behind, naming a process that is gone.
    lines[0] = "999999"
    pid_file.write_text("\n".join(lines) + "\n")
    status = _run(home, "db", "status")
    assert "stale postmaster.pid" in status.stdout and "Traceback" not in status.stderr
    started = _run(home, "db", "start")
    assert started.returncode == 0, started.stderr
    assert "running" in _run(home, "db", "status").stdout


def test_data_directory_and_socket_are_private_and_no_ancestor_is_changed(home: Path) -> None:
    ancestors = [home, *home.parents]
    modes_before = [path.stat().st_mode for path in ancestors]
    assert _run(home, "db", "start").returncode == 0
    data = home / "pgdata"
    assert data.stat().st_mode & 0o077 == 0
    assert list(data.glob(".s.PGSQL.*")), "the socket should live in the private data directory"
    assert [path.stat().st_mode for path in ancestors] == modes_before


def test_unreachable_home_as_root_is_an_error_that_says_what_to_do() -> None:
    if os.geteuid() != 0:
        pytest.skip("only root runs the server as another OS user")
    private = Path(tempfile.mkdtemp(prefix="ceaseless-private-"))  # mode 0700
    try:
        result = _run(private / "home", "db", "start")
        assert result.returncode == 1
        assert "not searchable by other users" in result.stderr
        assert "Traceback" not in result.stderr
        assert private.stat().st_mode & 0o777 == 0o700  # and we did not change it
    finally:
        shutil.rmtree(private, ignore_errors=True)


def test_a_private_home_as_root_keeps_its_mode_and_is_an_error_that_says_what_to_do() -> None:
    if os.geteuid() != 0:
        pytest.skip("only root runs the server as another OS user")
    parent = Path(tempfile.mkdtemp(prefix="ceaseless-parent-"))
    parent.chmod(0o755)
    home = parent / "home"
    home.mkdir(mode=0o700)
    try:
        result = _run(home, "db", "start")
        assert result.returncode == 1
        assert f"but {home} is not searchable by other users" in result.stderr
        assert home.stat().st_mode & 0o777 == 0o700  # not chmod-ed behind the user's back
    finally:
        _run(home, "db", "stop")
        shutil.rmtree(parent, ignore_errors=True)


def test_every_command_has_help() -> None:
    for args in (
        ["--help"],
        ["up", "--help"],
        ["listen", "--help"],
        ["migrate", "--help"],
        ["db", "--help"],
        ["status", "--help"],
        ["agent", "add", "--help"],
        ["job", "add", "--help"],
        ["job", "cancel", "--help"],
    ):
        result = subprocess.run(
            [sys.executable, "-m", "listener", *args],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert result.returncode == 0, (args, result.stderr)
        assert "Usage" in result.stdout
