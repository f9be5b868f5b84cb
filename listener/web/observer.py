"""The run observer: server-sent events of topology runs and loops, on the listener's HTTP server.

GET /runs/{id}/events follows one topology run: a `snapshot` event (the run,
every node, the open approvals) and then every `run`, `node` and `approval`
change in commit order, ending after the run's final status. GET
/loops/{id}/events follows a loop: a `snapshot` (the loop as loop_status shows
it and its latest iteration), then every change of its iterations, their nodes
and approvals, and the loop's own (`loop`: enabled, disabled, stopped,
deleted). Event names and data are documented in docs/loops.md; the SQL that
builds them is functions/91_run_events.sql.

Guarantees:
- an event's `id:` is its audit_log id, and a client that reconnects with
  Last-Event-ID gets exactly the events after it: no gap, no repeat (a run's
  audit rows commit in id order, see 91_run_events.sql). A loop stream's
  changes may commit out of id order (the loop's own, a skipped fire, a
  node's); a follower looks back _LOOKBACK_SECS for them and sends a late one
  under the current high-water id (_Cursor). A reconnect to a run
  that has ended and has nothing more to send is answered 204, which tells an
  EventSource to stop reconnecting;
- one LISTEN connection per listener process (the listener's own notifier,
  which also listens on ceaseless_run when HTTP is served) wakes every
  follower; followers read what changed from audit_log on a small pool of the
  observer's own, never a connection each, and never the connections of the
  webhook ingress or the job loop. After the notifier (re)subscribes every
  follower reads again, so what was announced while it was deaf is not lost;
- bounded: at most `max_clients` streams (503 beyond); a follower holds at
  most one read of events (`_BATCH`) in memory, and the socket's buffers
  are kept small; a send that does not complete within `send_timeout` seconds
  drops the client (its connection is aborted), so a slow reader is never
  buffered without limit and never slows the others. A disconnected client is
  noticed within a second and its follower freed; a quiet stream carries a
  keepalive comment every `keepalive` seconds;
- access: the listener's one rule (listener/web/access.py), before any of this:
  the token (`Authorization: Bearer <token>`, or the dashboard's sign-in
  cookie, since an EventSource cannot send headers) on every address, and on
  a loopback bind a loopback Host. The observer reads as the listener
  (row-level security does not narrow it): the token is the gate, so give it
  only to whom may see every run.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import json
import re
import socket
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar
from uuid import UUID

import psycopg
import psycopg_pool
from aiohttp import web

from listener import log
from listener.database import connections
from listener.events import RunChanged
from listener.queries import observer as queries
from listener.queries.observer import Snapshot, Stream, StreamEvent

# Events read per round trip: a follower's whole backlog in memory.
_BATCH = 500
# How long, and for how many events, a follower looks back for a change that
# committed after a higher audit id was sent (see _Cursor).
_LOOKBACK_SECS = 10.0
_LOOKBACK_IDS = 1000
# How often a waiting follower checks that its client is still connected.
_GONE_CHECK_SECS = 1.0
# The socket's kernel send buffer and the transport's buffer, per stream: an
# SSE stream is small events, and a client that cannot take this much is slow.
_SOCKET_BUFFER = 32 * 1024
# Runs whose loop the hub remembers, to route their nodes' changes to the
# loop's followers; the oldest are forgotten first.
_REMEMBERED_RUNS = 10_000
# Last-Event-ID is an audit id: a bigint, in plain digits.
_EVENT_ID = re.compile(r"[0-9]{1,18}")

ROUTE_PREFIX = "observer."

T = TypeVar("T")


@dataclass(frozen=True)
class ObserverLimits:
    """What the observer serves: streams at once, keepalive and send deadlines."""

    max_clients: int = 100
    keepalive: float = 15.0
    send_timeout: float = 10.0
    db_deadline: float = 15.0


class _Follower:
    """One client's stream: what it follows and the flag that says something changed."""

    def __init__(self, stream: Stream, key: UUID) -> None:
        self.stream = stream
        self.key = key
        self.wake = asyncio.Event()


