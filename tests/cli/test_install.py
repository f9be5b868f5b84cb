"""A fresh virtualenv, a plain `pip install .`, and the README's main job on the embedded database.

Slow (it installs the package for real), and the only test that proves the SQL
files ship inside the wheel: the installed package runs from outside the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.e2e.support import ROOT, wait_until


@pytest.fixture(scope="module")
def installed() -> Iterator[tuple[Path, dict[str, str]]]:
    work = Path(tempfile.mkdtemp(prefix="ceaseless-install-"))
    work.chmod(0o755)  # as root, the embedded server's OS user must reach its home
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", str(ROOT)], check=True, cwd=work
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "PYTHONPATH") and not k.startswith("PG")
    }
    env["CEASELESS_HOME"] = str(work / "home")
    try:
        yield venv / "bin" / "ceaseless", env
    finally:
        subprocess.run(
            [str(venv / "bin" / "ceaseless"), "db", "stop"], env=env, capture_output=True, cwd=work
        )
        shutil.rmtree(work, ignore_errors=True)


def _ceaseless(installed: tuple[Path, dict[str, str]], *args: str) -> str:
    command, env = installed
    result = subprocess.run(
        [str(command), *args],
        env=env,
        capture_output=True,
        text=True,
        cwd=command.parent,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.slow
def test_fresh_install_migrates_once_serves_psql_and_runs_the_main_job(
    installed: tuple[Path, dict[str, str]],
) -> None:
    # One test, not three: the install is the expensive part, and xdist would
    # give each test of a module-scoped fixture its own install.
    assert "applied 0001_foundation.sql" in _ceaseless(installed, "migrate")
    assert "no migrations to apply" in _ceaseless(installed, "migrate")

    url = _ceaseless(installed, "db", "url").strip()
    assert url.startswith("postgresql://")
    psql = _ceaseless(installed, "db", "psql", "--", "-Atc", "select count(*) from ceaseless.job")
    assert psql.strip() == "0"

    _up_delivers_an_inserted_job(installed, url)


def _up_delivers_an_inserted_job(installed: tuple[Path, dict[str, str]], url: str) -> None:
    command, env = installed
    up = subprocess.Popen(
        [str(command), "up", "--log-format", "json", "--poll-interval", "60"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        cwd=command.parent,
    )
    try:
        assert up.stderr is not None
        deadline = time.monotonic() + 60
        for line in up.stderr:
            if json.loads(line).get("event") == "listen.subscribed":
                break
            assert time.monotonic() < deadline
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "insert into ceaseless.agents (name, adapter, argv) "
                "values ('echo', 'command', '{cat}')"
            )
            job = conn.execute(
                "insert into ceaseless.job (kind, agent, prompt) "
                "values ('task', 'echo', 'hello') returning id"
            ).fetchone()
            assert job is not None
            wait_until(
                lambda: (
                    conn.execute(
                        "select r.outcome, r.final_message from ceaseless.agent_run r "
                        "where r.job_id = %s and r.finished_at is not null",
                        (job[0],),
                    ).fetchone()
                    == ("succeeded", "hello")
                ),
                10,
                "ceaseless up did not deliver the job",
            )
    finally:
        up.send_signal(signal.SIGTERM)
        assert up.wait(30) == 0
