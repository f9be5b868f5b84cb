"""The egress proxy judges every request by its run's policy, and a name never leads home.

The proxy (listener/agents/egress.py) runs here in the test process, on a real
socket, against real servers: fake_upstream on a second host (tests/agents/
upstream.py) and servers on this host's loopback and own addresses, each of which
records whether anything reached it. Only DNS is played, by the hosts mapping
the listener's operator would give (CEASELESS_EGRESS_HOSTS), and in one test by
a resolver whose answer changes between lookups, as a rebinding DNS server's does.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

from listener.agents.egress import (
    HEAD_LIMIT,
    Address,
    Policy,
    Proxy,
    Resolver,
    load_hosts,
    parse_entry,
)

from .upstream import PORT, Upstream, hosts_file, upstream_host


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with upstream_host() as host:
        yield host


@dataclass
class Server:
    """A TCP server that answers `here` and counts the connections that reached it."""

    address: str
    port: int = 0
    hits: list[str] = field(default_factory=list)


@contextmanager
def server_on(address: str) -> Iterator[Server]:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    listening = socket.socket(family, socket.SOCK_STREAM)
    listening.bind((address, 0))
    listening.listen(16)
    found = Server(address, listening.getsockname()[1])

    def accept() -> None:
        while True:
            try:
                client, peer = listening.accept()
            except OSError:
                return
            found.hits.append(str(peer))
            with client:
                client.sendall(b"HTTP/1.0 200 OK\r\n\r\nhere")

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield found
    finally:
        listening.close()


@dataclass
class Running:
    port: int
    reports: list[str]


@contextmanager
def proxy(entries: list[str], names: dict[str, str], resolver: Resolver | None = None):
    hosts = {name: [ipaddress.ip_address(a)] for name, a in names.items()}
    reports: list[str] = []
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen(16)
    Proxy(Policy.parse(entries), resolver or Resolver(hosts), reports.append).serve(listening)
    try:
        yield Running(listening.getsockname()[1], reports)
    finally:
        listening.close()


def ask(running: Running, request: str, then: bytes | None = None) -> tuple[str, str]:
    """Send one request head to the proxy; its status line and body (or the tunnel's answer)."""
    with socket.create_connection(("127.0.0.1", running.port), timeout=20) as conn:
        conn.sendall(request.encode() + b"\r\n\r\n")
        answer = _read_all(conn) if then is None else _read_head(conn)
        if then is not None and answer.startswith(b"HTTP/1.1 200"):
            # The tunnel is open: what follows the proxy's head is the far side's.
            conn.sendall(then)
            answer = answer.partition(b"\r\n\r\n")[2] + _read_all(conn)
    head, _, body = answer.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0].decode(), body.decode()


