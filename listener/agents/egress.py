"""The egress proxy of one agent run, and the network namespace it serves.

The keeper (reaper.py) loads this file by its path, so it uses the standard
library only. network.py says why agents are networked this way; this module
is the mechanism:

- `open_namespace`, called in the keeper's child between fork and exec, gives
  that child (and so the sandbox it becomes) a network namespace of its own,
  holding a loopback interface and nothing else, and hands the keeper a TCP
  socket listening on 127.0.0.1:PROXY_PORT *inside* it.
- `serve` runs, in the keeper (outside the sandbox, in the host's namespace),
  an HTTP proxy on that socket: `CONNECT host:port` and plain `http://` requests
  in absolute form, each judged by the run's `Policy` before anything is
  resolved or connected.

Guarantees:
- The namespace's only way out is this proxy: no route, no DNS server, no
  interface but `lo`. Its creator is the agent's own OS user (a user namespace
  of its own when that user is not root), so the keeper reaches it only through
  the socket it was handed.
- A request is refused (403, and a line on the keeper's stderr, which is the
  run's) unless its host and port match the policy. Names are resolved once, by
  the proxy, and the connection goes to an address of that one resolution (no
  DNS rebinding between check and connect). A name never leads to a loopback,
  link-local, unspecified or multicast address nor to one of this host's own
  addresses; only an entry that names such an address as an IP literal reaches
  it. `open` reaches public addresses only.
- Memory and threads are bounded: a request head of at most HEAD_LIMIT bytes,
  at most MAX_CONNECTIONS connections at once.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import ipaddress
import os
import re
import socket
import stat
import struct
import sys
import threading
from collections import namedtuple
from collections.abc import Callable, Iterable, Sequence

PROXY_PORT = 3128
PROXY_URL = f"http://127.0.0.1:{PROXY_PORT}"
# A destination of the agent's own (a dev server it started) is its own
# loopback, never the proxy's business.
NO_PROXY = "localhost,127.0.0.1,::1"
HEAD_LIMIT = 64 << 10
MAX_CONNECTIONS = 256
HEAD_TIMEOUT_SECS = 30.0
CONNECT_TIMEOUT_SECS = 15.0
DEFAULT_PORT = 443
_CHUNK = 64 << 10
# How many distinct refusals a run reports on stderr; the rest are counted.
_REPORTED_REFUSALS = 50

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_PR_SET_DUMPABLE = 4
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = "16sH22s"  # struct ifreq: the name, then ifr_flags in a 24-byte union

_LABEL = r"(?!-)[a-z0-9-]{1,63}(?<!-)"
_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
_BROADCAST = ipaddress.ip_address("255.255.255.255")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def proxy_environment() -> dict[str, str]:
    """What an agent's environment says about the proxy (both spellings: tools differ)."""
    env: dict[str, str] = {}
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"):
        env[name] = env[name.lower()] = PROXY_URL
    env["NO_PROXY"] = env["no_proxy"] = NO_PROXY
    return env


# -- the policy -------------------------------------------------------------------


# Records are named tuples, not dataclasses: every keeper with a proxy imports
# this module, and dataclasses (with inspect) costs it about ten milliseconds.


class Entry(namedtuple("Entry", "name wildcard address port")):
    """One allowlist entry: a name (`name`, str, with `wildcard` for `*.` and a domain) or
    an IP literal (`address`), and one `port`."""

    __slots__ = ()

    def matches(self, host: str | Address, port: int) -> bool:
        if port != self.port:
            return False
        if self.address is not None:
            return host == self.address
        if not isinstance(host, str) or self.name is None:
            return False
        if self.wildcard:
            return host.endswith("." + self.name)
        return host == self.name


