"""Four hosts on one machine: network namespaces on a bridge, and a PostgreSQL on the bridge.

`Hosts` builds a Linux bridge in the root namespace and one network namespace
per host, each joined to the bridge by a veth pair; `BridgeServer` is a
PostgreSQL 18 (the embedded binaries) listening on the bridge's address only,
so the listeners in the namespaces reach it over the veths as they would reach
a database server across a LAN. `Hosts.cut(host)` takes the host's veth down in
the root namespace: its packets are dropped from then on, and neither side gets
a FIN or an RST, as when a switch port or a cable dies.

Guarantees:
- Names carry this process's pid (namespaces `cl<pid>h<n>`, bridge `cl<pid>br`),
  and the subnet (a /28 of 198.18.0.0/15, the range set aside for benchmarks)
  is chosen from it, so two test processes at once never share either.
- `close()` removes every namespace and link it made, also after a failure
  half-way through building them; deleting a namespace deletes its veth ends.
- Linux only, and root only: `require_root()` fails the test with what to do,
  it never skips (CI runs as root).
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from listener.database.embedded import SERVICE_USER, EmbeddedServer
from tests.chaos.closing import Closing

BENCHMARK_RANGE = ipaddress.ip_network("198.18.0.0/15")
# Delay each packet takes on a host's veth, both ways, when the kernel has netem.
DELAY_MS = 2


def require_root() -> None:
    """Fail (never skip) unless this process may make namespaces and links."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.fail(
            "the many-hosts tests build network namespaces and a bridge: run them as root "
            "on Linux with iproute2 (`ip`) installed (CI runs as root)"
        )


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")


@dataclass
class Hosts(Closing):
    """`count` namespaces on one bridge; use as a context manager."""

    count: int
    tag: str = field(default_factory=lambda: f"cl{os.getpid()}")
    made: list[tuple[str, str]] = field(default_factory=list)
    """("netns"|"link", name) of what was made, for close()."""
    netem: str | None = None
    """Why the veths carry no delay, when the kernel has no netem; None when they do."""

    def __post_init__(self) -> None:
        index = os.getpid() % (BENCHMARK_RANGE.num_addresses // 16)
        self.subnet = list(BENCHMARK_RANGE.subnets(new_prefix=28))[index]
        addresses = list(self.subnet.hosts())
        self.bridge_ip = str(addresses[0])
        self.host_ips = [str(address) for address in addresses[1 : self.count + 1]]

    def namespace(self, host: int) -> str:
        return f"{self.tag}h{host}"

    def _outer(self, host: int) -> str:
        """The veth end in the root namespace, on the bridge (≤ 15 characters)."""
        return f"{self.tag}v{host}"

    @property
    def bridge(self) -> str:
        return f"{self.tag}br"

    def _open(self) -> None:
        prefix = self.subnet.prefixlen
        _ip("link", "add", self.bridge, "type", "bridge")
        self.made.append(("link", self.bridge))
        _ip("addr", "add", f"{self.bridge_ip}/{prefix}", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for host in range(self.count):
            namespace, outer = self.namespace(host), self._outer(host)
            _ip("netns", "add", namespace)
            self.made.append(("netns", namespace))
            _ip("link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", namespace)
            self.made.append(("link", outer))
            _ip("link", "set", outer, "master", self.bridge, "up")
            inside = ("netns", "exec", namespace, "ip")
            _ip(*inside, "addr", "add", f"{self.host_ips[host]}/{prefix}", "dev", "eth0")
            _ip(*inside, "link", "set", "eth0", "up")
            _ip(*inside, "link", "set", "lo", "up")
            self._delay(outer)

    def _delay(self, outer: str) -> None:
        # On the root side only: the delay applies to what the bridge sends
        # the host, and the same again on the host's side would double it.
        if self.netem is not None:
            return
        result = subprocess.run(
            ["tc", "qdisc", "add", "dev", outer, "root", "netem", "delay", f"{DELAY_MS}ms"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if result.returncode != 0:
            self.netem = result.stderr.strip() or f"tc exited {result.returncode}"

    def wrapper(self, host: int) -> list[str]:
        """The command that runs a program inside the host's namespace (it execs the program)."""
        return ["ip", "netns", "exec", self.namespace(host)]

    def cut(self, host: int) -> None:
        """Take the host off the network without a word: its veth goes down."""
        _ip("link", "set", self._outer(host), "down")

    def mend(self, host: int) -> None:
        _ip("link", "set", self._outer(host), "up")

    def close(self) -> None:
        for kind, name in reversed(self.made):
            command = ("netns", "del", name) if kind == "netns" else ("link", "del", name)
            subprocess.run(["ip", *command], capture_output=True, timeout=30)
        self.made.clear()


class BridgeServer(Closing):
    """A PostgreSQL 18 of its own that listens on `address` (and its socket) only.

    The embedded server's own start makes the data directory, the superuser's
    password and the service user; it is then restarted listening on the
    bridge, with password authentication for the bridge's subnet.
    """

    def __init__(self, address: str, subnet: str) -> None:
        self.address = address
        self.subnet = subnet
        self.home = Path(tempfile.mkdtemp(prefix="ceaseless-hosts-"))
        self.home.chmod(0o755)  # as root, the server's own OS user must reach it
        self.embedded = EmbeddedServer(self.home)

    def _open(self) -> None:
        self.embedded.start()
        self.embedded.stop()
        hba = self.embedded.data_dir / "pg_hba.conf"
        with hba.open("a") as file:
            file.write(f"host all all {self.subnet} scram-sha-256\n")
        socket_dir = self.embedded.socket_dir()
        # As the embedded server's start does, with a TCP address besides the socket;
        # 8 listeners with their pools, and the test's own connections.
        options = (
            f"-c listen_addresses={self.address} -k {socket_dir} "
            "-c unix_socket_permissions=0700 -c max_connections=300 -c shared_buffers=128MB"
        )
        pg_ctl = self.embedded.bin_dir() / "pg_ctl"
        data, log = self.embedded.data_dir, self.embedded.log_file
        result = subprocess.run(
            [str(pg_ctl), "-D", str(data), "-l", str(log), "-w", "-o", options, "start"],
            user=SERVICE_USER,
            group=SERVICE_USER,
            extra_groups=[],
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode != 0:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"PostgreSQL did not start on the bridge: {result.stdout}{tail}")

    def url(self, database: str = "postgres") -> str:
        """The server over TCP on the bridge, as the hosts reach it."""
        return make_conninfo(
            host=self.address,
            port=5432,
            user="postgres",
            dbname=database,
            passfile=str(self.embedded.password_file),
        )

    def create_database(self, name: str, template: str | None = None) -> str:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            clause = f' template "{template}"' if template else ""
            conn.execute(f'create database "{name}"{clause}')
        return self.url(name)

    def close(self) -> None:
        try:
            self.embedded.stop()
        finally:
            shutil.rmtree(self.home, ignore_errors=True)
