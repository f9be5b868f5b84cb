"""ceaseless on a managed PostgreSQL: a role with what such a service grants and nothing more.

The role logs in with a password and has CREATEROLE, and CREATE and CONNECT on
a database a superuser owns; it is no superuser, cannot create databases, is
in no predefined role (pg_read_server_files, pg_signal_backend, …) and may not
create in schema public. Through it alone, `ceaseless migrate` installs the
schema, it creates a user's login role, and `ceaseless listen` runs that
user's job in a real agent process and fires a cron routine (docs/security.md,
"Installing on a managed PostgreSQL").

Two clusters: a scram-only server of the test's own, where no ceaseless role
exists yet (a new managed service: the managed role creates the group roles),
and the suite's server, where they exist already (a second database of the
cluster: on PostgreSQL 16 and later migrate says what is missing until the
role that created them lends their ADMIN option).
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from listener.database.embedded import EmbeddedServer
from tests.e2e.support import ListenerProcess, run_cli, wait_until
from tests.factories import make_agent, make_routine

PASSWORD = "a-managed-password"
GROUP_ROLES = "ceaseless_listener, ceaseless_operator, ceaseless_user"


def _url(superuser_url: str, database: str, role: str) -> str:
    """`role`'s URL for `database`: its password, and no password file to fall back on."""
    params = conninfo_to_dict(make_conninfo(superuser_url, dbname=database))
    params.pop("passfile", None)
    params.update(user=role, password=PASSWORD)
    return make_conninfo(**params)


@contextmanager
def _managed_database(superuser_url: str) -> Iterator[tuple[str, str, str]]:
    """A database the superuser owns and a managed role for it: the role's URL, its name and
    the name of the login role it gives a user. Both roles are dropped after, with the
    database."""
    suffix = uuid.uuid4().hex[:10]
    role, user, database = f"managed_{suffix}", f"user_{suffix}", f"ceaseless_managed_{suffix}"
    with psycopg.connect(superuser_url, autocommit=True) as su:
        su.execute(
            f"create role {role} login password '{PASSWORD}' createrole nosuperuser nocreatedb"
        )
        su.execute(f"create database {database}")
        su.execute(f"grant create, connect on database {database} to {role}")
    try:
        yield _url(superuser_url, database, role), role, user
    finally:
        with psycopg.connect(superuser_url, autocommit=True) as su:
            su.execute(f"drop database if exists {database} with (force)")
            su.execute(f"drop role if exists {user}")
            su.execute(f"drop role if exists {role}")


