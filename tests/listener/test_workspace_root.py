"""context_paths stay inside the workspace root, and the root is never `/`.

Reproduced: context_paths were read relative to the listener's working
directory, which is `/` under systemd, so a routine naming `etc/shadow` (which
passes validation: it is relative) had that file pasted into its prompt.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from listener.cli import app
from listener.config import JOB_DIRECTORIES, ConfigError, ListenerConfig, workspace_root
from listener.daemon.producer.context import compose_prompt

URL = "postgresql://nobody@127.0.0.1:1/nothing"


def _prompt(root: Path, *paths: str) -> str:
    return compose_prompt("task", {"context_paths": list(paths)}, root)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "shadow").write_text("the workspace's own file")
    (root / "notes.md").write_text("notes")
    (tmp_path / "secret").write_text("outside")
    return root


def test_slash_is_refused_as_the_workspace_root() -> None:
    with pytest.raises(ConfigError, match="resolves to /"):
        ListenerConfig(url=URL, workdir="/")


def test_a_symlink_to_slash_is_refused_as_the_workspace_root(tmp_path: Path) -> None:
    (tmp_path / "root").symlink_to("/")
    with pytest.raises(ConfigError, match="resolves to /"):
        workspace_root(str(tmp_path / "root"))


def test_the_default_root_is_refused_when_the_listener_runs_in_slash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Under systemd the working directory is /.
    monkeypatch.chdir("/")
    with pytest.raises(ConfigError, match="the current directory"):
        ListenerConfig(url=URL)


def test_a_workspace_root_that_is_not_a_directory_is_refused_before_connecting(
    tmp_path: Path,
) -> None:
    # A listener that started would claim jobs and fail every one, unable to
    # make their working directories under it.
    missing = tmp_path / "not-made-yet"
    result = CliRunner().invoke(
        app, ["listen", "--workdir", str(missing)], env={"DATABASE_URL": URL}
    )
    assert result.exit_code != 0
    assert f"mkdir -p {missing}" in result.output
    (tmp_path / "a-file").write_text("")
    with pytest.raises(ConfigError, match="is not a directory"):
        ListenerConfig(url=URL, workdir=str(tmp_path / "a-file"))


def test_a_directory_of_its_own_is_the_root(workspace: Path) -> None:
    assert workspace_root(str(workspace / "etc" / "..")) == workspace
    assert ListenerConfig(url=URL, workdir=str(workspace)).workdir == str(workspace)


def test_listen_with_slash_as_the_workspace_exits_with_the_reason() -> None:
    result = CliRunner().invoke(app, ["listen", "--workdir", "/"], env={"DATABASE_URL": URL})
    assert result.exit_code == 1
    assert "resolves to /" in result.output and "--workdir" in result.output
    assert "Traceback" not in result.output


def test_relative_paths_are_read_from_the_workspace_not_from_slash(workspace: Path) -> None:
    prompt = _prompt(workspace, "etc/shadow", "notes.md")
    assert "the workspace's own file" in prompt and "notes" in prompt


@pytest.mark.parametrize("path", ["../secret", "etc/../../secret", "/etc/hostname", "/"])
def test_absolute_paths_and_dot_dot_are_refused(workspace: Path, path: str) -> None:
    prompt = _prompt(workspace, path)
    assert "(skipped: not a relative path inside the workspace)" in prompt
    assert "outside" not in prompt.split("(skipped")[1]


def test_a_symlink_out_of_the_workspace_is_refused(workspace: Path) -> None:
    (workspace / "escape").symlink_to(workspace.parent)
    (workspace / "shadow-link").symlink_to(workspace.parent / "secret")
    prompt = _prompt(workspace, "escape/secret", "shadow-link")
    assert prompt.count("(skipped: outside the workspace)") == 2


def test_nothing_is_read_with_slash_as_the_root() -> None:
    prompt = _prompt(Path("/"), "etc/hostname", "etc/passwd")
    assert prompt.count("(skipped: the workspace root is /)") == 2
    assert "root:" not in prompt


def test_a_fifo_in_the_workspace_does_not_block_the_read(workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    result: list[str] = []
    reader = threading.Thread(target=lambda: result.append(_prompt(workspace, "pipe")))
    reader.start()
    reader.join(timeout=5)
    if reader.is_alive():  # unblock the thread so the test run can end
        with open(workspace / "pipe", "w"):
            pass
        reader.join()
        pytest.fail("reading a FIFO blocked")
    assert "(skipped: not a regular file)" in result[0]


def test_context_paths_cannot_read_a_jobs_working_directory(workspace: Path) -> None:
    # Jobs' directories live under the root: another user's job must not have
    # its files pasted into a routine's prompt, by name or through a symlink.
    other = workspace / JOB_DIRECTORIES / "0b1c2d3e-0000-4000-8000-000000000000"
    other.mkdir(parents=True)
    (other / "work.txt").write_text("another job's work")
    (workspace / "into-a-job").symlink_to(other)
    prompt = _prompt(
        workspace,
        f"{JOB_DIRECTORIES}/{other.name}/work.txt",
        "into-a-job/work.txt",
        "notes.md",
    )
    assert "another job's work" not in prompt
    assert prompt.count("(skipped: a job's working directory") == 2
    assert "notes" in prompt
