"""Test fixtures: a real PostgreSQL, a migrated template, and a fresh clone per test.

The server is DATABASE_URL when set, else an embedded PostgreSQL started once for
the whole run in a temporary CEASELESS_HOME. The controller process (the only one
without xdist, or xdist's coordinator) migrates a template database once; every
test gets `CREATE DATABASE … TEMPLATE` of it, so tests are isolated and run in
parallel, and a test that breaks its database breaks nothing else.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from listener.database.embedded import EmbeddedServer
from listener.database.migrate import migrate
from tests.fakes.forge import FakeForge, check_no_violations
from tests.fakes.github_openapi import Description, description_path

_URL_VAR = "CEASELESS_TEST_SERVER_URL"
_TEMPLATE_VAR = "CEASELESS_TEST_TEMPLATE"
_HOME_VAR = "CEASELESS_TEST_HOME"

FAKES = Path(__file__).parent / "fakes"

# Agents in most tests run as the test process's own OS user (one pinned user
# for every lane) and without the bubblewrap sandbox: they write pid files into
# pytest's private temporary directories and report pids as the host sees them.
# The isolation tests (tests/agents/test_isolation.py, test_escape.py,
# test_lanes_apart.py) turn the sandbox and the lanes' own users on explicitly.
os.environ.setdefault("CEASELESS_SANDBOX", "off")
os.environ.setdefault("CEASELESS_AGENT_USER", pwd.getpwuid(os.geteuid()).pw_name)


def _is_controller(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput")


def _server_url() -> str:
    return os.environ[_URL_VAR]


def url_for(database: str) -> str:
    """The test server's conninfo with another database name."""
    return make_conninfo(_server_url(), dbname=database)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` starts two workers per core: most tests wait (on listeners, agents, the
    server and timers) more than they compute, and one worker per core left half the CPU
    time unused."""
    return 2 * len(os.sched_getaffinity(0))


# The fixtures through which a test reaches the run's server (the embedded one, or the one
# DATABASE_URL names) or learns which it is; every other such fixture depends on one.
_SERVER_FIXTURES = frozenset({"_drops", "server_url", "embedded_home"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `no_server` each test that uses none of the server fixtures: it does the same
    whichever server the run uses, so a second run on another server leaves it out
    (.ci/run). Tests reach the server only through fixtures."""
    for item in items:
        if not _SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.no_server)


def _without_fsync(server_url: str) -> None:
    """The run's own embedded server skips fsync: it holds nothing past the run.

    Every DROP DATABASE waits for an immediate checkpoint, and a checkpoint fsyncs every
    file written since the last one: a test's fresh clone is over 500 files. On a
    server that several workers keep writing to, the drop at a test's end took a second
    (median), more than most tests' own run. Without fsync the same checkpoint only
    hands its pages to the kernel. What the tests assert does not change: commits,
    locks, NOTIFY and crash recovery after a killed backend work as with fsync (the
    kernel still holds every write); only an operating system crash could lose data,
    and a crash ends the run anyway. Servers the tests start for themselves (restarts,
    failover) keep the defaults.
    """
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute("alter system set fsync = off")
        conn.execute("select pg_reload_conf()")


# What the run's embedded server may hold at its fullest: the clones of the running
# tests and of those waiting for their drop, its WAL, and the slow tests' million-row
# history (docs/development.md).
_SERVER_ROOM = 8 << 30


def _memory_backed_dir() -> str | None:
    """/dev/shm for the run's embedded server when it has room and lets binaries run there,
    else None (the default temporary directory).

    A test's clone creates over 500 files and its drop deletes them. On a file system
    that checks each new file against the files deleted in the last minutes (ext4
    without a journal, which the CI machines have), creating them grew with the run's
    churn: CREATE DATABASE took a quarter of a second of CPU, nearly all of it in the
    kernel, and close to a quarter of the whole run's CPU time. A tmpfs keeps no such
    record. The server's binaries are staged beside its data (as root), hence exec.
    """
    shm = "/dev/shm"
    try:
        found = os.statvfs(shm)
    except OSError:
        return None
    if found.f_flag & os.ST_NOEXEC or found.f_bavail * found.f_frsize < _SERVER_ROOM:
        return None
    return shm


def pytest_configure(config: pytest.Config) -> None:
    if not _is_controller(config) or _URL_VAR in os.environ:
        return
    if url := os.environ.get("DATABASE_URL"):
        server_url = url
    else:
        # World-searchable (not mkdtemp's 0700) so that, as root, the server's
        # own OS user can reach its data directory; see listener/database/embedded.py.
        home = Path(tempfile.mkdtemp(prefix="ceaseless-test-", dir=_memory_backed_dir()))
        home.chmod(0o755)
        os.environ[_HOME_VAR] = str(home)
        server_url = EmbeddedServer(home).start()
        _without_fsync(server_url)
    os.environ[_URL_VAR] = server_url
    template = f"ceaseless_tpl_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'create database "{template}"')
    migrate(make_conninfo(server_url, dbname=template))
    os.environ[_TEMPLATE_VAR] = template


def pytest_unconfigure(config: pytest.Config) -> None:
    if not _is_controller(config) or _TEMPLATE_VAR not in os.environ:
        return
    with psycopg.connect(_server_url(), autocommit=True) as conn:
        conn.execute(f'drop database if exists "{os.environ.pop(_TEMPLATE_VAR)}" with (force)')
    if home := os.environ.pop(_HOME_VAR, None):
        EmbeddedServer(Path(home)).stop()
        shutil.rmtree(home, ignore_errors=True)
    os.environ.pop(_URL_VAR, None)


def _drop_database(name: str) -> None:
    with psycopg.connect(_server_url(), autocommit=True) as conn:
        conn.execute(f'drop database if exists "{name}" with (force)')


class _Drops:
    """Finished tests' databases, dropped on threads while the next tests run.

    Every DROP DATABASE waits for an immediate checkpoint, and on a server that several
    workers keep writing to (one the run does not configure: DATABASE_URL) that wait was
    a second (median), more than most tests' own run. Drops issued together share a
    checkpoint. At most `_BEHIND` databases wait for their drop, so the disk does not fill;
    a drop that failed is raised at the next test's end, or at the run's.
    """

    _BEHIND = 16

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(4, thread_name_prefix="drop-database")
        self._pending: deque[Future[None]] = deque()

    def drop(self, name: str) -> None:
        while self._pending and (self._pending[0].done() or len(self._pending) >= self._BEHIND):
            self._pending.popleft().result()
        self._pending.append(self._pool.submit(_drop_database, name))

    def close(self) -> None:
        while self._pending:
            self._pending.popleft().result()
        self._pool.shutdown()


@pytest.fixture(scope="session")
def _drops() -> Iterator[_Drops]:
    drops = _Drops()
    try:
        yield drops
    finally:
        drops.close()


@contextmanager
def _database_of_its_own(prefix: str, template: str, drops: _Drops) -> Iterator[str]:
    """A database cloned from `template` for one test, dropped after it."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_server_url(), autocommit=True) as conn:
        conn.execute(f'create database "{name}" template "{template}"')
    try:
        yield url_for(name)
    finally:
        drops.drop(name)


@pytest.fixture
def db_url(_drops: _Drops) -> Iterator[str]:
    """A freshly migrated database of its own for this test."""
    with _database_of_its_own("ceaseless_t", os.environ[_TEMPLATE_VAR], _drops) as url:
        yield url


@pytest.fixture
def fresh_db_url(_drops: _Drops) -> Iterator[Callable[[], str]]:
    """Call it for another freshly migrated database, as many as the test needs; each is
    dropped after the test."""
    with ExitStack() as databases:
        yield lambda: databases.enter_context(
            _database_of_its_own("ceaseless_t", os.environ[_TEMPLATE_VAR], _drops)
        )


@pytest.fixture
def empty_db_url(_drops: _Drops) -> Iterator[str]:
    """A database of its own with nothing in it, never migrated (template0)."""
    with _database_of_its_own("ceaseless_empty", "template0", _drops) as url:
        yield url


@pytest.fixture
def conn(db_url: str) -> Iterator[psycopg.Connection]:
    with psycopg.connect(db_url, autocommit=True) as connection:
        yield connection


@pytest.fixture(scope="session")
def github_description() -> Description:
    """GitHub's official API description, loaded and indexed once per process.

    Missing, it is fetched first (bin/fetch-github-openapi: the pinned npm
    tarball over HTTPS, standard library only); if that fails too, loading
    raises, naming the script: the forge tests fail loudly rather than skip.
    """
    if not description_path().is_file():
        subprocess.run(
            [sys.executable, str(Path(__file__).parents[1] / "bin" / "fetch-github-openapi")],
            check=False,
            stdout=subprocess.DEVNULL,
        )
    return Description.load()


@pytest.fixture
def fake_forge(github_description: Description) -> Iterator[FakeForge]:
    """A fake GitHub/Gitea on loopback; the test fails if any request broke the description."""
    forge = FakeForge(github_description).start()
    try:
        yield forge
    finally:
        forge.stop()
    check_no_violations(forge)


@pytest.fixture
def server_url() -> str:
    return _server_url()


@pytest.fixture
def embedded_home() -> Path | None:
    """The embedded server's home when the suite runs on one, else None."""
    home = os.environ.get(_HOME_VAR)
    return Path(home) if home else None


def database_name(url: str) -> str:
    return conninfo_to_dict(url)["dbname"]  # type: ignore[return-value]


# Login roles that connect for real, as alice and bob would: the trust-boundary tests of
# every area (SQL, listener, agents) act through them.
PASSWORD = "a-test-password"


@pytest.fixture
def login_role(
    conn: psycopg.Connection, db_url: str
) -> Iterator[Callable[..., psycopg.Connection]]:
    """Create login roles (members of the given group role); yield a connector; drop them after."""
    created: list[str] = []
    opened: list[psycopg.Connection] = []

    def connect(name: str, group: str = "ceaseless_user") -> psycopg.Connection:
        role = f"{name}_{uuid.uuid4().hex[:8]}"
        conn.execute(f"create role {role} login password '{PASSWORD}' in role {group}")
        conn.commit()
        created.append(role)
        user = psycopg.connect(make_conninfo(db_url, user=role, password=PASSWORD), autocommit=True)
        opened.append(user)
        return user

    yield connect
    for user in opened:
        user.close()
    conn.rollback()
    for role in created:
        conn.execute(f"drop owned by {role}")
        conn.execute(f"drop role {role}")
    conn.commit()
