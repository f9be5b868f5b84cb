"""`ceaseless up` / `listen` take their options from ListenerConfig, and serve what was typed.

The options are built from the config's fields, so these tests read the fields
too: a field added to ListenerConfig is checked here without editing this file.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any

import psycopg
import pytest
import typer
from typer.testing import CliRunner

from listener.cli import app
from listener.cli.options import ListenerOptions, listener_options
from listener.config import ListenerConfig
from tests.e2e.support import ROOT

FAKE_URL = "postgresql://nobody@127.0.0.1:1/not-contacted"


def _option_fields() -> list[dataclasses.Field[Any]]:
    fields = [f for f in dataclasses.fields(ListenerConfig) if "help" in f.metadata]
    assert len(fields) >= 8, "ListenerConfig lost its options?"
    return fields


def _flag(field: dataclasses.Field[Any]) -> str:
    return field.metadata.get("flag") or "--" + field.name.replace("_", "-")


def _words(text: str) -> str:
    """Help output without its box drawing and line wrapping."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


@pytest.mark.parametrize("command", ["up", "listen"])
def test_help_lists_every_listener_option_with_its_help_text(command: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "listener", command, "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    shown = _words(result.stdout)
    for field in _option_fields():
        assert f" {_flag(field)} " in f" {shown} ", f"{command} --help lacks {_flag(field)}"
        assert _words(field.metadata["help"]) in shown, f"{command} --help: {field.name}'s help"
    assert "--log-format" in shown


def _parse(*args: str) -> ListenerConfig:
    """Parse `args` as a command decorated with listener_options would, and build the config."""
    seen: list[ListenerConfig] = []
    probe = typer.Typer()

    @probe.command()
    @listener_options
    def serve(options: ListenerOptions) -> None:
        seen.append(options.config(FAKE_URL))

    @probe.command()
    def other() -> None:  # a second command, so `serve` is a subcommand as in the CLI
        pass

    result = CliRunner().invoke(probe, ["serve", *args])
    assert result.exit_code == 0, result.output
    return seen[0]


def _sample(field: dataclasses.Field[Any]) -> tuple[list[str], object]:
    """Arguments that set `field` to a value unlike its default, and the value expected."""
    kind = typing.get_type_hints(ListenerConfig)[field.name]
    if isinstance(kind, types.UnionType):
        kind = next(arg for arg in typing.get_args(kind) if arg is not type(None))
    flag = _flag(field)
    # Relative on the command line, absolute in the config (and apart from each other).
    paths = {"workdir": "some/dir", "forge_root": "some/forge"}
    if field.name in paths:
        return [flag, paths[field.name]], str(Path(paths[field.name]).resolve())
    if kind == list[str]:
        return [flag, "a", flag, "b"], ["a", "b"]
    samples: dict[object, tuple[str, object]] = {
        int: ("7", 7),
        float: ("2.5", 2.5),
        str: ("sample", "sample"),
    }
    if kind not in samples:
        pytest.fail(f"no sample for ListenerConfig.{field.name}: {kind}; add one here")
    text, value = samples[kind]
    return [flag, text], value


def test_every_listener_option_reaches_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The workspace root must exist; the relative paths are read from here.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "some" / "dir").mkdir(parents=True)
    args: list[str] = []
    expected: dict[str, object] = {}
    for field in _option_fields():
        field_args, value = _sample(field)
        args += field_args
        expected[field.name] = value
    config = _parse(*args)
    assert {name: getattr(config, name) for name in expected} == expected
    assert config.url == FAKE_URL


def test_options_left_out_get_the_configs_defaults() -> None:
    config = _parse()
    # worker_id comes from its default_factory: host:pid:random, different per call.
    assert re.fullmatch(r".+:\d+:[0-9a-f]{6}", config.worker_id)
    assert config == ListenerConfig(url=FAKE_URL, worker_id=config.worker_id)


class _Supervisor:
    """Stands in for listener.daemon.supervisor.run: records the config, returns a chosen status."""

    def __init__(
        self, status: int, check: typing.Callable[[ListenerConfig], None] | None = None
    ) -> None:
        self.status = status
        self.check = check
        self.configs: list[ListenerConfig] = []

    def __call__(self, config: ListenerConfig) -> int:
        if self.check:
            self.check(config)
        self.configs.append(config)
        return self.status


@pytest.fixture
def quiet_logging(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record log.configure instead of pointing the process's log at the runner's stderr."""
    formats: list[str] = []
    monkeypatch.setattr("listener.log.configure", formats.append)
    return formats


@pytest.mark.parametrize("status", [0, 3])
def test_listen_serves_the_options_and_exits_with_the_supervisors_status(
    monkeypatch: pytest.MonkeyPatch, quiet_logging: list[str], status: int
) -> None:
    supervisor = _Supervisor(status)
    monkeypatch.setattr("listener.daemon.supervisor.run", supervisor)
    result = CliRunner().invoke(
        app,
        ["listen", "--concurrency", "3", "--kind", "task", "--log-format", "json"],
        env={"DATABASE_URL": FAKE_URL},
    )
    assert result.exit_code == status, result.output
    [config] = supervisor.configs
    assert (config.url, config.concurrency, config.kinds) == (FAKE_URL, 3, ["task"])
    assert quiet_logging == ["json"]


def test_up_migrates_before_it_serves(
    monkeypatch: pytest.MonkeyPatch, quiet_logging: list[str], empty_db_url: str
) -> None:
    def migrated(config: ListenerConfig) -> None:
        with psycopg.connect(config.url) as conn:
            assert conn.execute("select to_regclass('ceaseless.job')").fetchone() != (None,)

    supervisor = _Supervisor(0, migrated)
    monkeypatch.setattr("listener.daemon.supervisor.run", supervisor)
    result = CliRunner().invoke(
        app, ["up", "--poll-interval", "60"], env={"DATABASE_URL": empty_db_url}
    )
    assert result.exit_code == 0, result.output
    [config] = supervisor.configs
    assert (config.url, config.poll_interval) == (empty_db_url, 60.0)
