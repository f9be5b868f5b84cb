"""An agent cannot reach the embedded database, nor see the listener's secrets.

The agent here is an intruder (tests/fakes/fake_intruder) run for real by a
listener process through its spawn path: the listener's own database is an
embedded server of this test's own (password authentication, its password file
in CEASELESS_HOME), and the listener's environment holds everything an attacker
would want: DATABASE_URL, PG* variables with the password, a secret of its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from listener.agents import adapter_for, run_agent
from listener.agents.environment import agent_environment
from listener.agents.sandbox import Isolation
from listener.database.embedded import EmbeddedServer, wheel_bin_dir
from listener.database.migrate import migrate
from listener.enums import Adapter, Outcome
from tests.e2e.support import ROOT, ListenerProcess, wait_until
from tests.factories import make_agent, make_job

from .isolation import FAKE_INTRUDER, MODES, isolate, workspace
from .support import FAKE_AGENT, FAKE_CLAUDE, FAKE_OPENCODE, agent, task

SECRET_NAME = "LISTENER_SECRET_TOKEN"
SECRET = "s3cret-the-agent-must-never-see"
# Outside /tmp (which the sandbox replaces), where only root could write without it.
PROBE = Path("/var/ceaseless-sandbox-probe")


@pytest.fixture(scope="module")
def embedded() -> Iterator[EmbeddedServer]:
    """An embedded server of this module's own, its home outside /tmp (which the sandbox
    replaces anyway) so that hiding CEASELESS_HOME itself is what is tested."""
    parent = "/var/lib" if os.geteuid() == 0 else None
    home = Path(tempfile.mkdtemp(prefix="ceaseless-iso-", dir=parent))
    home.chmod(0o755)
    server = EmbeddedServer(home)
    try:
        migrate(server.start())
        yield server
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)


def _system_identifier(url: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute("select system_identifier from pg_control_system()").fetchone()
        assert row is not None
        return str(row[0])


def _psql() -> str:
    """A psql the agent's OS user can run inside the sandbox: the system's, or the wheel's."""
    return shutil.which("psql") or str(wheel_bin_dir() / "psql")


def _password(server: EmbeddedServer) -> str:
    return server.password_file.read_text().strip().rsplit(":", 1)[-1]


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_an_agent_cannot_reach_the_embedded_database_nor_see_the_listeners_secrets(
    monkeypatch: pytest.MonkeyPatch, embedded: EmbeddedServer, mode: str
) -> None:
    if mode == "no_sandbox" and os.geteuid() != 0:
        pytest.skip("without a sandbox, only another OS user keeps an agent out (needs root)")
    isolation = isolate(monkeypatch, mode)
    url = embedded.url()
    socket_dir = conninfo_to_dict(url)["host"]
    password = _password(embedded)
    # Everything a listener's environment might hold, the password itself included.
    monkeypatch.setenv("CEASELESS_HOME", str(embedded.home))
    monkeypatch.setenv("PGHOST", str(socket_dir))
    monkeypatch.setenv("PGUSER", "postgres")
    monkeypatch.setenv("PGPASSWORD", password)
    monkeypatch.setenv("PGPASSFILE", str(embedded.password_file))
    monkeypatch.setenv(SECRET_NAME, SECRET)
    monkeypatch.setenv("AGENT_PROXY_SETTING", "passed-through")
    # A ~/.pgpass holding the password in the HOME the sandbox shares with the agent
    # (its lane's, never root's own). Without a sandbox the agent's HOME is its lane's own.
    pgpass = None
    lane_user = isolation.identity_for(f"intruder-{mode}")
    if isolation.sandboxed and lane_user is not None:
        pgpass = Path(lane_user.home) / ".pgpass"
    if pgpass is not None and lane_user is not None and not pgpass.exists():
        pgpass.write_text(f"*:*:*:postgres:{password}\n")
        pgpass.chmod(0o600)
        os.chown(pgpass, lane_user.uid, lane_user.gid)
    else:
        pgpass = None
    # The report goes to the lane's HOME, which outlives the job (its working
    # directory goes once the job is delivered) and which the sandbox shows it.
    report_file = Path(lane_user.home if lane_user else tempfile.mkdtemp()) / "intruder.json"
    try:
        with workspace() as ws, psycopg.connect(url, autocommit=True) as conn:
            make_agent(
                conn,
                f"intruder-{mode}",
                "command",
                [FAKE_INTRUDER],
                env={
                    "FAKE_INTRUDER_PSQL": _psql(),
                    "FAKE_INTRUDER_REPORT": str(report_file),
                    "FAKE_INTRUDER_SOCKETS": os.pathsep.join([str(socket_dir), str(embedded.home)]),
                    "FAKE_INTRUDER_PASSFILES": str(embedded.password_file),
                },
                env_passthrough=["AGENT_PROXY_SETTING"],
            )
            listener = ListenerProcess(url, "--poll-interval", "60", "--workdir", str(ws)).ready()
            try:
                job = make_job(conn, agent=f"intruder-{mode}")
                wait_until(
                    lambda: (
                        conn.execute(
                            "select state from ceaseless.job where id = %s", (job,)
                        ).fetchone()
                        == ("delivered",)
                    ),
                    60,
                    lambda: f"the intruder's job never finished: {listener.lines[-10:]}",
                )
            finally:
                listener.stop(timeout=20)
    finally:
        if pgpass is not None:
            pgpass.unlink()
        report = json.loads(report_file.read_text()) if report_file.exists() else None
        report_file.unlink(missing_ok=True)
    assert report is not None, "the intruder wrote no report"

    environment = report["environment"]
    assert SECRET_NAME not in environment
    assert not [name for name in environment if name == "DATABASE_URL" or name.startswith("PG")]
    assert environment["AGENT_PROXY_SETTING"] == "passed-through"
    everything = json.dumps(report)
    assert SECRET not in everything, "the listener's secret reached the agent"
    assert password not in everything, "the database password reached the agent"
    tried = [a["how"] for a in report["attempts"]]
    not_run = [a for a in report["attempts"] if "psql did not run" in a.get("error", "")]
    assert not not_run, f"the intruder's client never ran, so it proves nothing: {not_run[:1]}"
    assert any(str(socket_dir) in how for how in tried) and any("127.0.0.1" in h for h in tried)
    ours = _system_identifier(url)
    inside = [a for a in report["attempts"] if a.get("system_identifier") == ours]
    assert not inside, f"the agent connected to the embedded database: {inside}"


