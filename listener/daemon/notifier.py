"""The notifier: one LISTEN connection, kept alive, its notifications handed on as typed events.

Guarantees:
- the connection is proven alive every `probe_interval` seconds by a query
  that must answer within seconds; a connection that does not answer (a hung server, a
  frozen network path: no FIN, no RST) is closed under the probe and replaced,
  so a dead LISTEN is found within ten seconds and never hides behind the
  fallback poll;
- every loss and every (re)subscription is logged (listen.lost,
  listen.subscribed), and after each subscription `on_subscribed` runs, so the
  owner catches up on whatever was announced while nobody listened;
- the server ends the session by itself if the probes stop
  (idle_session_timeout), so a listener cut off for good does not leave a
  backend that holds back every other listener's notification queue.
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg

from listener import counters, log
from listener.backoff import Backoff
from listener.database import connections
from listener.events import Event, parse
from listener.queries import listening

_PROBE_INTERVAL_SECS = 5.0
# A `select 1` on an idle connection: seconds without an answer mean it is dead.
_PROBE_DEADLINE_SECS = 5.0


class Notifier:
    def __init__(
        self,
        url: str,
        name: str,
        channels: list[str],
        *,
        on_event: Callable[[Event], None],
        on_subscribed: Callable[[], None],
        deadline: float,
        probe_interval: float = _PROBE_INTERVAL_SECS,
    ) -> None:
        self._url = url
        self._name = name
        self._channels = channels
        self._on_event = on_event
        self._on_subscribed = on_subscribed
        self._deadline = deadline
        self._probe_deadline = min(deadline, _PROBE_DEADLINE_SECS)
        self._probe_interval = probe_interval
        self._subscribed_before = False

    async def run(self) -> None:
        backoff = Backoff()
        while True:
            try:
                conn = await connections.connect_async(self._url, application_name=self._name)
            except psycopg.OperationalError as exc:
                log.warning("listen.connect_failed", error=str(exc).strip(), retry_in=backoff.delay)
                await backoff.sleep()
                continue
            try:
                async with conn:
                    await self._subscribe(conn)
                    backoff.reset()
                    await self._consume(conn)
            except psycopg.OperationalError as exc:
                log.warning("listen.lost", error=str(exc).strip(), retry_in=backoff.delay)
                await backoff.sleep()

    async def _subscribe(self, conn: psycopg.AsyncConnection) -> None:
        # Four probes missed in a row mean the listener is gone: let the server
        # end the session rather than keep it (and the notification queue
        # behind it) forever. Set per session, so psql users are unaffected.
        idle_ms = int((self._probe_interval + self._deadline) * 4 * 1000)
        await connections.bounded(
            conn, listening.end_session_when_idle(conn, idle_ms), self._deadline, "listen setup"
        )
        for channel in self._channels:
            await connections.bounded(
                conn, listening.listen(conn, channel), self._deadline, "listen"
            )
        log.event("listen.subscribed", channels=self._channels)
        if self._subscribed_before:
            counters.LISTEN_RECONNECTS.inc()
        self._subscribed_before = True
        self._on_subscribed()

    async def _consume(self, conn: psycopg.AsyncConnection) -> None:
        while True:
            async for notify in conn.notifies(timeout=self._probe_interval):
                self._on_event(parse(notify.channel, notify.payload))
            # Quiet for a whole interval (or busy for one): prove the
            # connection still answers, within the deadline.
            await connections.bounded(
                conn, listening.probe(conn), self._probe_deadline, "listen probe"
            )
