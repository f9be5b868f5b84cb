"""A real PgBouncer in transaction mode in front of the test server, one per test.

Each starts from an ini of its own on a free loopback port, in the foreground, logging to a
file in its directory; as root it runs as the server's own OS user (PgBouncer refuses to run
as root, and the embedded server's socket is reachable by its user only).
Clients log in to it with a password from its auth file (plain text, which PgBouncer also
uses to log in to the server when the server asks for one).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ceaseless"


def binary() -> str | None:
    """pgbouncer on PATH, Debian's /usr/sbin, or unpacked by .ci/run into the cache."""
    for candidate in (
        shutil.which("pgbouncer"),
        "/usr/sbin/pgbouncer",
        str(_CACHE / "pgbouncer" / "usr" / "sbin" / "pgbouncer"),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _server_password(server: dict[str, str]) -> str | None:
    """The superuser's password: in the URL, or in the password file it names."""
    if password := server.get("password"):
        return password
    if passfile := server.get("passfile"):
        for line in Path(passfile).read_text().splitlines():
            *_, user, password = line.split(":", 4)
            if user in ("*", server.get("user", "postgres")):
                return password
    return None


def _service_user(host: str) -> pwd.struct_passwd:
    """Whom PgBouncer runs as under root: the owner of the server's socket directory (the only
    user besides root who may reach it), else `postgres`."""
    if host.startswith("/"):
        return pwd.getpwuid(Path(host).stat().st_uid)
    return pwd.getpwnam("postgres")


class PgBouncer:
    """PgBouncer in transaction mode with `pool_size` server connections per database and user."""

    def __init__(self, server_url: str, *, pool_size: int = 2) -> None:
        found = binary()
        if found is None:
            raise FileNotFoundError("pgbouncer is not installed (.ci/run unpacks Debian's)")
        server = conninfo_to_dict(server_url)
        self.port = _free_port()
        self.superuser = str(server.get("user") or "postgres")
        # Trust on the server needs no password; PgBouncer's clients still give one.
        self.passwords = {self.superuser: _server_password(server) or "pgbouncer-test"}
        self.dir = Path(tempfile.mkdtemp(prefix="ceaseless-pgbouncer-"))
        self.dir.chmod(0o755)
        self.log = self.dir / "pgbouncer.log"
        target = f"host={server.get('host') or '127.0.0.1'} port={server.get('port') or 5432}"
        (self.dir / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = {target}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = scram-sha-256\n"
            f"auth_file = {self.dir / 'users.txt'}\n"
            f"admin_users = {self.superuser}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {pool_size}\n"
            "reserve_pool_size = 0\n"
            "max_client_conn = 500\n"
            f"logfile = {self.log}\n"
        )
        self._write_users()
        self.log.touch()
        as_root = os.geteuid() == 0
        if as_root:
            user = _service_user(str(server.get("host") or ""))
            os.chown(self.log, user.pw_uid, user.pw_gid)
        self.proc = subprocess.Popen(
            [found, *(["-u", user.pw_name] if as_root else []), str(self.dir / "pgbouncer.ini")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._wait_ready()

    def _write_users(self) -> None:
        users = self.dir / "users.txt"
        users.write_text("".join(f'"{name}" "{pw}"\n' for name, pw in self.passwords.items()))
        users.chmod(0o644)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pgbouncer exited: {self.log.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"pgbouncer never listened: {self.log.read_text()[-2000:]}")

    def add_user(self, name: str, password: str) -> None:
        """Let `name` log in through the pooler (and PgBouncer in to the server as it)."""
        self.passwords[name] = password
        self._write_users()
        with self.admin() as console:
            console.execute("reload")

    def url(self, database: str, user: str | None = None) -> str:
        """A URL to `database` through the pooler, as `user` (default: the superuser)."""
        user = user or self.superuser
        return make_conninfo(
            host="127.0.0.1",
            port=self.port,
            dbname=database,
            user=user,
            password=self.passwords[user],
        )

    def admin(self) -> psycopg.Connection:
        """PgBouncer's admin console (SHOW POOLS, …); it speaks the simple protocol only."""
        return psycopg.connect(
            self.url("pgbouncer"), autocommit=True, cursor_factory=psycopg.ClientCursor
        )

    def show(self, what: str) -> list[dict[str, object]]:
        with self.admin() as console:
            cur = console.execute(f"show {what}")
            names = [column.name for column in cur.description or []]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)
