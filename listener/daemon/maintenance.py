"""Maintenance: the loops that keep shared state moving, whoever's work it is.

- the lease sweep returns jobs whose listener vanished to the pool
  (expire_leases; every listener sweeps, SKIP LOCKED splits the work), and on
  the same tick expires approvals past their time and cancels the live jobs
  of topology runs that have ended (expire_approvals,
  cancel_orphaned_topology_jobs), and folds the metric counters' deltas
  (_metrics_fold);
- cron keeps time: computes next slots for the schedules (routines and loops) that ask,
  fires what is due, and sleeps until the next slot (listener/daemon/scheduler.py);
- the outbox delivers due notifications (listener/daemon/outbox.py);
- retention removes what is past its kind's retention (prune, functions/96_retention.sql)
  at the start and every prune_interval_secs: every listener tries, prune's advisory lock
  lets one at a time through, and a pass that finds it held does nothing;
- the relay sends what sessions with ceaseless.notify = 'relay' announced
  (relay_announcements, functions/25_notify_audit.sql): at once again while it finds
  some, and when it finds none after 10 ms, then twice as long each time up to a
  second; its advisory lock lets one listener at a time send, in the order written.

Guarantees: each loop waits on the database through the shared retry policy
and deadline (listener/database/pool.py), so a hung or lost connection delays it
and is logged, never stops it; cron and the outbox are woken by NOTIFY and
also run every poll interval, so a lost NOTIFY only delays them.
"""

from __future__ import annotations

import asyncio
from uuid import UUID

import aiohttp
import psycopg

from listener import log
from listener.backoff import Backoff, wait_for
from listener.config import ListenerConfig
from listener.daemon import scheduler
from listener.daemon.outbox import deliver_due
from listener.daemon.producer.ledger import Ledger
from listener.database.pool import Database
from listener.queries import jobs, metrics, relay, retention, routine_runs, topology

_OUTBOX_BATCH = 100
# Rows of a kind per prune call: each call is one transaction, so a first pass over a
# large backlog commits every batch rather than holding one long transaction.
_PRUNE_BATCH = 1000
# The relay's waits while it finds nothing to send: the first, and the longest they
# double up to. A writer in relay mode waits at most about the longest after a quiet
# spell, and a quiet listener asks once a second or so.
RELAY_FIRST_WAIT = 0.01
RELAY_LONGEST_WAIT = 1.0


class Maintenance:
    def __init__(self, config: ListenerConfig, database: Database, ledger: Ledger) -> None:
        self._config = config
        self._db = database
        self._ledger = ledger
        self.cron_wake = asyncio.Event()
        self.outbox_wake = asyncio.Event()
        # Routines and loops whose next slot a ceaseless_schedule NOTIFY asked
        # for: one set, as the trigger layer schedules both alike.
        self.to_schedule: set[UUID] = set()
        # Routines and loops whose run ended while fires of theirs are held
        # (a ceaseless_schedule NOTIFY naming held_fires), and whether every
        # one must be tried: at the start, and after a reconnect, when some
        # NOTIFY may have been missed.
        self.held_to_try: set[UUID] = set()
        self.try_every_held = True

    async def sweep_leases(self) -> None:
        while True:
            await asyncio.sleep(self._config.sweep_interval)
            expired = await self._db.retry("expire_leases", jobs.expire_leases)
            if expired:
                log.event("lease.expired", jobs=expired)
                self._ledger.wake.set()
            # Counter deltas into their totals, so a scrape adds up a few
            # seconds of them (functions/94_metrics.sql).
            await self._db.retry("metrics_fold", metrics.fold)
            approvals = await self._db.retry("expire_approvals", topology.expire_approvals)
            if approvals:
                log.event("approval.expired", approvals=approvals)
            orphans = await self._db.retry(
                "cancel_orphaned_topology_jobs", topology.cancel_orphaned_jobs
            )
            if orphans:
                log.event("topology.orphans_cancelled", jobs=orphans)
            corrected = await self._db.retry("recount_routine_runs", routine_runs.recount_running)
            if corrected:
                log.warning("routine_runs.recounted", correction=corrected)
            await self._db.retry("forget_ended_backends", routine_runs.forget_ended_backends)

    async def keep_cron(self) -> None:
        """Schedule what asks for it, fire what is due, sleep until the next slot."""
        await self._db.retry("cron.reconcile", lambda c: scheduler.reconcile(c, scheduler.utcnow()))
        while True:
            self.cron_wake.clear()
            if self.to_schedule:
                ids = list(self.to_schedule)
                self.to_schedule.clear()
                await self._db.retry(
                    "cron.schedule",
                    lambda c, ids=ids: scheduler.schedule(c, scheduler.utcnow(), ids),
                )
            held: list[UUID] | None = None if self.try_every_held else list(self.held_to_try)
            self.try_every_held = False
            self.held_to_try.clear()
            report = await self._db.retry(
                "cron.fire", lambda c, held=held: scheduler.fire_due(c, scheduler.utcnow(), held)
            )
            timeout = self._config.poll_interval
            if report.next_due is not None:
                until = (report.next_due - scheduler.utcnow()).total_seconds()
                # Never 0: a due routine another listener holds locked would
                # otherwise spin this loop until that listener commits.
                timeout = min(timeout, max(until, 0.05))
            await wait_for(self.cron_wake, timeout)

    async def prune(self) -> None:
        """Remove what is past retention now, then every prune_interval_secs (read each time,
        so a changed setting applies from the next pass)."""
        while True:
            await self._prune_all()
            interval = await self._db.retry("retention.interval", retention.interval)
            await asyncio.sleep(interval)

    async def _prune_all(self) -> None:
        """Prune until no kind removes a whole batch; log what went."""
        totals = await retention.prune_all(
            lambda: self._db.retry(
                "retention.prune", lambda c: retention.prune(c, limit=_PRUNE_BATCH)
            ),
            _PRUNE_BATCH,
        )
        if totals is None:
            log.event("retention.busy")  # another listener is pruning: the next interval
        elif any(totals.values()):
            log.event("retention.pruned", **totals)

    async def relay_announcements(self) -> None:
        """Send the relayed announcements: again at once while some were sent, else after
        a wait that doubles while none are."""
        idle = Backoff(first=RELAY_FIRST_WAIT, ceiling=RELAY_LONGEST_WAIT)
        while True:
            sent = await self._db.retry("relay", relay.relay_announcements)
            if sent:
                idle.reset()
                await asyncio.sleep(0)  # a busy relay still lets the other loops run
            else:
                await idle.sleep()

    async def deliver_notifications(self) -> None:
        """Deliver the outbox: when told of new rows, and every poll for retries."""
        async with aiohttp.ClientSession() as http:
            while True:
                self.outbox_wake.clear()
                await self._deliver_all(http)
                await wait_for(self.outbox_wake, self._config.poll_interval)

    async def _deliver_all(self, http: aiohttp.ClientSession) -> None:
        backoff = Backoff()
        while True:
            try:
                handled = await deliver_due(
                    self._db.pool,
                    self._config.worker_id,
                    http=http,
                    limit=_OUTBOX_BATCH,
                    deadline=self._db.deadline,
                )
            except psycopg.OperationalError as exc:
                log.warning(
                    "db.unavailable",
                    call="deliver_notifications",
                    error=str(exc).strip(),
                    retry_in=backoff.delay,
                )
                await backoff.sleep()
                continue
            backoff.reset()
            if handled < _OUTBOX_BATCH:
                return
