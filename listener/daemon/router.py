"""The router: each NOTIFY, as a typed event, to the one part that acts on it.

Guarantees: routing never waits on the database (a reload it starts runs in
the background, retried); a bulk cancel, which names no ids, makes the
heartbeat find which of the cancelled jobs were ours; after every
(re)subscription everything that could have been announced meanwhile is
caught up on: claims, leases held by mistake, schedules, the outbox, config.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from listener import counters, log
from listener.daemon.maintenance import Maintenance
from listener.daemon.producer.ledger import Ledger, StopReason
from listener.daemon.registry import Registry
from listener.database.pool import Database
from listener.enums import JobState
from listener.events import (
    ConfigChanged,
    Event,
    JobChanged,
    NotificationQueued,
    RunChanged,
    ScheduleChanged,
)


class Router:
    def __init__(
        self, database: Database, registry: Registry, ledger: Ledger, maintenance: Maintenance
    ) -> None:
        self._db = database
        self._registry = registry
        self._ledger = ledger
        self._maintenance = maintenance
        self._background: set[asyncio.Task[Any]] = set()
        # The run observer (listener/web/observer.py), when HTTP is served: it
        # hears run, node, approval and loop changes and every resubscription.
        self.on_run_changed: Callable[[RunChanged], None] | None = None
        self.on_caught_up: Callable[[], None] | None = None
        # The forge loops (listener/forge/loop.py): a forge job's change is a label to mirror.
        self.on_job_changed: Callable[[JobChanged], None] | None = None

    def route(self, event: Event) -> None:
        if isinstance(event, JobChanged):
            if event.state == JobState.CANCELLED:
                self._stop_cancelled(event)
            elif event.state == JobState.PENDING or event.old_state in (
                JobState.CLAIMED,
                JobState.RUNNING,
            ):
                # New work, or a lane slot freed somewhere.
                if event.state == JobState.PENDING:
                    counters.CLAIM_LAG.heard()
                self._ledger.wake.set()
            if self.on_job_changed is not None:
                self.on_job_changed(event)
        elif isinstance(event, ScheduleChanged):
            # A routine's or a loop's: the scheduler computes both alike. A
            # held_fires one names a routine or loop whose run ended: only
            # the scheduler's fire_held has work then.
            if event.table == "held_fires":
                self._maintenance.held_to_try.add(event.id)
            else:
                self._maintenance.to_schedule.add(event.id)
            self._maintenance.cron_wake.set()
        elif isinstance(event, NotificationQueued):
            self._maintenance.outbox_wake.set()
        elif isinstance(event, RunChanged):
            if self.on_run_changed is not None:
                self.on_run_changed(event)
        elif isinstance(event, ConfigChanged):
            self._in_background(self._db.retry("reload", self._registry.reload))
            self._ledger.wake.set()

    def caught_up(self) -> None:
        """After every (re)subscription: catch up on what was announced while deaf."""
        self._db.doubt.set()
        self._ledger.wake.set()
        self._maintenance.try_every_held = True
        self._maintenance.cron_wake.set()
        self._maintenance.outbox_wake.set()
        self._in_background(self._db.retry("reload", self._registry.reload))
        if self.on_caught_up is not None:
            self.on_caught_up()

    async def close(self) -> None:
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    def _stop_cancelled(self, event: JobChanged) -> None:
        if event.id is None:
            # A bulk cancel names no ids: the heartbeat finds which were ours.
            self._db.doubt.set()
            return
        held = self._ledger.running.get(event.id)
        if held is not None:
            log.event("job.cancel_requested", job=str(event.id))
            held.request_stop(StopReason.CANCELLED)

    def _in_background(self, call: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(call)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
