"""A sandboxed agent has a network of its own: it reaches no service on the host's loopback
(the listener's dashboard, metrics and event streams, PostgreSQL) nor any host outside its
egress allowlist, and an allowlisted host works.

Agents run for real, in bubblewrap as the unprivileged agent user, through a real
listener where the listener matters. The "other host" is fake_upstream in a network
namespace of its own (tests/agents/upstream.py); its names come from the hosts file
the listener's operator may give (CEASELESS_EGRESS_HOSTS).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import socket
import tempfile
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from listener.agents import adapter_for, run_agent
from listener.agents.base import AgentConfig, RunResult
from listener.agents.egress import PROXY_URL
from listener.agents.network import HOSTS_VAR
from listener.agents.sandbox import Isolation
from listener.database.embedded import wheel_bin_dir
from listener.enums import Adapter, Outcome
from listener.queries.registry import load_agents
from tests.e2e.support import ListenerProcess, wait_until
from tests.factories import make_agent, make_job

from .isolation import FAKE_INTRUDER, isolate, workspace
from .support import agent, task
from .upstream import PORT, Upstream, hosts_file, upstream_host


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with upstream_host() as host:
        yield host


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _psql() -> str:
    return shutil.which("psql") or str(wheel_bin_dir() / "psql")


def _run(config: AgentConfig, cwd: Path, isolation: Isolation) -> RunResult:
    return asyncio.run(
        run_agent(
            adapter_for(config.adapter),
            config,
            task(cwd=str(cwd)),
            cancel=asyncio.Event(),
            isolation=isolation,
        )
    )


def _python(code: str, **fields: object) -> AgentConfig:
    return dataclasses.replace(agent(Adapter.COMMAND, ["python3", "-c", code]), **fields)  # type: ignore[arg-type]


@pytest.mark.slow
def test_an_agent_reaches_no_loopback_service_and_no_host_outside_its_allowlist(
    monkeypatch: pytest.MonkeyPatch,
    conn: psycopg.Connection,
    db_url: str,
    upstream: Upstream,
    tmp_path: Path,
) -> None:
    isolation = isolate(monkeypatch, "sandbox")
    hosts = hosts_file(
        tmp_path,
        {
            "allowed.test": upstream.private,
            "denied.test": upstream.private,
            "own.test": upstream.own,
        },
    )
    monkeypatch.setenv(HOSTS_VAR, str(hosts))
    http = _free_port()
    here = f"127.0.0.1:{http}"
    some_id = uuid.uuid4()
    listener_urls = [
        f"http://{here}/",  # the dashboard: every user's prompts
        f"http://{here}/approvals",  # where a gate is approved
        f"http://{here}/metrics",
        f"http://{here}/runs/{some_id}/events",
        f"http://{here}/loops/{some_id}/events",
        f"http://localhost:{http}/healthz",
        f"http://own.test:{http}/healthz",  # a name for one of this host's own addresses
    ]
    allowed = f"allowed.test:{PORT}"
    tunnels = [here, f"localhost:{http}", "127.0.0.1:5432", f"[::1]:{http}", f"own.test:{http}"]
    tunnels += [f"denied.test:{PORT}", f"{upstream.private}:{PORT}", allowed]
    refused_urls = [f"http://denied.test:{PORT}/", "https://denied.test/"]
    socket_dirs = ["/run/postgresql"]
    if str(conninfo_to_dict(db_url).get("host", "")).startswith("/"):
        socket_dirs.append(str(conninfo_to_dict(db_url)["host"]))
    # The report goes to the lane's HOME, which outlives the job (its working
    # directory goes once the job is delivered) and which the sandbox shows it.
    lane_user = isolation.identity_for("intruder")
    with workspace() as ws:
        report_file = Path(lane_user.home if lane_user else ws) / "intruder-network.json"
        report_file.unlink(missing_ok=True)
        make_agent(
            conn,
            "intruder",
            "command",
            [FAKE_INTRUDER],
            env={
                "FAKE_INTRUDER_PSQL": _psql(),
                "FAKE_INTRUDER_REPORT": str(report_file),
                "FAKE_INTRUDER_SOCKETS": os.pathsep.join(socket_dirs),
                "FAKE_INTRUDER_URLS": " ".join(
                    [*listener_urls, *refused_urls, f"http://{allowed}/"]
                ),
                "FAKE_INTRUDER_TCP": " ".join(
                    [here, f"[::1]:{http}", "127.0.0.1:5432", f"{upstream.private}:{PORT}"]
                ),
                "FAKE_INTRUDER_CONNECT": " ".join(tunnels),
                # An agent's configuration cannot point it at another proxy.
                "HTTPS_PROXY": "http://192.0.2.1:3128",
            },
        )
        # The default configuration, and the one host this lane's work needs.
        conn.execute(
            "update ceaseless.agents set egress = egress || %s::text where name = 'intruder'",
            (allowed,),
        )
        listener = ListenerProcess(
            db_url, "--poll-interval", "60", "--workdir", str(ws), "--http", here
        ).ready()
        try:
            listener.wait_for_event("http.listening")
            # The dashboard is up and answers the host: what the agent tries is there.
            with urllib.request.urlopen(f"http://{here}/healthz", timeout=10) as response:
                assert response.status == 200
            job = make_job(conn, agent="intruder")
            wait_until(
                lambda: (
                    conn.execute("select state from ceaseless.job where id = %s", (job,)).fetchone()
                    == ("delivered",)
                ),
                90,
                lambda: f"the intruder's job never finished: {listener.lines[-10:]}",
            )
        finally:
            listener.stop(timeout=20)
        report = json.loads(report_file.read_text())

    [announced] = listener.events("agents.isolation")
    assert (announced["sandbox"], announced["network"]) == ("bwrap", "own namespace")
    assert report["environment"]["HTTPS_PROXY"] == PROXY_URL
    fetched = {(e["url"], e["via"]): e for e in report["http"]}
    for url in [*listener_urls, *refused_urls]:
        direct, proxied = fetched[(url, "direct")], fetched[(url, "proxy")]
        assert direct["status"] is None and direct["error"], direct
        if url.startswith("https://"):
            assert "Tunnel connection failed: 403" in proxied["error"], proxied
        else:
            assert proxied["status"] == 403 and "ceaseless: egress to" in proxied["body"], proxied
    upstream_says = f"upstream {upstream.private}:{PORT} /\n"
    assert fetched[(f"http://{allowed}/", "direct")]["status"] is None
    assert fetched[(f"http://{allowed}/", "proxy")]["status"] == 200
    assert fetched[(f"http://{allowed}/", "proxy")]["body"] == upstream_says

    assert [t for t in report["tcp"] if t["connected"]] == []
    asked = {t["target"]: t for t in report["connect"]}
    assert asked[allowed]["status"] == "HTTP/1.1 200 Connection established"
    assert asked[allowed]["body"].endswith(upstream_says)
    for target, tunnel in asked.items():
        if target != allowed:
            assert tunnel["status"] == "HTTP/1.1 403 Forbidden", tunnel
    # Two requests reached the other host, both for the allowlisted name.
    assert len(upstream.requests()) == 2

    tried = {a["how"] for a in report["attempts"]}
    assert {"/run/postgresql without a password", "127.0.0.1 without a password"} <= tried
    not_run = [a for a in report["attempts"] if "psql did not run" in a.get("error", "")]
    assert not not_run, f"the intruder's client never ran: {not_run[:1]}"
    assert [a for a in report["attempts"] if a["connected"]] == []


def test_an_agent_without_egress_has_its_own_loopback_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    isolation = isolate(monkeypatch, "sandbox")
    host_side = socket.socket()
    host_side.bind(("127.0.0.1", 0))
    host_side.listen(4)
    port = host_side.getsockname()[1]
    code = (
        "import os, socket\n"
        "def attempt(address):\n"
        "    try:\n"
        "        socket.create_connection(address, timeout=5).close()\n"
        "        return 'connected'\n"
        "    except OSError as exc:\n"
        "        return type(exc).__name__\n"
        "own = socket.socket(); own.bind(('127.0.0.1', 0)); own.listen(1)\n"
        f"print(attempt(('127.0.0.1', {port})), attempt(('127.0.0.1', 3128)),\n"
        "      attempt(('127.0.0.1', own.getsockname()[1])), os.environ.get('HTTPS_PROXY'))\n"
    )
    try:
        with workspace() as ws:
            result = _run(_python(code, egress=("none",)), ws, isolation)
    finally:
        host_side.close()
    assert result.outcome == Outcome.SUCCEEDED, result.error
    # The host's loopback is not its loopback; no proxy listens; its own server answers it.
    assert result.final_message == "ConnectionRefusedError ConnectionRefusedError connected None"


def test_an_agent_run_as_root_gets_a_network_of_its_own_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if os.geteuid() != 0:
        pytest.skip("agents run as root only under a root listener")
    isolate(monkeypatch, "sandbox")
    monkeypatch.setenv("CEASELESS_AGENT_USER", "root")  # warned about, and still confined
    isolation = Isolation.current()
    assert isolation.identity is None and isolation.own_network
    host_side = socket.socket()
    host_side.bind(("127.0.0.1", 0))
    host_side.listen(4)
    port = host_side.getsockname()[1]
    code = (
        "import os, socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=5).close()\n"
        "    direct = 'connected'\n"
        "except OSError as exc:\n"
        "    direct = type(exc).__name__\n"
        "conn = socket.create_connection(('127.0.0.1', 3128), timeout=10)\n"
        f"conn.sendall(b'CONNECT 127.0.0.1:{port} HTTP/1.1\\r\\n\\r\\n')\n"
        "print(os.getuid(), direct, conn.recv(100).split(b'\\r\\n')[0].decode())\n"
    )
    try:
        with workspace() as ws:
            result = _run(_python(code, egress=(f"127.0.0.1:{port}",)), ws, isolation)
    finally:
        host_side.close()
    assert result.outcome == Outcome.SUCCEEDED, result.error
    # Only through the proxy, and only because the lane names that address and port.
    assert result.final_message == "0 ConnectionRefusedError HTTP/1.1 200 Connection established"


def test_a_refused_destination_is_named_in_the_runs_error(monkeypatch: pytest.MonkeyPatch) -> None:
    isolation = isolate(monkeypatch, "sandbox")
    code = (
        "import socket, sys\n"
        "conn = socket.create_connection(('127.0.0.1', 3128), timeout=10)\n"
        "conn.sendall(b'CONNECT exfiltrate.example:443 HTTP/1.1\\r\\n\\r\\n')\n"
        "print(conn.recv(100).split(b'\\r\\n')[0].decode())\n"
        "sys.exit(1)\n"
    )
    with workspace() as ws:
        result = _run(_python(code, egress=("api.example.com",)), ws, isolation)
    assert result.outcome == Outcome.FAILED
    assert result.final_message == "HTTP/1.1 403 Forbidden"
    assert (
        "ceaseless: egress to exfiltrate.example:443 refused: not in this agent's egress "
        "allowlist (agents.egress)"
    ) in (result.error or "")


def test_a_hosts_file_others_may_write_fails_the_run_before_the_agent_starts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    isolation = isolate(monkeypatch, "sandbox")
    hosts = hosts_file(tmp_path, {"api.example.com": "127.0.0.1"})
    hosts.chmod(0o666)
    monkeypatch.setenv(HOSTS_VAR, str(hosts))
    with workspace() as ws:
        marker = ws / "ran"
        result = _run(
            _python(f"open({str(marker)!r}, 'w')", egress=("api.example.com",)), ws, isolation
        )
        assert not marker.exists()
    assert result.outcome == Outcome.FAILED
    assert "writable by its owner only" in (result.error or "")


def test_without_a_sandbox_the_warning_says_agents_share_the_hosts_network(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    isolate(monkeypatch, "no_sandbox")
    warning = Isolation.current().warning() or ""
    assert "shares the host's network" in warning
    assert "agents.egress is not enforced" in warning


# The real agent CLIs, in the sandbox, with the egress a new lane gets by default.

_CREDENTIALS = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "OPENAI_API_KEY",
    "OPENCODE_CONFIG",
    "OPENCODE_CONFIG_CONTENT",
)


@pytest.fixture(scope="module")
def readable_clis() -> Iterator[Path]:
    """The installed CLIs where the agents' OS user can execute them: linked (or copied)
    out of a home only its owner may enter, as an operator installs them for that user."""
    default = Path.home() / ".cache" / "ceaseless" / "agent-clis" / "node_modules" / ".bin"
    source = Path(os.environ.get("CEASELESS_AGENT_CLIS", str(default)))
    directory = Path(tempfile.mkdtemp(prefix="ceaseless-clis-", dir="/var/lib"))
    directory.chmod(0o755)
    try:
        for name in ("claude", "opencode"):
            found = shutil.which(name, path=str(source))
            if found is None:
                continue
            real = os.path.realpath(found)
            try:
                os.link(real, directory / name)
            except OSError:
                shutil.copy2(real, directory / name)
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _default_lane(db_url: str, conn: psycopg.Connection, kind: str, argv: list[str]) -> AgentConfig:
    make_agent(conn, "lane", kind, argv)

    async def load() -> AgentConfig:
        async with await psycopg.AsyncConnection.connect(db_url) as aconn:
            return (await load_agents(aconn))["lane"]

    return asyncio.run(load())


def _no_login(monkeypatch: pytest.MonkeyPatch, home: Path) -> dict[str, str]:
    for name in _CREDENTIALS:
        monkeypatch.delenv(name, raising=False)
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
    }


@pytest.mark.slow
def test_the_real_claude_code_reports_not_logged_in_through_the_default_egress(
    monkeypatch: pytest.MonkeyPatch, conn: psycopg.Connection, db_url: str, readable_clis: Path
) -> None:
    if not (readable_clis / "claude").exists():
        pytest.skip("the real claude CLI is not installed (see CEASELESS_AGENT_CLIS)")
    isolation = isolate(monkeypatch, "sandbox")
    config = _default_lane(db_url, conn, "claude_code", [str(readable_clis / "claude")])
    with workspace() as ws:
        config = dataclasses.replace(
            config, env=_no_login(monkeypatch, ws / "home"), timeout_secs=120
        )
        result = asyncio.run(
            run_agent(
                adapter_for(config.adapter),
                config,
                task("say hi", cwd=str(ws)),
                cancel=asyncio.Event(),
                isolation=isolation,
            )
        )
    assert result.outcome == Outcome.AUTH_FAILED, result.error
    assert "Not logged in" in (result.error or "")


@pytest.mark.slow
def test_the_real_opencode_reports_a_missing_key_through_the_default_egress(
    monkeypatch: pytest.MonkeyPatch, conn: psycopg.Connection, db_url: str, readable_clis: Path
) -> None:
    if not (readable_clis / "opencode").exists():
        pytest.skip("the real opencode CLI is not installed (see CEASELESS_AGENT_CLIS)")
    isolation = isolate(monkeypatch, "sandbox")
    config = _default_lane(db_url, conn, "opencode", [str(readable_clis / "opencode")])
    with workspace() as ws:
        (ws / "opencode.json").write_text(
            json.dumps(
                {
                    "provider": {
                        "anthropic": {
                            "options": {"baseURL": "http://127.0.0.1:9/v1"},
                            "models": {"claude-test": {"name": "test"}},
                        }
                    }
                }
            )
        )
        config = dataclasses.replace(
            config,
            env=_no_login(monkeypatch, ws / "home"),
            model="anthropic/claude-test",
            timeout_secs=120,
        )
        result = asyncio.run(
            run_agent(
                adapter_for(config.adapter),
                config,
                task("say hi", cwd=str(ws)),
                cancel=asyncio.Event(),
                isolation=isolation,
            )
        )
    assert result.outcome == Outcome.AUTH_FAILED, result.error
    assert (result.error or "").startswith("ProviderAuthError: Anthropic API key is missing")