class Hub:
    """Every open stream, woken by the listener's one LISTEN connection."""

    def __init__(self, pool: psycopg_pool.AsyncConnectionPool, limits: ObserverLimits) -> None:
        self.pool = pool
        self.limits = limits
        self.closing = asyncio.Event()
        self._followers: dict[tuple[Stream, UUID], set[_Follower]] = {}
        self._run_loop: OrderedDict[UUID, UUID | None] = OrderedDict()
        self._count = 0

    @property
    def count(self) -> int:
        return self._count

    def changed(self, event: RunChanged) -> None:
        """A NOTIFY on ceaseless_run: wake whoever follows the run or its loop."""
        if event.table == "loops":
            self._wake(Stream.LOOP, event.loop_id)
            return
        if event.run_id is None:
            return
        if event.table == "topology_runs":
            self.remember(event.run_id, event.loop_id)
        self._wake(Stream.RUN, event.run_id)
        if event.loop_id is not None:
            self._wake(Stream.LOOP, event.loop_id)
        elif event.run_id in self._run_loop:
            self._wake(Stream.LOOP, self._run_loop[event.run_id])
        else:
            # A run this process has not heard of (it began before the
            # listener started): any loop may own it, so every loop follower
            # looks. Rare, and a read that finds nothing is cheap.
            for (stream, _), followers in self._followers.items():
                if stream is Stream.LOOP:
                    for follower in followers:
                        follower.wake.set()

    def caught_up(self) -> None:
        """After the notifier (re)subscribed: every follower reads what it may have missed."""
        for followers in self._followers.values():
            for follower in followers:
                follower.wake.set()

    def remember(self, run_id: UUID, loop_id: UUID | None) -> None:
        self._run_loop[run_id] = loop_id
        self._run_loop.move_to_end(run_id)
        while len(self._run_loop) > _REMEMBERED_RUNS:
            self._run_loop.popitem(last=False)

    def close(self) -> None:
        """End every stream (at shutdown): each follower returns at its next wait."""
        self.closing.set()
        self.caught_up()

    def _wake(self, stream: Stream, key: UUID | None) -> None:
        for follower in self._followers.get((stream, key), ()) if key else ():
            follower.wake.set()

    @contextlib.contextmanager
    def follow(self, stream: Stream, key: UUID) -> Iterator[_Follower]:
        follower = _Follower(stream, key)
        self._followers.setdefault((stream, key), set()).add(follower)
        self._count += 1
        try:
            yield follower
        finally:
            self._count -= 1
            group = self._followers.get((stream, key))
            if group is not None:
                group.discard(follower)
                if not group:
                    del self._followers[(stream, key)]


class _Cursor:
    """Where a follower is: the highest audit id sent, and what it sent lately.

    Within one run, changes commit in audit id order (the run's row lock). A
    loop stream also carries the loop's own changes and its skipped fires,
    which commit independently of the live iteration's nodes: a pause can take
    its id just before a node's move and commit just after it, so the lower id
    becomes visible once the higher one was sent. The cursor therefore reads
    from the high-water mark as it stood _LOOKBACK_SECS ago (the floor) and
    sends what it has not sent yet, so a change that commits late by less than
    that is not lost; it remembers at most _LOOKBACK_IDS sent ids above the
    floor. A late event is sent under the current high-water id, not its own:
    Last-Event-ID never goes back, and a resumed stream repeats nothing.
    """

    def __init__(self, after: int) -> None:
        self.after = after
        self._floor = after
        # (when, the high-water mark then), oldest first.
        self._marks: deque[tuple[float, int]] = deque()
        # Ids sent above the floor: a heap (smallest first) and a set.
        self._heap: list[int] = []
        self._sent: set[int] = set()

    def floor(self, now: float) -> int:
        """The id to read after: everything at or below it has been sent or is given up."""
        while self._marks and now - self._marks[0][0] > _LOOKBACK_SECS:
            self._floor = max(self._floor, self._marks.popleft()[1])
        while self._heap and (self._heap[0] <= self._floor or len(self._heap) > _LOOKBACK_IDS):
            old = heapq.heappop(self._heap)
            self._sent.discard(old)
            self._floor = max(self._floor, old)
        return self._floor

    def limit(self) -> int:
        """Rows to ask for: a batch beyond those above the floor already sent."""
        return _BATCH + len(self._heap)

    def fresh(self, events: list[StreamEvent], now: float) -> list[tuple[int, StreamEvent]]:
        """The events not sent yet, each with the id to send it under."""
        out = []
        for event in events:
            if event.id in self._sent or event.id <= self._floor:
                continue
            self.after = max(self.after, event.id)
            out.append((self.after, event))
            heapq.heappush(self._heap, event.id)
            self._sent.add(event.id)
        self._marks.append((now, self.after))
        return out


