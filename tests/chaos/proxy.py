"""A TCP proxy in front of the test PostgreSQL that can freeze its connections on demand.

Fault tests point a listener at `FreezingProxy.url()` instead of the server, then call
`freeze()` to simulate a hung server, a silent middlebox or a network partition, and
`thaw()` to end it. The proxy listens on 127.0.0.1 on an ephemeral port and forwards
to the upstream of a libpq conninfo: its Unix socket when the host is a directory
(`<host>/.s.PGSQL.<port>`, as the embedded server has it), else TCP `host:port`.
It runs in a background thread with its own selector, so it keeps forwarding while
the test's main thread blocks.

Guarantees:
- While not frozen, bytes are forwarded in both directions in order, none dropped,
  and a half-close (FIN) on one side is passed on once what preceded it is delivered.
- `freeze()` returns only once it is in force: from then on the proxy neither reads
  from nor writes to either socket of any existing connection. Bytes the proxy already
  holds stay held; the peers' kernel buffers fill up and their sends block. No FIN and
  no RST is ever sent for a frozen connection: to each peer, the other end is simply
  silent. What the kernel had accepted for delivery before the call is still delivered.
- `freeze(new_connections=True)` is a full partition: client connections made after it
  complete the TCP handshake (the kernel accepts them) but the proxy reads nothing and
  opens no upstream connection, so a client's connect hangs until its own
  `connect_timeout`. `freeze()` alone freezes existing connections only and serves new
  ones normally: half-open connections to a healthy server. The latest `freeze()`
  decides how new connections are treated until `thaw()`.
- `thaw()` resumes every frozen connection where it stopped (held bytes are delivered
  first, in order, nothing lost) and serves the held new connections, each with an
  upstream connection opened only now.
- The proxy never closes a frozen connection, even if a peer has closed its side: it
  does not read, so it does not notice. After `thaw()` it reads the peer's remaining
  bytes and its EOF, delivers them and half-closes the other side (a client's
  Terminate message and FIN reach the server only then). A reset on either side resets
  the other.
- Only `sever()` and `close()` end connections on the proxy's initiative: `sever()`
  with an RST by default, `close()` by closing every socket.
- An unexpected error inside the proxy thread is re-raised by the next method call, so
  a broken proxy fails the test instead of passing as a silent partition.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.chaos.closing import Closing

_T = TypeVar("_T")

_CHUNK = 64 << 10
# Per direction, the proxy stops reading a side while this much is waiting for the
# other; the rest of a burst waits in the kernel, where TCP flow control holds it.
_BUFFER_CAP = 256 << 10
_CONTROL_TIMEOUT_SECS = 10.0
_DEFAULT_UPSTREAM_CONNECT_SECS = 5.0


@dataclass(frozen=True)
class ProxyStats:
    """A snapshot of the proxy's counters."""

    accepted: int
    """Client connections accepted since the proxy started."""
    open: int
    """Client connections currently open, held ones included."""
    frozen: int
    """Open connections that are frozen, held ones included."""
    held: int
    """Connections accepted during a partition that have no upstream connection yet."""
    upstream_failures: int
    """Client connections closed because the upstream could not be reached."""
    bytes_to_server: int
    bytes_to_client: int


@dataclass(frozen=True)
class Upstream:
    """Where the proxy connects: a Unix socket path, or a TCP (host, port)."""

    family: socket.AddressFamily
    address: str | tuple[str, int]


def upstream_of(conninfo: str) -> Upstream:
    """The address a libpq conninfo or URL connects to (one host only)."""
    info = conninfo_to_dict(conninfo)
    host = str(info.get("hostaddr") or info.get("host") or os.environ.get("PGHOST") or "")
    port_text = str(info.get("port") or os.environ.get("PGPORT") or "5432")
    if not host:
        raise ValueError(f"the upstream conninfo names no host: {conninfo!r}; add host=...")
    if "," in host or "," in port_text:
        raise ValueError(f"the proxy forwards to one server; {conninfo!r} names several")
    port = int(port_text)
    # libpq's rule: a host starting with a slash is the directory of a Unix socket.
    if host.startswith("/"):
        return Upstream(socket.AF_UNIX, os.path.join(host, f".s.PGSQL.{port}"))
    return Upstream(socket.AF_INET6 if ":" in host else socket.AF_INET, (host, port))


class _Pipe:
    """One client connection and its upstream connection."""

    def __init__(self, client: socket.socket) -> None:
        self.client = client
        self.server: socket.socket | None = None
        self.to_server = bytearray()
        self.to_client = bytearray()
        self.client_eof = False
        self.server_eof = False
        self.server_shut = False
        self.client_shut = False
        self.frozen = False
        self.closed = False

    @property
    def held(self) -> bool:
        return self.server is None and not self.closed

    def peer(self, sock: socket.socket) -> socket.socket | None:
        return self.server if sock is self.client else self.client

    def outbound(self, sock: socket.socket) -> bytearray:
        """What waits to be written to `sock`."""
        return self.to_client if sock is self.client else self.to_server

    def inbound(self, sock: socket.socket) -> bytearray:
        """Where bytes read from `sock` wait for its peer."""
        return self.to_server if sock is self.client else self.to_client

    def wanted(self, sock: socket.socket) -> int:
        """The selector events `sock` needs now; 0 while frozen, held or closed."""
        if self.closed or self.frozen or self.server is None:
            return 0
        eof = self.client_eof if sock is self.client else self.server_eof
        events = 0
        if not eof and len(self.inbound(sock)) < _BUFFER_CAP:
            events |= selectors.EVENT_READ
        if self.outbound(sock):
            events |= selectors.EVENT_WRITE
        return events


