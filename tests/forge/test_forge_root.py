"""Forge checkouts live under a root of their own, never inside the task workspace root.

Reproduced: a forge run's checkout was `<workspace root>/forge/<job>/<run>`, and
every task agent works in the workspace root, read-write: any task agent could
read, or rewrite before the push, the private code a forge job had cloned.
"""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from listener.agents.environment import Identity
from listener.cli import app
from listener.config import ConfigError, ListenerConfig, default_forge_root, forge_root
from listener.forge.workspace import ForgeRootError, hand_over, job_directory

URL = "postgresql://nobody@127.0.0.1:1/nothing"
JOB = uuid.UUID("6f1c2d3e-0000-4000-8000-000000000001")


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_the_default_forge_root_is_outside_the_workspace_root_and_ceaseless_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CEASELESS_HOME", str(tmp_path / "home"))
    (tmp_path / "workspace").mkdir()

    root = forge_root(None, tmp_path / "workspace")

    assert root == default_forge_root() == Path(f"/var/tmp/ceaseless-forge-{os.geteuid()}")
    assert ListenerConfig(url=URL, workdir=str(tmp_path / "workspace")).forge_root is None


@pytest.mark.parametrize("inside", ["workspace/forge", "workspace", "."])
def test_a_forge_root_that_overlaps_the_workspace_root_is_refused(
    tmp_path: Path, inside: str
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()

    with pytest.raises(ConfigError, match="overlap: task agents work in the workspace root"):
        ListenerConfig(url=URL, workdir=str(workspace), forge_root=str(tmp_path / inside))


def test_a_forge_root_inside_ceaseless_home_or_at_slash_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CEASELESS_HOME", str(tmp_path / "home"))
    workspace = str(tmp_path / "workspace")
    Path(workspace).mkdir()

    with pytest.raises(ConfigError, match="inside CEASELESS_HOME"):
        ListenerConfig(url=URL, workdir=workspace, forge_root=str(tmp_path / "home" / "forge"))
    with pytest.raises(ConfigError, match="resolves to /"):
        ListenerConfig(url=URL, workdir=workspace, forge_root="/")


def test_the_cli_refuses_a_forge_root_inside_the_workspace_before_connecting(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()

    result = CliRunner().invoke(
        app,
        ["listen", "--workdir", str(workspace), "--forge-root", str(workspace / "forge")],
        env={"DATABASE_URL": URL},
    )

    assert result.exit_code != 0
    assert "overlap" in result.output


def test_the_forge_root_and_job_directories_are_the_listeners_alone(tmp_path: Path) -> None:
    root = tmp_path / "forge-root"

    job = job_directory(root, JOB, None)

    assert job == root / str(JOB)
    assert (mode(root), mode(job)) == (0o700, 0o700)
    checkout = job / "run"
    checkout.mkdir(mode=0o755)
    hand_over(checkout, None)
    assert mode(checkout) == 0o700


def test_with_agents_as_another_user_they_pass_through_but_cannot_list(tmp_path: Path) -> None:
    me = os.geteuid()
    identity = Identity(name="agent", uid=me, gid=os.getegid(), home=str(tmp_path))
    root = tmp_path / "forge-root"
    root.mkdir(mode=0o755)  # made earlier, more open: tightened

    job = job_directory(root, JOB, identity)

    assert (mode(root), mode(job)) == (0o711, 0o711)


def test_a_symlink_planted_as_the_forge_root_is_refused_and_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "forge-root"
    root.symlink_to(elsewhere)

    with pytest.raises(ForgeRootError, match="is not a directory"):
        job_directory(root, JOB, None)
    assert list(elsewhere.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can make a directory another's")
def test_a_forge_root_that_belongs_to_another_user_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "forge-root"
    root.mkdir(mode=0o777)
    os.chown(root, 65534, 65534)  # nobody, who made it first in a shared /var/tmp

    with pytest.raises(ForgeRootError, match="belongs to uid 65534"):
        job_directory(root, JOB, None)
    assert list(root.iterdir()) == []