def _read_head(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
        data += chunk
    return data


def _read_all(conn: socket.socket) -> bytes:
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    return data


GET = b"GET /through-the-tunnel HTTP/1.0\r\nHost: x\r\n\r\n"


def test_an_allowlisted_name_is_reached_by_connect_and_by_plain_http(upstream: Upstream) -> None:
    with proxy([f"allowed.test:{PORT}"], {"allowed.test": upstream.private}) as running:
        status, body = ask(running, f"CONNECT allowed.test:{PORT} HTTP/1.1", then=GET)
        assert status == "HTTP/1.1 200 OK", body
        assert body == f"upstream {upstream.private}:{PORT} /through-the-tunnel\n"
        status, body = ask(running, f"GET http://allowed.test:{PORT}/plain?x=1 HTTP/1.1\r\nHost: a")
        assert (status, body) == (
            "HTTP/1.1 200 OK",
            f"upstream {upstream.private}:{PORT} /plain?x=1\n",
        )
    assert running.reports == []
    assert [r.split(" ", 1)[1] for r in upstream.requests()[-2:]] == [
        "GET /through-the-tunnel HTTP/1.0",
        "GET /plain?x=1 HTTP/1.1",  # origin-form: the proxy's absolute URL is not passed on
    ]


def test_a_host_or_port_not_on_the_list_is_refused_before_any_lookup(upstream: Upstream) -> None:
    before = len(upstream.requests())
    names = {"allowed.test": upstream.private, "other.test": upstream.private}
    with proxy(["allowed.test:443"], names) as running:
        for request in (
            f"CONNECT allowed.test:{PORT} HTTP/1.1",  # the right host, another port
            f"CONNECT other.test:{PORT} HTTP/1.1",
            f"CONNECT {upstream.private}:{PORT} HTTP/1.1",  # its address is not its name
            f"GET http://other.test:{PORT}/ HTTP/1.1",
            # Not resolvable at all: refused by the list first, so never a lookup (502).
            "CONNECT nowhere.invalid:443 HTTP/1.1",
        ):
            status, body = ask(running, request)
            assert status == "HTTP/1.1 403 Forbidden", (request, status)
            assert "not in this agent's egress allowlist (agents.egress)" in body
    assert len(upstream.requests()) == before
    assert any(f"other.test:{PORT} refused" in line for line in running.reports)


def test_an_allowlisted_name_never_leads_to_loopback_link_local_or_this_hosts_own_address(
    upstream: Upstream,
) -> None:
    with server_on("127.0.0.1") as loopback, server_on("0.0.0.0") as everywhere:
        names = {
            "rebound.test": "127.0.0.1",
            "mapped.test": "::ffff:127.0.0.1",
            "own.test": upstream.own,  # this host's end of the link: its own address
            "metadata.test": "169.254.169.254",  # a cloud's instance metadata service
            "zero.test": "0.0.0.0",
        }
        entries = [f"rebound.test:{loopback.port}", f"mapped.test:{loopback.port}"]
        entries += [f"own.test:{everywhere.port}", "metadata.test:80", f"zero.test:{loopback.port}"]
        with proxy(entries, names) as running:
            for entry in entries:
                status, body = ask(running, f"CONNECT {entry} HTTP/1.1")
                assert status == "HTTP/1.1 403 Forbidden", (entry, body)
                assert "loopback, link-local or this host's own address" in body
        assert loopback.hits == [] and everywhere.hits == []


def test_an_ip_literal_entry_reaches_that_address_and_port_and_nothing_else() -> None:
    with server_on("127.0.0.1") as named, server_on("127.0.0.1") as unnamed:
        with proxy([f"127.0.0.1:{named.port}"], {"loop.test": "127.0.0.1"}) as running:
            assert ask(running, f"CONNECT 127.0.0.1:{named.port} HTTP/1.1", then=GET) == (
                "HTTP/1.0 200 OK",
                "here",
            )
            for target in (f"127.0.0.1:{unnamed.port}", f"localhost:{named.port}"):
                assert ask(running, f"CONNECT {target} HTTP/1.1")[0] == "HTTP/1.1 403 Forbidden"
        assert len(named.hits) == 1 and unnamed.hits == []


def test_open_reaches_public_addresses_only(upstream: Upstream) -> None:
    with server_on("127.0.0.1") as loopback:
        names = {"public.test": upstream.public, "private.test": upstream.private}
        names["home.test"] = "127.0.0.1"
        with proxy(["open"], names) as running:
            if ipaddress.ip_address(upstream.public).is_global:
                status, body = ask(running, f"CONNECT public.test:{PORT} HTTP/1.1", then=GET)
                assert (status, body.split(" ")[1]) == (
                    "HTTP/1.1 200 OK",
                    f"{upstream.public}:{PORT}",
                )
            for target, why in (
                (f"private.test:{PORT}", "private address"),
                (f"{upstream.private}:{PORT}", "private address"),
                (f"home.test:{loopback.port}", "this host's own address"),
                (f"127.0.0.1:{loopback.port}", "this host's own address"),
                (f"[::1]:{loopback.port}", "this host's own address"),
                (f"{upstream.own}:{PORT}", "this host's own address"),
            ):
                status, body = ask(running, f"CONNECT {target} HTTP/1.1")
                assert status == "HTTP/1.1 403 Forbidden" and why in body, (target, body)
        assert loopback.hits == []


class Rebinding(Resolver):
    """A name whose first answer is a harmless address and every later one is loopback."""

    def __init__(self, first: str) -> None:
        super().__init__()
        self.first = first
        self.lookups = 0

    def resolve(self, name: str, port: int) -> list[Address]:
        self.lookups += 1
        return [ipaddress.ip_address(self.first if self.lookups == 1 else "127.0.0.1")]


def test_a_name_is_resolved_once_and_connected_at_that_address(upstream: Upstream) -> None:
    resolver = Rebinding(upstream.private)
    with proxy([f"rebind.test:{PORT}"], {}, resolver) as running:
        status, body = ask(running, f"CONNECT rebind.test:{PORT} HTTP/1.1", then=GET)
    assert status == "HTTP/1.1 200 OK" and body.startswith(f"upstream {upstream.private}:")
    assert resolver.lookups == 1


def test_a_wildcard_entry_matches_subdomains_not_the_domain_itself(upstream: Upstream) -> None:
    names = {n: upstream.private for n in ("a.example.test", "b.a.example.test", "example.test")}
    names["a.example.test.evil"] = upstream.private
    with proxy([f"*.example.test:{PORT}"], names) as running:
        for host, allowed in (
            ("a.example.test", True),
            ("B.A.Example.Test.", True),  # names compare as DNS does
            ("example.test", False),
            ("a.example.test.evil", False),
        ):
            status = ask(running, f"CONNECT {host}:{PORT} HTTP/1.1", then=GET)[0]
            assert status.endswith("200 OK") if allowed else status.endswith("403 Forbidden"), host


@pytest.mark.parametrize(
    ("request_head", "status"),
    [
        ("GET /dashboard HTTP/1.1\r\nHost: 127.0.0.1", "HTTP/1.1 400 Bad Request"),
        ("CONNECT allowed.test HTTP/1.1", "HTTP/1.1 400 Bad Request"),
        ("GET ftp://allowed.test/ HTTP/1.1", "HTTP/1.1 400 Bad Request"),
        ("CONNECT [::1 HTTP/1.1", "HTTP/1.1 400 Bad Request"),
        ("garbage", "HTTP/1.1 400 Bad Request"),
        (
            "GET http://x/ HTTP/1.1\r\nX-Pad: " + "a" * (HEAD_LIMIT + 10),
            "HTTP/1.1 431 Request Header Fields Too Large",
        ),
    ],
)
def test_requests_a_proxy_does_not_serve_are_refused(request_head: str, status: str) -> None:
    with proxy(["allowed.test:443"], {}) as running:
        assert ask(running, request_head)[0] == status


def test_a_hosts_file_others_may_write_is_refused(tmp_path) -> None:
    path = hosts_file(tmp_path, {"a.test": "10.0.0.1"})
    assert load_hosts(str(path)) == {"a.test": [ipaddress.ip_address("10.0.0.1")]}
    path.chmod(0o666)
    with pytest.raises(ValueError, match="writable by its owner only"):
        load_hosts(str(path))


@pytest.mark.parametrize(
    ("text", "port"),
    [("api.anthropic.com", 443), ("Example.COM:8080", 8080), ("*.example.com", 443)],
)
def test_an_entry_without_a_port_means_443(text: str, port: int) -> None:
    assert parse_entry(text).port == port