def _install_and_run(url: str, user: str) -> str:
    """Migrate, create a user, run its job and a cron routine through a listener: all as the
    managed role (and the user), never as a superuser. How the listener's connection
    authenticated, as it reported it."""
    done = run_cli(url, "migrate")
    assert done.returncode == 0, done.stdout + done.stderr
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "select r.rolsuper, r.rolcreatedb, r.rolbypassrls, r.rolcreaterole,"
            " has_schema_privilege('public', 'create'),"
            " (select array_agg(p.rolname) from pg_roles p"
            "  where p.rolname like 'pg\\_%%' and pg_has_role(r.oid, p.oid, 'member'))"
            " from pg_roles r where r.rolname = current_user"
        ).fetchone()
        assert row == (False, False, False, True, False, None)

        conn.execute(f"create role {user} login password '{PASSWORD}' in role ceaseless_user")
        make_agent(conn, "echo", "command", ["cat"], max_concurrent=5)
        replier = ["sh", "-c", "cat > /dev/null; printf ROUTINE_OK"]
        make_agent(conn, "replier", "command", replier, max_concurrent=5)
        # Six fields: the sixth is seconds, so the listener fires it within a second.
        routine = make_routine(
            conn,
            trigger_type="cron",
            trigger_config={"schedule": "* * * * * *"},
            agent="replier",
            cooldown_secs=3600,
            user_id=user,
        )
        user_url = make_conninfo(url, user=user)
        with psycopg.connect(user_url, autocommit=True) as as_user:
            job = as_user.execute(
                "insert into ceaseless.job (kind, agent, prompt)"
                " values ('task', 'echo', 'from a managed server') returning id"
            ).fetchone()
        assert job is not None

        listener = ListenerProcess(url, "--poll-interval", "1", worker_id="managed-1")
        try:
            listener.ready()
            wait_until(
                lambda: (
                    conn.execute("select count(*) from ceaseless.listener_reports").fetchone()
                    == (1,)
                ),
                10,
                "the listener reported nothing about itself",
            )
            row = conn.execute("select db_auth from ceaseless.listener_reports").fetchone()
            assert row is not None
            wait_until(
                lambda: (
                    conn.execute(
                        "select state = 'delivered' from ceaseless.job where id = %s", job
                    ).fetchone()
                    == (True,)
                ),
                20,
                lambda: f"the user's job was not delivered: {listener.lines[-20:]}",
            )
            # Its first fire runs; the next ones, a second apart, are skipped by the cooldown.
            wait_until(
                lambda: (
                    conn.execute(
                        "select array_agg(status order by started_at) filter"
                        " (where status <> 'skipped') from ceaseless.routine_runs"
                        " where routine_id = %s",
                        (routine,),
                    ).fetchone()
                    == (["ok"],)
                ),
                20,
                lambda: f"the cron routine did not run: {listener.lines[-20:]}",
            )
        finally:
            status = listener.stop()
        assert status == 0, listener.lines[-20:]
        run = conn.execute(
            "select outcome, exit_status from ceaseless.agent_run where job_id = %s", job
        ).fetchall()
        assert run == [("succeeded", 0)]
        # Its maintenance (retention's prune among it) is the owner's to run, as a listener's.
        crashed = listener.events("listener.part_crashed")
        errors = [line for line in listener.lines if line.get("level") in ("error", "critical")]
        assert not crashed and not errors, crashed + errors
        return str(row[0])


@pytest.fixture
def new_cluster() -> Iterator[str]:
    """A scram-only server of this test's own, with no ceaseless role in it; its superuser URL."""
    home = Path(tempfile.mkdtemp(prefix="ceaseless-managed-"))
    home.chmod(0o755)  # as root, the server's own OS user must reach it
    try:
        yield EmbeddedServer(home).start()
    finally:
        EmbeddedServer(home).stop()
        shutil.rmtree(home, ignore_errors=True)


# Slow: its server is its own, whatever server the suite runs on, so the run on the
# second server (which leaves out the slow tests) would only repeat it.
@pytest.mark.slow
def test_a_managed_role_installs_and_runs_ceaseless_on_a_new_cluster(new_cluster: str) -> None:
    with _managed_database(new_cluster) as (url, _, user):
        # Password authentication, never trust: without the password, no connection.
        params = conninfo_to_dict(url)
        params.pop("password")
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(make_conninfo(**params), connect_timeout=5).close()
        assert _install_and_run(url, user) == "password"


def test_a_managed_role_installs_a_second_database_of_a_cluster(server_url: str) -> None:
    with _managed_database(server_url) as (url, role, user):
        with psycopg.connect(server_url, autocommit=True) as su:
            version = su.execute("select current_setting('server_version_num')::int").fetchone()
            # PostgreSQL 16 lets a CREATEROLE role comment on, and grant, only roles it holds
            # ADMIN on: it does on the group roles when it created them, and must be lent it
            # (and no more) when another installation of the cluster did.
            if version is not None and version[0] >= 160000:
                done = run_cli(url, "migrate")
                assert done.returncode == 1
                assert 'ADMIN option on role "ceaseless_listener"' in done.stderr
                assert "Installing on a managed PostgreSQL" in done.stderr
                su.execute(
                    f"grant {GROUP_ROLES} to {role} with admin option, inherit false, set false"
                )
        _install_and_run(url, user)