class FreezingProxy(Closing):
    """A TCP proxy on 127.0.0.1 in front of `upstream` whose connections can be frozen.

    Starts serving on construction; use as a context manager or call `close()`.
    `upstream_connect_timeout` bounds each upstream connect, which the proxy thread
    makes while serving nothing else (the upstream is a local test server).
    """

    def __init__(
        self,
        upstream: str,
        *,
        upstream_connect_timeout: float = _DEFAULT_UPSTREAM_CONNECT_SECS,
    ) -> None:
        self.upstream_conninfo = upstream
        self.upstream = upstream_of(upstream)
        self._upstream_params = {
            key: value
            for key, value in conninfo_to_dict(upstream).items()
            if key not in ("host", "hostaddr", "port") and value is not None
        }
        self._connect_timeout = upstream_connect_timeout
        self._pipes: list[_Pipe] = []
        self._partitioned = False
        self._accepted = 0
        self._upstream_failures = 0
        self._bytes_to_server = 0
        self._bytes_to_client = 0
        self._registered: dict[socket.socket, int] = {}
        self._commands: list[tuple[Callable[[], Any], _Reply]] = []
        self._commands_lock = threading.Lock()
        self._error: BaseException | None = None
        self._stopping = False
        self._dead = False  # the thread has stopped taking commands; under _commands_lock

        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self._listener.setblocking(False)
        self.host, self.port = self._listener.getsockname()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, self._accept)
        self._selector.register(self._wake_r, selectors.EVENT_READ, self._drain_wakeups)
        self._thread = threading.Thread(
            target=self._run, name=f"FreezingProxy:{self.port}", daemon=True
        )
        self._thread.start()

    # -- the test's side ---------------------------------------------------

    def url(self, dbname: str | None = None, **params: str | int) -> str:
        """A conninfo that reaches the upstream through the proxy.

        The upstream's user, dbname and other parameters, with host and port of the
        proxy and no TLS or GSS encryption (the proxy forwards plain bytes; a test can
        read them). `params` override or add parameters, e.g. `application_name`.
        """
        merged: dict[str, Any] = {
            **self._upstream_params,
            "host": self.host,
            "port": self.port,
            "sslmode": "disable",
            "gssencmode": "disable",
        }
        if dbname is not None:
            merged["dbname"] = dbname
        merged.update(params)
        return make_conninfo("", **merged)

    def freeze(self, *, new_connections: bool = False) -> None:
        """Freeze every existing connection; with `new_connections`, hold new ones too.

        Returns once in force. See the module docstring for what frozen means.
        """

        def apply() -> None:
            self._partitioned = new_connections
            for pipe in self._pipes:
                pipe.frozen = True

        self._call(apply)

    def thaw(self) -> None:
        """Resume every frozen connection and serve the held ones; returns once in force."""

        def apply() -> None:
            self._partitioned = False
            for pipe in list(self._pipes):
                pipe.frozen = False
                if pipe.held:
                    self._connect_upstream(pipe)

        self._call(apply)

    def sever(self, *, reset: bool = True) -> int:
        """End every open connection, frozen and held ones included; return how many.

        With `reset`, both peers get an RST (a crashed middlebox); without, a FIN.
        Freezing is unchanged: later connections are treated as before.
        """

        def apply() -> int:
            pipes = list(self._pipes)
            for pipe in pipes:
                self._close_pipe(pipe, reset=reset)
            return len(pipes)

        return self._call(apply)

    def connections(self) -> int:
        """How many client connections are open, frozen and held ones included."""
        return self.stats().open

    def stats(self) -> ProxyStats:
        def read() -> ProxyStats:
            return ProxyStats(
                accepted=self._accepted,
                open=len(self._pipes),
                frozen=sum(pipe.frozen for pipe in self._pipes),
                held=sum(pipe.held for pipe in self._pipes),
                upstream_failures=self._upstream_failures,
                bytes_to_server=self._bytes_to_server,
                bytes_to_client=self._bytes_to_client,
            )

        return self._call(read)

    def close(self) -> None:
        """Stop the proxy and close every socket; idempotent."""
        if self._thread.is_alive():
            self._stopping = True
            self._wake()
            self._thread.join(_CONTROL_TIMEOUT_SECS)
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError("the proxy thread failed") from error

    def __repr__(self) -> str:
        return f"FreezingProxy({self.host}:{self.port} -> {self.upstream.address})"

    def _call(self, fn: Callable[[], _T]) -> _T:
        """Run `fn` in the proxy thread between two rounds of I/O, and return its result."""
        if self._error is not None:
            raise RuntimeError("the proxy thread failed") from self._error
        reply = _Reply()
        with self._commands_lock:
            if self._dead:
                raise RuntimeError("the proxy is closed")
            self._commands.append((fn, reply))
        self._wake()
        if not reply.done.wait(_CONTROL_TIMEOUT_SECS):
            raise RuntimeError(f"the proxy thread did not answer in {_CONTROL_TIMEOUT_SECS} s")
        if reply.error is not None:
            raise reply.error
        return reply.value

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            self._wake_w.send(b"\0")

    # -- the proxy thread --------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                self._run_commands()
                if self._stopping:
                    return
                self._update_interest()
                for key, events in self._selector.select():
                    key.data(key.fileobj, events)
        except BaseException as error:
            self._error = error
        finally:
            self._stopping = True
            self._run_commands()
            with self._commands_lock:
                self._dead = True
            self._run_commands()  # answer callers that queued before _dead was set
            for pipe in list(self._pipes):
                self._close_pipe(pipe, reset=False)
            self._selector.close()

    def _run_commands(self) -> None:
        with self._commands_lock:
            commands, self._commands = self._commands, []
        for fn, reply in commands:
            if self._stopping and self._error is not None:
                reply.error = RuntimeError("the proxy thread failed")
            else:
                try:
                    reply.value = fn()
                except Exception as error:
                    reply.error = error
            reply.done.set()

    def _drain_wakeups(self, sock: socket.socket, events: int) -> None:
        with contextlib.suppress(BlockingIOError):
            while sock.recv(4096):
                pass

    def _update_interest(self) -> None:
        wanted: dict[socket.socket, tuple[int, _Pipe]] = {}
        for pipe in self._pipes:
            for sock in (pipe.client, pipe.server):
                if sock is not None:
                    wanted[sock] = (pipe.wanted(sock), pipe)
        for sock in list(self._registered):
            if sock not in wanted or wanted[sock][0] == 0:
                self._selector.unregister(sock)
                del self._registered[sock]
        for sock, (events, pipe) in wanted.items():
            if events == 0 or self._registered.get(sock) == events:
                continue
            handler = self._handler(pipe)
            if sock in self._registered:
                self._selector.modify(sock, events, handler)
            else:
                self._selector.register(sock, events, handler)
            self._registered[sock] = events

    def _handler(self, pipe: _Pipe) -> Callable[[socket.socket, int], None]:
        def handle(sock: socket.socket, events: int) -> None:
            if events & selectors.EVENT_WRITE and not pipe.closed:
                self._flush(pipe, sock)
            if events & selectors.EVENT_READ and not pipe.closed:
                self._read(pipe, sock)

        return handle

    def _accept(self, listener: socket.socket, events: int) -> None:
        try:
            client, _ = listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        client.setblocking(False)
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._accepted += 1
        pipe = _Pipe(client)
        self._pipes.append(pipe)
        if self._partitioned:
            pipe.frozen = True  # held: nothing read, no upstream until thaw()
        else:
            self._connect_upstream(pipe)

    def _connect_upstream(self, pipe: _Pipe) -> None:
        server = socket.socket(self.upstream.family, socket.SOCK_STREAM)
        try:
            server.settimeout(self._connect_timeout)
            server.connect(self.upstream.address)
        except OSError:
            server.close()
            self._upstream_failures += 1
            self._close_pipe(pipe, reset=True)
            return
        server.setblocking(False)
        if self.upstream.family != socket.AF_UNIX:
            server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pipe.server = server

    def _read(self, pipe: _Pipe, sock: socket.socket) -> None:
        try:
            data = sock.recv(_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close_pipe(pipe, reset=True)
            return
        if not data:
            if sock is pipe.client:
                pipe.client_eof = True
            else:
                pipe.server_eof = True
        else:
            pipe.inbound(sock).extend(data)
        peer = pipe.peer(sock)
        assert peer is not None
        self._flush(pipe, peer)

    def _flush(self, pipe: _Pipe, sock: socket.socket) -> None:
        """Write what waits for `sock`; pass on the other side's EOF once all is written."""
        buffer = pipe.outbound(sock)
        while buffer:
            try:
                sent = sock.send(buffer)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._close_pipe(pipe, reset=True)
                return
            del buffer[:sent]
            if sock is pipe.client:
                self._bytes_to_client += sent
            else:
                self._bytes_to_server += sent
        source_eof = pipe.server_eof if sock is pipe.client else pipe.client_eof
        if source_eof:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_WR)
            if sock is pipe.client:
                pipe.client_shut = True
            else:
                pipe.server_shut = True
        if pipe.client_shut and pipe.server_shut:
            self._close_pipe(pipe, reset=False)

    def _close_pipe(self, pipe: _Pipe, *, reset: bool) -> None:
        if pipe.closed:
            return
        pipe.closed = True
        for sock in (pipe.client, pipe.server):
            if sock is None:
                continue
            if sock in self._registered:
                self._selector.unregister(sock)
                del self._registered[sock]
            if reset:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        self._pipes.remove(pipe)


class _Reply:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None