def parse_entry(text: str) -> Entry:
    """An entry of agents.egress: `host`, `host:port`, `*.domain[:port]`, an IPv4 address or
    a bracketed IPv6 one, each with an optional port (443 when none is given).

    Raises ValueError naming the entry and what is wrong with it.
    """
    value = text.lower()
    if value.startswith("["):
        inside, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(f"{text!r}: an IPv6 address goes in brackets, e.g. [2001:db8::1]:443")
        host, port_text = inside, rest[1:] if rest else None
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{text!r}: {host!r} is not an IPv6 address") from None
        # An IPv4-mapped address is the IPv4 one, as a request's target is (_address).
        return Entry(None, False, _address(host), _port(text, port_text))
    host, colon, port_text = value.partition(":")
    port = _port(text, port_text if colon else None)
    wildcard = host.startswith("*.")
    name = host[2:] if wildcard else host
    with contextlib.suppress(ValueError):
        if not wildcard:
            return Entry(None, False, ipaddress.IPv4Address(name), port)
    if not wildcard and re.fullmatch(r"[0-9.]+", name):
        raise ValueError(f"{text!r}: a host of digits and dots must be an IPv4 address")
    if len(name) > 253 or not _NAME.fullmatch(name) or (wildcard and "." not in name):
        raise ValueError(
            f"{text!r}: not a host name (letters, digits and hyphens in dot-separated labels; "
            "`*.` before a domain of two labels or more for its subdomains)"
        )
    return Entry(name, wildcard, None, port)


def _port(text: str, port_text: str | None) -> int:
    if port_text is None:
        return DEFAULT_PORT
    if not re.fullmatch(r"[0-9]{1,5}", port_text) or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"{text!r}: the port must be a number from 1 to 65535")
    return int(port_text)


class Policy(namedtuple("Policy", "open entries")):
    """Where one agent's connections may go: `open` (public addresses), or its `entries`."""

    __slots__ = ()

    @classmethod
    def parse(cls, values: Sequence[str]) -> Policy:
        """The policy of an agents.egress value ({open}, {none} or entries)."""
        words = [v.lower() for v in values]
        if words == ["open"]:
            return cls(True, ())
        if words in ([], ["none"]):
            return cls(False, ())
        return cls(False, tuple(parse_entry(v) for v in values))

    def entry_for(self, host: str | Address, port: int) -> Entry | None:
        return next((e for e in self.entries if e.matches(host, port)), None)


# -- resolution and the addresses a name may lead to -------------------------------


class Resolver:
    """Names to addresses: the listener's hosts file first (CEASELESS_EGRESS_HOSTS), then DNS."""

    def __init__(self, hosts: dict[str, list[Address]] | None = None) -> None:
        self._hosts = hosts or {}

    def resolve(self, name: str, port: int) -> list[Address]:
        if name in self._hosts:
            return list(self._hosts[name])
        found: list[Address] = []
        for *_, sockaddr in socket.getaddrinfo(name, port, type=socket.SOCK_STREAM):
            address = _address(str(sockaddr[0]))
            if address is not None and address not in found:
                found.append(address)
        return found


