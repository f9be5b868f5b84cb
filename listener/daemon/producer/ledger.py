"""What this listener holds right now: jobs whose agents run, and results not yet recorded.

Guarantees: one ledger per listener, touched only from its event loop (no
locks needed but `claiming`); a job is in `running` from the moment its claim
returns until its agent has exited and been reaped, and in `unrecorded` from
then until finish_runs has answered for its result.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from enum import StrEnum
from uuid import UUID

from listener.agents.process import StopRequest
from listener.queries.jobs import ClaimedJob, FinishedRun


class StopReason(StrEnum):
    """Why the listener stopped an agent before it ended by itself."""

    # cancel_job: the database already ended the run as cancelled.
    CANCELLED = "cancelled"
    # A heartbeat found the job no longer held by this listener.
    LOST = "lost"
    # The lease could not be renewed and was about to end: stopped so the job
    # never runs here and on the listener that takes it over at once.
    FENCED = "fenced"
    # Shutdown: the grace period ended; release_jobs gives the job back.
    RELEASED = "released"


@dataclass
class Held:
    """A job whose agent this listener runs."""

    job: ClaimedJob
    run_id: UUID
    # Event-loop time no later than the database's claim_expires_at: counted
    # from just before the call that claimed or last renewed the lease.
    lease_ends: float
    stop: StopRequest
    stop_reason: StopReason | None = None
    task: asyncio.Task[None] | None = None

    def request_stop(self, reason: StopReason, grace: float | None = None) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        self.stop.stop(grace)


class Ledger:
    def __init__(self) -> None:
        self.running: dict[UUID, Held] = {}
        self.unrecorded: dict[UUID, FinishedRun] = {}
        # Wakes the claimer: new work, a freed slot, a reconnect.
        self.wake = asyncio.Event()
        # Held from a claim until its jobs are in `running`, so reconciling
        # never mistakes a claim in flight for a forgotten one.
        self.claiming = asyncio.Lock()

    def held_ids(self) -> list[UUID]:
        """Every job whose lease this listener must keep: running or awaiting its record."""
        return [*self.running, *(j for j in self.unrecorded if j not in self.running)]
