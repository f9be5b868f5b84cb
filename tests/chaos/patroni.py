"""A Patroni cluster on loopback for failover tests: one etcd, two PostgreSQL 15 nodes.

`PatroniCluster` starts etcd (Debian's etcd-server) on free ports with a data
directory of its own, then two Patroni processes (Debian's patroni) that
bootstrap a primary and a streaming replica from Debian's PostgreSQL 15 server
binaries, and stops all of it on `stop()`. Patroni is tuned for quick
detection (ttl 10 s, loop_wait 1 s, retry_timeout 4 s) and fails over at once
when a primary's postmaster dies (primary_start_timeout 0) instead of
restarting it in place.

Guarantees:
- nothing outside the cluster's temporary directory is written, and no port
  is fixed: the machine's own PostgreSQL and etcd are never touched;
- as root, PostgreSQL (which refuses to run as root) and Patroni run as the
  `postgres` OS user, which owns the node directories;
- `url()` is the multi-host conninfo a listener uses, with
  target_session_attrs=read-write, so libpq finds whichever node is primary;
- `stop()` kills every process it started (the data is thrown away, so
  nothing is shut down cleanly) and removes the directory; a node's
  postmaster that outlived its Patroni is killed by the pid in its data
  directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

PG_BIN = Path("/usr/lib/postgresql/15/bin")
SCOPE = "ceaseless-failover"
# Patroni's timers, in seconds: the leader key lives `ttl` after its last
# renewal; each node runs its loop every `loop_wait`; a DCS or PostgreSQL call
# is retried for `retry_timeout`. Patroni wants ttl >= loop_wait + 2 * retry_timeout.
TTL = 10
LOOP_WAIT = 1
RETRY_TIMEOUT = 4
INSTALL_HINT = (
    "the failover tests need Debian's patroni and etcd-server packages and PostgreSQL 15's "
    "server binaries in /usr/lib/postgresql/15/bin (.ci/run installs them): "
    "apt-get install patroni etcd-server postgresql-15"
)


def missing_tools() -> list[str]:
    """What this harness needs and the machine lacks; empty when it can run."""
    needed = {
        "patroni": shutil.which("patroni"),
        "etcd": shutil.which("etcd"),
        str(PG_BIN / "postgres"): (PG_BIN / "postgres").exists() or None,
    }
    return [name for name, found in needed.items() if not found]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Node:
    name: str
    port: int
    api_port: int
    home: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def url(self, dbname: str = "postgres") -> str:
        return make_conninfo(host="127.0.0.1", port=self.port, user="postgres", dbname=dbname)

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None


class PatroniCluster:
    """etcd and two Patroni-managed PostgreSQL 15 nodes; `start()`, then `stop()`."""

    def __init__(self, *, synchronous: bool) -> None:
        self.synchronous = synchronous
        self.root = Path(tempfile.mkdtemp(prefix="ceaseless-patroni-"))
        self.root.chmod(0o755)
        self.etcd_port = free_port()
        self.etcd_peer_port = free_port()
        self.nodes = [
            Node(f"node{i}", free_port(), free_port(), self.root / f"node{i}") for i in range(2)
        ]
        self._etcd: subprocess.Popen[bytes] | None = None
        self._user = pwd.getpwnam("postgres") if os.geteuid() == 0 else None

    # -- lifecycle ---------------------------------------------------------

    def start(self, timeout: float = 90) -> PatroniCluster:
        self._start_etcd()
        for node in self.nodes:
            self._start_node(node)
            # The first node bootstraps alone, so it is the primary: the
            # second then clones it instead of racing it for the initial key.
            if node is self.nodes[0]:
                self.wait_for(lambda: self.primary() is not None, timeout, "no primary came up")
        self.wait_healthy(timeout)
        return self

    def stop(self) -> None:
        # Killed, not shut down: the data is thrown away, and a clean shutdown
        # of both nodes costs seconds. Patroni first, so it restarts nothing.
        for node in self.nodes:
            _end(node.process, grace=0)
        for node in self.nodes:
            if (pid := node.postmaster_pid()) is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        _end(self._etcd, grace=0)
        shutil.rmtree(self.root, ignore_errors=True)

    def _start_etcd(self) -> None:
        data = self.root / "etcd"
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        log = (self.root / "etcd.log").open("wb")
        self._etcd = subprocess.Popen(
            [
                "etcd",
                "--name=ceaseless-test",
                f"--data-dir={data}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=ceaseless-test={peer}",
                "--initial-cluster-state=new",
                "--enable-v2=false",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.wait_for(lambda: _get(f"{client}/health") is not None, 30, "etcd never answered")

    def _config(self, node: Node) -> dict[str, Any]:
        return {
            "scope": SCOPE,
            "name": node.name,
            "log": {"level": "INFO", "dir": str(node.home)},
            "restapi": {
                "listen": f"127.0.0.1:{node.api_port}",
                "connect_address": f"127.0.0.1:{node.api_port}",
            },
            "etcd3": {"host": f"127.0.0.1:{self.etcd_port}"},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL,
                    "loop_wait": LOOP_WAIT,
                    "retry_timeout": RETRY_TIMEOUT,
                    # A dead primary's postmaster is not restarted in place:
                    # the replica takes over at once.
                    "primary_start_timeout": 0,
                    # Asynchronous mode may fail over to a replica that is
                    # behind: that loss is what the tests measure.
                    "maximum_lag_on_failover": 1 << 40,
                    "synchronous_mode": self.synchronous,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": {
                            "wal_log_hints": "on",
                            "max_connections": 100,
                            "max_wal_senders": 5,
                            "max_replication_slots": 5,
                            "wal_keep_size": "256MB",
                            "fsync": "off",
                            "shared_buffers": "64MB",
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C.UTF-8"}],
                "pg_hba": [
                    "local all all trust",
                    "host all all 127.0.0.1/32 trust",
                    "host replication all 127.0.0.1/32 trust",
                ],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{node.port}",
                "connect_address": f"127.0.0.1:{node.port}",
                "data_dir": str(node.data_dir),
                "bin_dir": str(PG_BIN),
                "pgpass": str(node.home / "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres", "password": "postgres"},
                    "replication": {"username": "postgres", "password": "postgres"},
                    "rewind": {"username": "postgres", "password": "postgres"},
                },
                "parameters": {"unix_socket_directories": str(node.home)},
            },
        }

    def _start_node(self, node: Node) -> None:
        node.home.mkdir()
        config = node.home / "patroni.yml"
        # JSON is YAML: no YAML writer needed.
        config.write_text(json.dumps(self._config(node), indent=2))
        if self._user is not None:
            for path in (node.home, config):
                os.chown(path, self._user.pw_uid, self._user.pw_gid)
        node.home.chmod(0o700)
        log = (self.root / f"{node.name}.log").open("ab")
        node.process = subprocess.Popen(
            ["patroni", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=node.home,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(node.home)},
            user=self._user.pw_uid if self._user else None,
            group=self._user.pw_gid if self._user else None,
            extra_groups=[] if self._user else None,
            start_new_session=True,
        )

    # -- what the cluster says ----------------------------------------------

    def url(self, dbname: str = "postgres") -> str:
        """The multi-host conninfo that always reaches the primary."""
        return make_conninfo(
            host=",".join("127.0.0.1" for _ in self.nodes),
            port=",".join(str(node.port) for node in self.nodes),
            user="postgres",
            dbname=dbname,
            target_session_attrs="read-write",
        )

    def members(self) -> list[dict[str, Any]]:
        for node in self.nodes:
            if (cluster := _get(f"{node.api}/cluster")) is not None:
                return list(cluster.get("members", []))
        return []

    def primary(self) -> Node | None:
        """The node whose PostgreSQL accepts writes, by asking each server itself."""
        for node in self.nodes:
            with (
                contextlib.suppress(psycopg.Error),
                psycopg.connect(node.url(), connect_timeout=2, autocommit=True) as conn,
            ):
                row = conn.execute("select pg_is_in_recovery()").fetchone()
                if row is not None and row[0] is False:
                    return node
        return None

    def replica(self) -> Node:
        primary = self.primary()
        return next(node for node in self.nodes if node is not primary)

    def wait_healthy(self, timeout: float = 90) -> None:
        """Until one leader and a streaming replica (synchronous in synchronous mode)."""
        wanted = "sync_standby" if self.synchronous else "replica"

        def healthy() -> bool:
            members = self.members()
            roles = sorted(m.get("role", "") for m in members)
            streaming = [m for m in members if m.get("state") in ("streaming", "running")]
            return roles == sorted(["leader", wanted]) and len(streaming) == 2

        self.wait_for(healthy, timeout, lambda: f"the cluster is not healthy: {self.members()}")

    def set_synchronous(self, synchronous: bool, timeout: float = 60) -> None:
        """Switch synchronous_mode through the REST API (PATCH /config), then wait for it."""
        _send("PATCH", f"{self.nodes[0].api}/config", {"synchronous_mode": synchronous}, 10)
        self.synchronous = synchronous
        self.wait_healthy(timeout)

    def switchover(self, candidate: Node) -> None:
        """A planned switchover to `candidate` through the REST API (POST /switchover)."""
        primary = self.primary()
        assert primary is not None, "no primary to switch over from"
        body = {"leader": primary.name, "candidate": candidate.name}
        _send("POST", f"{primary.api}/switchover", body, 60)

    def wal_receiver_pid(self, node: Node) -> int:
        """The pid of `node`'s WAL receiver: stopping it makes the replica fall behind."""
        with psycopg.connect(node.url(), connect_timeout=3, autocommit=True) as conn:
            row = conn.execute("select pid from pg_stat_wal_receiver").fetchone()
        assert row is not None and row[0], f"{node.name} receives no WAL"
        return int(row[0])

    def kill_postmaster(self, node: Node) -> None:
        pid = node.postmaster_pid()
        assert pid is not None, f"{node.name} has no postmaster"
        os.kill(pid, signal.SIGKILL)

    def reinitialize(self, node: Node, timeout: float = 90) -> None:
        """Make `node` a fresh replica of the primary (POST /reinitialize)."""
        _send("POST", f"{node.api}/reinitialize", {"force": True}, 30)
        self.wait_healthy(timeout)

    def logs(self) -> str:
        parts = []
        for path in sorted(self.root.glob("*.log")):
            text = path.read_text(errors="replace")
            parts.append(f"== {path.name}\n{text[-3000:]}")
        return "\n".join(parts)

    @staticmethod
    def wait_for(predicate: Any, timeout: float, message: Any) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.2)
        raise AssertionError(message() if callable(message) else message)


def _get(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return json.loads(response.read() or b"null")
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _end(process: subprocess.Popen[bytes] | None, grace: float = 20) -> None:
    """End `process` and its process group: SIGTERM, then SIGKILL after `grace` seconds."""
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM if grace else signal.SIGKILL)
    try:
        process.wait(grace or 10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


def _send(method: str, url: str, body: dict[str, Any], timeout: float) -> None:
    """One call of Patroni's REST API with a JSON body; an HTTP error raises."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        response.read()