def load_hosts(path: str) -> dict[str, list[Address]]:
    """A hosts(5) file: `address name…` lines, `#` comments.

    Refused (ValueError) when someone other than its owner may write it, or its
    owner is neither root nor this process's user: it decides where agents'
    names lead.
    """
    info = os.stat(path)
    if info.st_uid not in (0, os.geteuid()) or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ValueError(
            f"the egress hosts file {path} must be owned by root or the listener's user and "
            "writable by its owner only"
        )
    hosts: dict[str, list[Address]] = {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            address = _address(fields[0])
            if address is None or len(fields) < 2:
                raise ValueError(f"{path}:{number}: expected `address name…`, got {line.strip()!r}")
            for name in fields[1:]:
                hosts.setdefault(name.lower().rstrip("."), []).append(address)
    return hosts


def _address(text: str) -> Address | None:
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def host_local(address: Address) -> bool:
    """Whether `address` leads back to this host or its link: loopback, link-local,
    unspecified, multicast or broadcast, or one of this host's own addresses.

    Own addresses are those the kernel lets a socket bind to, so every interface
    counts, however it was configured. Where non-local binds are allowed
    (net.ipv4.ip_nonlocal_bind), every address counts as local: fail closed.
    """
    if (
        address.is_loopback
        or address.is_link_local
        or address.is_unspecified
        or address.is_multicast
        or address == _BROADCAST
        or address in _THIS_NETWORK
    ):
        return True
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((str(address), 0))
    except OSError as exc:
        return exc.errno != errno.EADDRNOTAVAIL
    return True


class Verdict(namedtuple("Verdict", "addresses refusal status", defaults=((), None, 403))):
    """The `addresses` to try, in order, or why not (`refusal`, and the HTTP `status` saying so)."""

    __slots__ = ()


def decide(
    policy: Policy,
    resolver: Resolver,
    host: str,
    port: int,
    local: Callable[[Address], bool] = host_local,
) -> Verdict:
    """Judge one request for host:port: the policy first, then every address resolved."""
    target = _target(host)
    if target is None:
        return Verdict(refusal=f"{host!r} is not a host name or an IP address", status=400)
    entry = policy.entry_for(target, port)
    if entry is None and not policy.open:
        return Verdict(refusal="not in this agent's egress allowlist (agents.egress)")
    if isinstance(target, str):
        try:
            found = resolver.resolve(target, port)
        except OSError as exc:
            return Verdict(refusal=f"cannot resolve {target}: {exc}", status=502)
    else:
        found = [target]
    if entry is not None and entry.address is not None:
        return Verdict(tuple(found))  # an IP literal the operator named: that address, as named
    kept = [a for a in found if not local(a) and (entry is not None or a.is_global)]
    if kept:
        return Verdict(tuple(kept))
    if not found:
        return Verdict(refusal=f"{target} has no address", status=502)
    if any(local(a) for a in found):
        return Verdict(
            refusal="leads to a loopback, link-local or this host's own address, which only an "
            "entry naming that IP address and port reaches"
        )
    return Verdict(refusal="leads to a private address, which `open` does not reach; name it")


def _target(host: str) -> str | Address | None:
    value = host.lower()
    if value.startswith("[") and value.endswith("]"):
        return _address(value[1:-1])
    value = value[:-1] if value.endswith(".") else value
    with contextlib.suppress(ValueError):
        return ipaddress.IPv4Address(value)
    if len(value) <= 253 and _NAME.fullmatch(value):
        return value
    return None


# -- the namespace ------------------------------------------------------------------


def open_namespace(channel: socket.socket) -> None:
    """In a forked child, before exec: move it into a network namespace of its own.

    The namespace gets `lo`, up, and a socket listening on 127.0.0.1:PROXY_PORT,
    sent to the parent over `channel` (SCM_RIGHTS) and closed here, so exec
    leaves the program nothing but the namespace. An unprivileged child creates a
    user namespace with it, mapping only its own uid and gid. On failure the
    reason goes over `channel` and OSError is raised, so the exec never happens:
    an agent never runs on the host's network by accident.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        uid, gid = os.getuid(), os.getgid()
        flags = _CLONE_NEWNET if os.geteuid() == 0 else _CLONE_NEWNET | _CLONE_NEWUSER
        # A child that just switched from root to the agent's user is not
        # dumpable, and its /proc/self files are root's: it could not map itself.
        libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
        if libc.unshare(flags) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"unshare: {os.strerror(code)}")
        if flags & _CLONE_NEWUSER:
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1")):
                _write(f"/proc/self/{name}", text)
            _write("/proc/self/gid_map", f"{gid} {gid} 1")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as control:
            request = struct.pack(_IFREQ, b"lo", 0, b"")
            current = struct.unpack(_IFREQ, fcntl.ioctl(control, _SIOCGIFFLAGS, request))[1]
            fcntl.ioctl(control, _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", current | _IFF_UP, b""))
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listening:
            listening.bind(("127.0.0.1", PROXY_PORT))
            listening.listen(128)
            socket.send_fds(channel, [b"ok"], [listening.fileno()])
    except OSError as exc:
        with contextlib.suppress(OSError):
            channel.sendall(f"error: {exc}".encode())
        raise
    finally:
        channel.close()


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def receive_listening(channel: socket.socket) -> socket.socket:
    """The socket `open_namespace` sent; OSError with the child's reason if it sent none."""
    message, fds, _, _ = socket.recv_fds(channel, 1024, 1)
    channel.close()
    if message != b"ok" or len(fds) != 1:
        for fd in fds:
            os.close(fd)
        reason = message.decode("utf-8", "replace").removeprefix("error: ") or "no answer"
        raise OSError(f"the agent's network namespace could not be made: {reason}")
    return socket.socket(fileno=fds[0])


# -- the keeper's side ---------------------------------------------------------------


class KeeperNetwork:
    """One run's network as its keeper makes it: the policy, read before anything starts
    (a bad one stops the run), the channel over which the keeper's child hands over the
    namespace's socket, and the proxy that serves it.

    The keeper calls `enter` in its child between fork and exec, then `serve` once the
    child started, or `reason` if it did not.
    """

    def __init__(
        self,
        values: Sequence[str],
        hosts: str | None,
        report: Callable[[str], None] | None = None,
    ) -> None:
        resolver = Resolver(load_hosts(hosts) if hosts else None)
        self._proxy = Proxy(Policy.parse(values), resolver, report or stderr_report)
        self._ours, self._theirs = socket.socketpair()

    def enter(self) -> None:
        open_namespace(self._theirs)

    def serve(self) -> None:
        self._theirs.close()
        self._proxy.serve(receive_listening(self._ours))

    def reason(self, failure: BaseException) -> BaseException:
        """Why the child did not start: its own reason when it sent one, else `failure`."""
        self._theirs.close()
        try:
            receive_listening(self._ours)
        except OSError as sent:
            return sent
        return failure


# -- the proxy ----------------------------------------------------------------------


class Proxy:
    """Serves one run's requests on a listening socket, judged by its policy."""

    def __init__(
        self,
        policy: Policy,
        resolver: Resolver,
        report: Callable[[str], None],
        local: Callable[[Address], bool] = host_local,
    ) -> None:
        self.policy = policy
        self.resolver = resolver
        self._report = report
        self._local = local
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._refused: set[tuple[str, int]] = set()
        self._lock = threading.Lock()

    def serve(self, listening: socket.socket) -> threading.Thread:
        """Accept connections in a daemon thread (it lives as long as this process)."""
        thread = threading.Thread(target=self._accept, args=(listening,), daemon=True)
        thread.start()
        return thread

    def _accept(self, listening: socket.socket) -> None:
        while True:
            try:
                client, _ = listening.accept()
            except OSError:
                return
            if not self._slots.acquire(blocking=False):
                _answer(client, 503, "too many connections through the egress proxy at once")
                client.close()
                continue
            threading.Thread(target=self._serve_one, args=(client,), daemon=True).start()

    def _serve_one(self, client: socket.socket) -> None:
        try:
            with client:
                self._handle(client)
        except OSError:
            pass  # either side went away; nothing to tell anyone
        finally:
            self._slots.release()

    def _handle(self, client: socket.socket) -> None:
        client.settimeout(HEAD_TIMEOUT_SECS)
        head, rest = _read_head(client)
        if head is None:
            _answer(client, 431, f"request head over {HEAD_LIMIT} bytes or cut short")
            _drain(client)
            return
        request = _Request.parse(head)
        if isinstance(request, str):
            _answer(client, 400, request)
            return
        verdict = decide(self.policy, self.resolver, request.host, request.port, self._local)
        if verdict.refusal is not None:
            self._refuse(request, verdict)
            _answer(client, verdict.status, f"egress to {request.where} refused: {verdict.refusal}")
            return
        upstream = _connect(verdict.addresses, request.port)
        if isinstance(upstream, str):
            _answer(client, 502, f"cannot connect to {request.where}: {upstream}")
            return
        with upstream:
            if request.method == "CONNECT":
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                upstream.sendall(request.forwarded_head())
            if rest:
                upstream.sendall(rest)
            client.settimeout(None)
            upstream.settimeout(None)
            _splice(client, upstream)

    def _refuse(self, request: _Request, verdict: Verdict) -> None:
        key = (request.host, request.port)
        with self._lock:
            if key in self._refused:
                return
            self._refused.add(key)
            count = len(self._refused)
        if count <= _REPORTED_REFUSALS:
            self._report(f"ceaseless: egress to {request.where} refused: {verdict.refusal}")
        elif count == _REPORTED_REFUSALS + 1:
            self._report("ceaseless: more egress refusals; not reported")


class _Request(namedtuple("_Request", "method host port version path headers")):
    """One request head: what is asked for (`host`, `port`), and what to pass on."""

    __slots__ = ()

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, head: bytes) -> _Request | str:
        """The request, or why it is not one this proxy serves."""
        try:
            lines = head.decode("ascii").split("\r\n")
        except UnicodeDecodeError:
            return "the request head must be ASCII"
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return f"not an HTTP request line: {lines[0][:200]!r}"
        method, target, version = parts
        headers = tuple(line for line in lines[1:] if line)
        if method == "CONNECT":
            authority = _authority(target)
            if authority is None or authority[1] is None:
                return f"CONNECT needs host:port, got {target[:200]!r}"
            return cls(method, authority[0], authority[1], version, "", headers)
        if not target.lower().startswith("http://"):
            return (
                "this is an egress proxy: CONNECT for https, an absolute http:// URL otherwise; "
                f"got {target[:200]!r}"
            )
        rest = target[len("http://") :]
        cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
        authority = _authority(rest[:cut].rpartition("@")[2])
        if authority is None:
            return f"no host in {target[:200]!r}"
        path = rest[cut:] or "/"
        path = path if path.startswith("/") else "/" + path
        return cls(method, authority[0], authority[1] or 80, version, path, headers)

    def forwarded_head(self) -> bytes:
        """The request as the origin server gets it: origin-form, no proxy headers, one request."""
        hop = ("proxy-connection", "proxy-authorization", "connection", "keep-alive")
        kept = [h for h in self.headers if h.split(":", 1)[0].strip().lower() not in hop]
        if not any(h.split(":", 1)[0].strip().lower() == "host" for h in kept):
            kept.insert(0, f"Host: {self.host}" + ("" if self.port == 80 else f":{self.port}"))
        lines = [f"{self.method} {self.path} {self.version}", *kept, "Connection: close", "", ""]
        return "\r\n".join(lines).encode("ascii")