_HUB = web.AppKey("observer", Hub)


def mount(app: web.Application, hub: Hub) -> None:
    """Add the observer's routes to the listener's HTTP application."""
    app[_HUB] = hub
    app.router.add_get("/runs/{id}/events", _run_events, name=ROUTE_PREFIX + "run")
    app.router.add_get("/loops/{id}/events", _loop_events, name=ROUTE_PREFIX + "loop")


async def _run_events(request: web.Request) -> web.StreamResponse:
    return await _serve(request, Stream.RUN)


async def _loop_events(request: web.Request) -> web.StreamResponse:
    return await _serve(request, Stream.LOOP)


class _Dropped(Exception):
    """The client is gone, too slow, or the server is closing: the stream ends."""


async def _serve(request: web.Request, stream: Stream) -> web.StreamResponse:
    hub = request.app[_HUB]
    try:
        key = UUID(request.match_info["id"])
    except ValueError:
        return _error(404, f"no {stream} with this id")
    raw_last = request.headers.get("Last-Event-ID", "").strip()
    if raw_last and not _EVENT_ID.fullmatch(raw_last):
        return _error(400, "Last-Event-ID must be the id of an event this stream sent")
    if hub.count >= hub.limits.max_clients:
        return _error(503, "too many observers connected; retry", headers={"Retry-After": "5"})
    with hub.follow(stream, key) as follower:
        try:
            snap = await _call(hub, "observer snapshot", lambda c: queries.snapshot(c, stream, key))
        except (psycopg.Error, TimeoutError, psycopg_pool.PoolTimeout):
            return _error(503, "the database did not answer in time; retry")
        if snap is None:
            return _error(404, f"no {stream} with this id")
        if raw_last:
            after = int(raw_last)
            if snap.final and after >= snap.last_event_id:
                # Everything was sent: 204 tells an EventSource to stop reconnecting.
                return web.Response(status=204)
        response = await _open(request)
        log.event("observer.connected", stream=str(stream), id=str(key), resumed=bool(raw_last))
        try:
            if not raw_last:
                await _send(request, response, hub, _snapshot_event(snap))
                after = snap.last_event_id
                if snap.final:
                    return response
            await _follow(request, response, hub, follower, after, ending=snap.final)
        except _Dropped as reason:
            log.event("observer.disconnected", stream=str(stream), id=str(key), reason=str(reason))
            if request.transport is not None:
                request.transport.abort()
            return response
        log.event("observer.ended", stream=str(stream), id=str(key))
        return response