def test_the_environment_is_an_allowlist(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_NAME, SECRET)
    monkeypatch.setenv("DATABASE_URL", "postgresql://postgres:pw@db/x")
    monkeypatch.setenv("PGPASSWORD", "pw")
    monkeypatch.setenv("LC_TIME", "C")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    config = agent(
        Adapter.COMMAND,
        ["x"],
        env={"API_KEY": "configured"},
    )
    config = dataclasses.replace(config, env_passthrough=("HTTPS_PROXY", "PGPASSWORD"))
    env = agent_environment(config, task(max_tokens=100))
    assert SECRET_NAME not in env and "DATABASE_URL" not in env
    assert "PGPASSWORD" not in env, "a passthrough list cannot hand out the database's variables"
    assert env["HTTPS_PROXY"] == "http://proxy:3128"
    assert env["LC_TIME"] == "C"
    assert env["API_KEY"] == "configured"
    assert env["CEASELESS_JOB_ID"] == "job-1" and env["CEASELESS_MAX_TOKENS"] == "100"
    assert set(env) <= {
        "PATH", "HOME", "LANG", "TERM", "TMPDIR", "USER", "LC_TIME", "HTTPS_PROXY", "API_KEY",
        "CEASELESS_JOB_ID", "CEASELESS_RUN_ID", "CEASELESS_MAX_TOKENS",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS", "LOGNAME",
    }  # fmt: skip


def test_a_spawned_agent_sees_none_of_the_listeners_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(SECRET_NAME, SECRET)
    monkeypatch.setenv("DATABASE_URL", "postgresql://postgres:pw@db/x")
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    config = agent(Adapter.COMMAND, [sys.executable, "-c", code])
    result = asyncio.run(
        run_agent(adapter_for(Adapter.COMMAND), config, task(), cancel=asyncio.Event())
    )
    assert result.outcome == Outcome.SUCCEEDED, result.error
    seen = json.loads(result.final_message or "{}")
    assert SECRET_NAME not in seen and "DATABASE_URL" not in seen
    assert SECRET not in (result.final_message or "")