def _authority(text: str) -> tuple[str, int | None] | None:
    if text.startswith("["):
        host, bracket, rest = text.partition("]")
        host += bracket
    else:
        host, _, port = text.rpartition(":") if ":" in text else (text, "", "")
        rest = f":{port}" if port or text.endswith(":") else ""
    if not host:
        return None
    if not rest:
        return host, None
    if not rest.startswith(":") or not rest[1:].isdigit() or not 0 < int(rest[1:]) < 65536:
        return None
    return host, int(rest[1:])


def _read_head(client: socket.socket) -> tuple[bytes | None, bytes]:
    data = b""
    while (end := data.find(b"\r\n\r\n")) < 0:
        if len(data) > HEAD_LIMIT:
            return None, b""
        chunk = client.recv(_CHUNK)
        if not chunk:
            return None, b""
        data += chunk
    if end > HEAD_LIMIT:
        return None, b""
    return data[:end], data[end + 4 :]


def _connect(addresses: Iterable[Address], port: int) -> socket.socket | str:
    """A connection to the first of `addresses` that answers, or the last error."""
    error = "no address"
    for address in addresses:
        try:
            return socket.create_connection((str(address), port), CONNECT_TIMEOUT_SECS)
        except OSError as exc:
            error = str(exc)
    return error


