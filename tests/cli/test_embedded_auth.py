"""The embedded server asks for a password: scram-sha-256, its password file 0600,
and an older data directory created with trust authentication is switched on start."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from listener.database.embedded import EmbeddedServer
from tests.e2e.support import ROOT


@pytest.fixture
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ceaseless-auth-"))
    path.chmod(0o755)  # as root, the server's own OS user must reach it
    try:
        yield path
    finally:
        EmbeddedServer(path).stop()
        shutil.rmtree(path, ignore_errors=True)


def _without_password(url: str) -> str:
    params = conninfo_to_dict(url)
    params.pop("passfile", None)
    return make_conninfo(**params)


def _hba_rules(server: EmbeddedServer) -> list[str]:
    lines = (server.data_dir / "pg_hba.conf").read_text().splitlines()
    return [line.split() for line in lines if line.strip() and not line.startswith("#")]


def test_connecting_without_the_password_fails(home: Path) -> None:
    server = EmbeddedServer(home)
    url = server.start()
    with psycopg.connect(url) as conn:
        assert conn.execute("select 1").fetchone() == (1,)
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(_without_password(url), connect_timeout=5).close()
    # Nor with a wrong one.
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(_without_password(url), password="guess", connect_timeout=5).close()
    assert all(rule[-1] == "scram-sha-256" for rule in _hba_rules(server))


def test_the_password_file_is_private_to_the_listeners_user(home: Path) -> None:
    server = EmbeddedServer(home)
    url = server.start()
    info = server.password_file.stat()
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_uid == os.geteuid()
    assert conninfo_to_dict(url)["passfile"] == str(server.password_file)
    password = server.password_file.read_text().strip().rsplit(":", 1)[-1]
    assert len(password) >= 32
    # The password is in no file the server's own user keeps, and not in its log.
    assert password not in server.log_file.read_text()
    assert not list(home.glob(".initdb-password-*"))


def test_an_old_trust_home_is_switched_to_passwords_on_start(home: Path) -> None:
    server = EmbeddedServer(home)
    # An install made by an older version: initdb with trust, no password file.
    server._owned_private_dir(server.data_dir)
    server._run(
        [
            str(server.bin_dir() / "initdb"),
            "-D",
            str(server.data_dir),
            "-U",
            "postgres",
            "--auth=trust",
            "--no-instructions",
        ],
        what="initialise an old-style data directory",
    )
    assert any(rule[-1] == "trust" for rule in _hba_rules(server))
    assert not server.password_file.exists()

    url = server.start()
    assert not any(rule[-1] == "trust" for rule in _hba_rules(server))
    assert stat.S_IMODE(server.password_file.stat().st_mode) == 0o600
    with psycopg.connect(url) as conn:
        assert conn.execute("select 1").fetchone() == (1,)
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(_without_password(url), connect_timeout=5).close()
    # A second start finds nothing to switch and keeps the same password.
    before = server.password_file.read_text()
    server.stop()
    assert server.start() == url
    assert server.password_file.read_text() == before


def test_db_psql_works_with_the_password(home: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL" and not k.startswith("PG")}
    env.update(CEASELESS_HOME=str(home), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "listener", "db", "psql", "--", "-XAtc", "select 42"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "42"