@pytest.mark.parametrize("how", ["turned off", "bwrap not on PATH"])
def test_without_a_sandbox_the_listener_warns_at_startup_and_in_status(
    monkeypatch: pytest.MonkeyPatch, db_url: str, tmp_path: Path, how: str
) -> None:
    if how == "turned off":
        monkeypatch.setenv("CEASELESS_SANDBOX", "off")
        expected = "turned off"
    else:
        monkeypatch.delenv("CEASELESS_SANDBOX", raising=False)
        # A PATH with python but no bwrap: a host where bubblewrap is not installed.
        (tmp_path / "bin").mkdir()
        (tmp_path / "bin" / "python3").symlink_to(sys.executable)
        monkeypatch.setenv("PATH", str(tmp_path / "bin"))
        expected = "not installed"
    listener = ListenerProcess(db_url, "--poll-interval", "60").ready()
    warnings = listener.events("agents.not_isolated")
    assert warnings and warnings[0]["level"] == "warning"
    assert expected in warnings[0]["problem"] and "bubblewrap" in warnings[0]["problem"]

    # Status shows what the running listener reported (listener_status).
    try:
        status = subprocess.run(
            [sys.executable, "-m", "listener", "status"],
            env={**os.environ, "DATABASE_URL": db_url, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        listener.stop(timeout=10)
    assert status.returncode == 0, status.stderr
    assert f"warning: listener {listener.worker_id}: agents are not fully isolated" in status.stdout
    assert expected in status.stdout


def test_with_a_sandbox_status_has_no_isolation_warning(
    monkeypatch: pytest.MonkeyPatch, db_url: str
) -> None:
    isolate(monkeypatch, "sandbox")
    status = subprocess.run(
        [sys.executable, "-m", "listener", "status"],
        env={**os.environ, "DATABASE_URL": db_url, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    assert "not fully isolated" not in status.stdout


@pytest.mark.parametrize(
    ("kind", "executable", "env"),
    [
        (Adapter.CLAUDE_CODE, FAKE_CLAUDE, {"FAKE_CLAUDE_MODE": "success"}),
        (Adapter.OPENCODE, FAKE_OPENCODE, {"FAKE_OPENCODE_MODE": "success"}),
        (Adapter.COMMAND, FAKE_AGENT, {"FAKE_AGENT_MODE": "json"}),
    ],
)
def test_the_adapters_work_inside_the_sandbox(
    monkeypatch: pytest.MonkeyPatch, kind: Adapter, executable: str, env: dict[str, str]
) -> None:
    isolation = isolate(monkeypatch, "sandbox")
    code = "import os; open('written-by-the-agent', 'w').write(str(os.getuid()))"
    writer = agent(Adapter.COMMAND, ["python3", "-c", code])
    with workspace() as ws:
        result = asyncio.run(
            run_agent(
                adapter_for(kind),
                agent(kind, [executable], env=env),
                task("the prompt", cwd=str(ws)),
                cancel=asyncio.Event(),
                isolation=isolation,
            )
        )
        assert result.outcome == Outcome.SUCCEEDED, result.error
        assert "the prompt" in (result.final_message or "")
        # The workspace is writable, by the agent's own OS user.
        wrote = asyncio.run(
            run_agent(
                adapter_for(Adapter.COMMAND),
                writer,
                task(cwd=str(ws)),
                cancel=asyncio.Event(),
                isolation=isolation,
            )
        )
        assert wrote.outcome == Outcome.SUCCEEDED, wrote.error
        lane_user = isolation.identity_for(writer.name)
        uid = lane_user.uid if lane_user else os.geteuid()
        assert (ws / "written-by-the-agent").read_text() == str(uid)
        assert (ws / "written-by-the-agent").stat().st_uid == uid


def test_the_sandbox_hides_ceaseless_home_and_keeps_the_rest_read_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    home = Path(tempfile.mkdtemp(prefix="ceaseless-hidden-", dir=os.getcwd()))
    try:
        (home / "pgpass").write_text("*:*:*:postgres:secret\n")
        home.chmod(0o755)
        (home / "pgpass").chmod(0o644)  # readable, to show that hiding, not modes, keeps it out
        monkeypatch.setenv("CEASELESS_HOME", str(home))
        isolation = isolate(monkeypatch, "sandbox")
        code = (
            "import os, sys\n"
            f"print(sorted(os.listdir({str(home)!r})) if os.path.exists({str(home)!r}) else [])\n"
            "try:\n"
            f"    open({str(PROBE)!r}, 'w')\n"
            "    print('wrote outside the workspace')\n"
            "except OSError as exc:\n"
            "    print('read-only', exc.errno)\n"
        )
        with workspace() as ws:
            result = asyncio.run(
                run_agent(
                    adapter_for(Adapter.COMMAND),
                    agent(Adapter.COMMAND, ["python3", "-c", code]),
                    task(cwd=str(ws)),
                    cancel=asyncio.Event(),
                    isolation=isolation,
                )
            )
        assert result.outcome == Outcome.SUCCEEDED, result.error
        assert result.final_message is not None
        listing, write = result.final_message.splitlines()
        assert listing == "[]"
        assert write == f"read-only {errno.EROFS}"  # the mount, not only file modes
        assert not PROBE.exists()
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_postgresqls_socket_directories_are_empty_inside_the_sandbox(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A trust-auth server answers whoever reaches its socket: the network
    # namespace does not close a unix socket, hiding its directory does.
    named = Path(tempfile.mkdtemp(prefix="ceaseless-pgsock-", dir="/var/lib"))
    try:
        (named / ".s.PGSQL.5432").write_text("")
        named.chmod(0o755)
        monkeypatch.setenv("DATABASE_URL", f"postgresql://postgres@/x?host={named}")
        monkeypatch.setenv("PGHOST", f"{named},/nowhere")
        isolation = isolate(monkeypatch, "sandbox")
        code = (
            "import os\n"
            f"print([sorted(os.listdir(d)) for d in ('/run/postgresql', {str(named)!r})])\n"
        )
        with workspace() as ws:
            result = asyncio.run(
                run_agent(
                    adapter_for(Adapter.COMMAND),
                    agent(Adapter.COMMAND, ["python3", "-c", code]),
                    task(cwd=str(ws)),
                    cancel=asyncio.Event(),
                    isolation=isolation,
                )
            )
    finally:
        shutil.rmtree(named, ignore_errors=True)
    assert result.outcome == Outcome.SUCCEEDED, result.error
    assert result.final_message == "[[], []]"


def test_a_workspace_the_agents_users_cannot_reach_is_named_at_startup(
    monkeypatch: pytest.MonkeyPatch, db_url: str, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("agents run as another OS user only when the listener is root")
    isolate(monkeypatch, "no_sandbox")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    listener = ListenerProcess(db_url, "--poll-interval", "60", "--workdir", str(private)).ready()
    listener.stop(timeout=10)
    [warning] = listener.events("agents.workspace_unreachable")
    assert str(private) in warning["problem"] and "OS user of its own" in warning["problem"]
    with workspace() as ws:
        listener = ListenerProcess(db_url, "--poll-interval", "60", "--workdir", str(ws)).ready()
        listener.stop(timeout=10)
    assert not listener.events("agents.workspace_unreachable")


@pytest.mark.parametrize("sandbox", ["auto", "off"])
def test_as_root_an_unusable_agent_user_fails_the_run_instead_of_running_as_root(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, sandbox: str
) -> None:
    if os.geteuid() != 0:
        pytest.skip("agents switch OS users only when the listener is root")
    monkeypatch.setenv("CEASELESS_AGENT_USER", "no-such-user-ceaseless")
    monkeypatch.setenv("CEASELESS_SANDBOX", sandbox)
    marker = tmp_path / "ran"
    config = agent(Adapter.COMMAND, ["touch", str(marker)])
    result = asyncio.run(
        run_agent(adapter_for(Adapter.COMMAND), config, task(), cancel=asyncio.Event())
    )
    assert result.outcome == Outcome.FAILED
    assert "no-such-user-ceaseless" in (result.error or "")
    assert "must not run as root" in (result.error or "")
    assert not marker.exists()


def test_a_bwrap_that_cannot_sandbox_counts_as_none_and_agents_still_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A host whose kernel refuses user namespaces: bwrap is there but fails.
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    bwrap = fake_bin / "bwrap"
    bwrap.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n"
    )
    bwrap.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CEASELESS_SANDBOX", raising=False)
    isolation = Isolation.current()
    assert not isolation.sandboxed and isolation.refusal is None
    assert "No permissions to creating new namespace" in (isolation.warning() or "")
    with workspace() as ws:
        result = asyncio.run(
            run_agent(
                adapter_for(Adapter.COMMAND),
                agent(Adapter.COMMAND, ["true"]),
                task(cwd=str(ws)),
                cancel=asyncio.Event(),
                isolation=isolation,
            )
        )
    assert result.outcome == Outcome.SUCCEEDED, result.error