def _answer(client: socket.socket, status: int, text: str) -> None:
    reasons = {400: "Bad Request", 403: "Forbidden", 431: "Request Header Fields Too Large"}
    reasons |= {502: "Bad Gateway", 503: "Service Unavailable"}
    body = f"ceaseless: {text}\n".encode("utf-8", "replace")
    head = (
        f"HTTP/1.1 {status} {reasons.get(status, 'Error')}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    with contextlib.suppress(OSError):
        client.sendall(head.encode("ascii") + body)


def _drain(client: socket.socket) -> None:
    """Read what the client still sends (a bounded amount) after answering it, so that
    closing does not reset the connection before the answer is read."""
    with contextlib.suppress(OSError):
        client.shutdown(socket.SHUT_WR)
        client.settimeout(2.0)
        for _ in range(64):
            if not client.recv(_CHUNK):
                break


def _splice(a: socket.socket, b: socket.socket) -> None:
    """Copy both ways until both sides are done; one thread per direction, so neither blocks
    the other (a full-duplex peer cannot deadlock it)."""
    back = threading.Thread(target=_copy, args=(b, a), daemon=True)
    back.start()
    _copy(a, b)
    back.join()


def _copy(source: socket.socket, sink: socket.socket) -> None:
    try:
        while chunk := source.recv(_CHUNK):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def stderr_report(line: str) -> None:
    """Report to the keeper's stderr, which is the run's: refusals show in its stderr tail."""
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
