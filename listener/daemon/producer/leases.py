"""Leases: renew what this listener holds, and fence what it can no longer renew.

The heartbeat renews every held job's lease (extend_leases) a few times per
lease, stops the agent of any job the database says is no longer held
(cancelled, or expired and taken), and, after any call whose reply may have
been lost, releases jobs the database says are held here but the ledger
does not know.

The fence is the other half, and needs no database: every running job carries
a local lower bound of when its lease ends (counted from just before the call
that claimed or last renewed it). When that moment comes within
`fence_margin` and the lease has not been renewed — the database is
unreachable, or a call hangs — the agent is stopped, its SIGKILL due well
before the lease can end. Another listener can take the job over only after
the lease has ended in the database, which is no earlier than our bound: so
the same job never runs on two listeners at once, whatever the network does.

Guarantees: a healthy listener renews each lease with at least a third of it
left, which the fence never touches (margin: a fifth); a fenced agent's run
ends as lease_expired, and its job is retried (by us if we reach the database
first, else by whoever sweeps the lease).
"""

from __future__ import annotations

import asyncio

import psycopg

from listener import log
from listener.backoff import Backoff, wait_for
from listener.config import ListenerConfig
from listener.daemon.producer.ledger import Ledger, StopReason
from listener.daemon.registry import Registry
from listener.database.pool import Database
from listener.queries import jobs

_FENCE_TICK_SECS = 0.1


def fence_margin(lease_secs: float) -> float:
    """How long before a lease's end its agent must be stopped: a fifth of the lease, ≥ 1 s,
    but never more than a quarter of it. Renewal waits until a lease is past half its life,
    so a 1 s floor on a 2 s lease fenced every agent at the moment its renewal was due."""
    return min(max(lease_secs / 5, 1.0), lease_secs / 4)


def heartbeat_interval(lease_secs: float, sweep_interval: float) -> float:
    """A sixth of the lease (capped by the sweep interval), so renewal, which happens once a
    lease is past half its life, finds at least a third of it left."""
    return max(min(sweep_interval, lease_secs / 6), 0.2)


class Leases:
    def __init__(
        self, config: ListenerConfig, database: Database, registry: Registry, ledger: Ledger
    ) -> None:
        self._config = config
        self._db = database
        self._registry = registry
        self._ledger = ledger

    # -- heartbeat ----------------------------------------------------------

    async def heartbeat(self) -> None:
        backoff = Backoff(first=0.2, ceiling=1.0)
        while True:
            lease = self._registry.lease_secs
            await wait_for(self._db.doubt, heartbeat_interval(lease, self._config.sweep_interval))
            doubt = self._db.doubt.is_set()
            self._db.doubt.clear()
            try:
                await self._renew(lease)
                if doubt:
                    await self._release_forgotten()
            except psycopg.OperationalError as exc:
                # The fence keeps the agents safe meanwhile; try again soon,
                # the leases are running out.
                log.warning("lease.renewal_failed", error=str(exc).strip(), retry_in=backoff.delay)
                self._db.doubt.clear()
                await backoff.sleep()
                self._db.doubt.set()
                continue
            backoff.reset()

    async def _renew(self, lease: int) -> None:
        held = self._ledger.held_ids()
        if not held:
            return
        loop = asyncio.get_running_loop()
        sent_at = loop.time()

        async def attempt(conn: psycopg.AsyncConnection) -> list[jobs.LeaseRenewal]:
            nonlocal sent_at
            sent_at = loop.time()
            return await jobs.extend_leases(conn, self._config.worker_id, held, lease)

        # A renewal that takes a quarter of the lease is as good as lost.
        renewals = await self._db.once(
            "extend_leases", attempt, deadline=min(self._db.deadline, max(lease / 4, 1.0))
        )
        for renewal in renewals:
            running = self._ledger.running.get(renewal.job_id)
            if running is None:
                continue
            if not renewal.held:
                if running.stop_reason is None:
                    log.event("job.no_longer_held", job=str(renewal.job_id))
                running.request_stop(StopReason.LOST)
            elif renewal.renewed:
                running.lease_ends = sent_at + lease

    async def _release_forgotten(self) -> None:
        """Release jobs the database says we hold but we do not know of.

        A claim whose reply was lost to a dropped connection leaves such jobs;
        waiting for their lease to expire would delay them for no reason.
        """
        worker = self._config.worker_id
        async with self._ledger.claiming:
            held = await self._db.once("held_jobs", lambda conn: jobs.held_jobs(conn, worker))
            known = set(self._ledger.held_ids())
            forgotten = [job_id for job_id in held if job_id not in known]
        if forgotten:
            released = await self._db.once(
                "release_jobs", lambda conn: jobs.release_jobs(conn, worker, forgotten)
            )
            log.event("listener.released_forgotten", jobs=released)
            self._ledger.wake.set()

    # -- fence --------------------------------------------------------------

    async def fence(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(_FENCE_TICK_SECS)
            margin = fence_margin(self._registry.lease_secs)
            now = loop.time()
            for held in list(self._ledger.running.values()):
                if held.stop_reason is not None or now < held.lease_ends - margin:
                    continue
                log.warning(
                    "lease.fenced",
                    job=str(held.job.id),
                    run=str(held.run_id),
                    lease_ends_in=round(held.lease_ends - now, 3),
                )
                # Half the margin to go from SIGTERM to SIGKILL: the group is
                # dead well before the lease ends in the database.
                held.request_stop(StopReason.FENCED, grace=margin / 2)