async def _follow(
    request: web.Request,
    response: web.StreamResponse,
    hub: Hub,
    follower: _Follower,
    after: int,
    *,
    ending: bool,
) -> None:
    """Send every event after `after` as it commits, until the stream's last has been sent.

    `ending`: the stream's last event has committed already (a resumed stream
    of a finished run): read to the end of what there is, then stop.
    """
    follower.wake.set()  # read once at once: what committed since the snapshot
    cursor = _Cursor(after)
    loop = asyncio.get_running_loop()
    idle = 0.0
    while True:
        if hub.closing.is_set():
            raise _Dropped("server closing")
        if follower.wake.is_set():
            follower.wake.clear()
            limit = cursor.limit()
            events = await _read(hub, follower, cursor.floor(loop.time()), limit)
            if events is None:
                follower.wake.set()  # the database did not answer: try again shortly
                await asyncio.sleep(1.0)
                continue
            for sent_as, event in cursor.fresh(events, loop.time()):
                if follower.stream is Stream.LOOP and event.event == "run":
                    hub.remember(UUID(_field(event.data, "run_id")), follower.key)
                await _send(request, response, hub, _format(event, sent_as))
                ending = ending or event.last
            if len(events) == limit:
                follower.wake.set()
                continue
            if ending:
                # Read once more after the last event's batch came back short:
                # nothing of the run moves after its final status.
                return
            idle = 0.0
            continue
        try:
            async with asyncio.timeout(_GONE_CHECK_SECS):
                await follower.wake.wait()
        except TimeoutError:
            if request.transport is None or request.transport.is_closing():
                raise _Dropped("client disconnected") from None
            idle += _GONE_CHECK_SECS
            if idle >= hub.limits.keepalive:
                idle = 0.0
                await _send(request, response, hub, b": keepalive\n\n")


async def _read(hub: Hub, follower: _Follower, after: int, limit: int) -> list[StreamEvent] | None:
    try:
        return await _call(
            hub,
            "observer events",
            lambda c: queries.events(c, follower.stream, follower.key, after, limit),
        )
    except (psycopg.Error, TimeoutError, psycopg_pool.PoolTimeout) as exc:
        log.warning("observer.db_error", stream=str(follower.stream), error=str(exc).strip()[:200])
        return None


async def _call(hub: Hub, what: str, fn: Callable[[psycopg.AsyncConnection], Awaitable[T]]) -> T:
    return await connections.call(hub.pool, what, fn, hub.limits.db_deadline)


async def _open(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            # Proxies that buffer responses (nginx) would hold the events back.
            "X-Accel-Buffering": "no",
        }
    )
    await response.prepare(request)
    transport = request.transport
    if transport is not None:
        transport.set_write_buffer_limits(high=_SOCKET_BUFFER)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SOCKET_BUFFER)
    return response


async def _send(request: web.Request, response: web.StreamResponse, hub: Hub, chunk: bytes) -> None:
    if request.transport is None or request.transport.is_closing():
        raise _Dropped("client disconnected")
    try:
        async with asyncio.timeout(hub.limits.send_timeout):
            await response.write(chunk)
    except TimeoutError:
        log.warning("observer.slow_client_dropped", send_timeout=hub.limits.send_timeout)
        raise _Dropped("too slow") from None
    except (ConnectionError, RuntimeError) as exc:
        raise _Dropped("client disconnected") from exc


def _snapshot_event(snap: Snapshot) -> bytes:
    return f"id: {snap.last_event_id}\nevent: snapshot\ndata: {snap.data}\n\n".encode()


def _format(event: StreamEvent, sent_as: int) -> bytes:
    # The data is JSON text from the database: one line (JSON escapes newlines).
    return f"id: {sent_as}\nevent: {event.event}\ndata: {event.data}\n\n".encode()


def _field(data: str, name: str) -> str:
    return str(json.loads(data)[name])


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers)


def pool(
    url: str, *, worker_id: str, deadline: float, pooled: bool
) -> psycopg_pool.AsyncConnectionPool:
    """The observer's own small pool: followers never take the ingress's or the job loop's."""
    return connections.pool(
        url,
        application_name=f"ceaseless observer {worker_id}",
        size=4,
        deadline=deadline,
        pooled=pooled,
    )
