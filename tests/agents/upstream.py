"""Hosts on a network for the egress tests: a real second machine, as far as this one can tell.

The machine the tests run on has no outside network, so "an allowlisted host
works, any other is refused" is shown against `fake_upstream` running in a
network namespace of its own, joined to this host by a veth pair (needs root and
`ip`, Debian package iproute2). The proxy's names for it come from a hosts file
(CEASELESS_EGRESS_HOSTS), as the listener's operator would write one.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from .support import FAKES

FAKE_UPSTREAM = str(FAKES / "fake_upstream")
PORT = 8080


@dataclass(frozen=True)
class Upstream:
    """fake_upstream on another host, listening on PORT at two addresses."""

    private: str  # 10.233.n.2: a private address of that host
    public: str  # 192.88.99.m: an address the ipaddress module counts as public
    own: str  # this host's end of the link: one of this host's own addresses
    log: Path

    def requests(self) -> list[str]:
        """`address:port request-line` of every request that reached it."""
        return self.log.read_text().splitlines() if self.log.exists() else []


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


@contextmanager
def upstream_host() -> Iterator[Upstream]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("a second host on a veth pair needs root and ip (iproute2)")
    tag = uuid.uuid4().hex[:6]
    namespace, outer, inner = f"ceaseless-up-{tag}", f"cel{tag}h", f"cel{tag}u"
    _ip("netns", "add", namespace)
    workdir = Path(tempfile.mkdtemp(prefix="ceaseless-upstream-"))
    server = None
    try:
        _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", namespace)
        # Another test process may hold a subnet already: try others.
        for _ in range(20):
            n = random.randrange(0, 64)
            own, private, public = f"10.233.{n}.1", f"10.233.{n}.2", f"192.88.99.{4 * n + 2}"
            try:
                _ip("addr", "add", f"{own}/30", "dev", outer)
            except subprocess.CalledProcessError:
                continue
            try:
                _ip("addr", "add", f"192.88.99.{4 * n + 1}/30", "dev", outer)
            except subprocess.CalledProcessError:
                _ip("addr", "del", f"{own}/30", "dev", outer)
                continue
            break
        else:
            pytest.fail("no free 10.233.n.0/30 for the upstream host")
        _ip("link", "set", outer, "up")
        for address in (f"{private}/30", f"{public}/30"):
            _ip("-n", namespace, "addr", "add", address, "dev", inner)
        _ip("-n", namespace, "link", "set", inner, "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        log = workdir / "requests.log"
        places = [f"{private}:{PORT}", f"{public}:{PORT}"]
        server = subprocess.Popen(
            ["ip", "netns", "exec", namespace, FAKE_UPSTREAM, str(log), *places],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        yield Upstream(private=private, public=public, own=own, log=log)
    finally:
        if server is not None:
            server.kill()
            server.wait(10)
        subprocess.run(["ip", "link", "del", outer], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)


def hosts_file(directory: Path, names: dict[str, str]) -> Path:
    """A hosts(5) file of `names` (name → address), as the listener's operator would write one."""
    path = directory / "egress-hosts"
    path.write_text("".join(f"{address} {name}\n" for name, address in names.items()))
    path.chmod(0o644)
    return path
