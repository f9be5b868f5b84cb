"""The forge lane's loops in a listener: poll due repos, mirror labels, create child issues.

Three tasks the supervisor starts beside cron and the outbox (listener/daemon/supervisor.py):
- `poll`: every tick asks `due_repos` for the repos due now, and polls each in
  a task of its own (listener/forge/poller.py), at most `max_polls` at once;
  the tick does not wait for them, so a hung forge delays only its own repo;
- `labels`: mirrors the due label changes (listener/forge/labels.py) every
  tick, and at once when a forge job changes state (NOTIFY ceaseless_job);
- `children`: creates the due child issues (listener/forge/children.py) every
  tick, and at once when a plan job is delivered.

Guarantees: any number of listeners may run these loops; each repo poll, label
change and child issue is handed to one of them by the database (SKIP LOCKED
and leases in SQL). A loop never ends on an error: a database that is away is
waited for with backoff, anything else is logged and the loop goes on at its
next tick, so the listener never shuts down over a forge. Tokens are read per
round from where the forge_token_source setting points, so a rotated token
is used without a restart, and never logged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from listener import log
from listener.backoff import Backoff, wait_for
from listener.database.pool import Database
from listener.enums import FORGE_KINDS, JobKind, JobState
from listener.events import JobChanged
from listener.forge.children import create_children
from listener.forge.labels import sync_labels
from listener.forge.poller import DEFAULT_POLL_TIMEOUT, poll_repo, utcnow
from listener.queries import forge_loops as queries
from listener.queries.forge_loops import TrackedRepo

_BATCH = 50


class ForgeLoops:
    """The forge lane's three loops for one listener."""

    def __init__(
        self,
        database: Database,
        *,
        tick: float,
        max_polls: int = 16,
        poll_timeout: float = DEFAULT_POLL_TIMEOUT,
    ) -> None:
        self._db = database
        self._tick = tick
        self._max_polls = max_polls
        self._poll_timeout = poll_timeout
        self._polling: dict[str, asyncio.Task[None]] = {}
        # Set to run a loop before its tick (a job changed state: its label is due).
        self.labels_wake = asyncio.Event()
        self.children_wake = asyncio.Event()
        self.poll_wake = asyncio.Event()

    def job_changed(self, event: JobChanged) -> None:
        """A job moved (from the router): a forge job's label is due, a plan's children may be."""
        if event.kind not in FORGE_KINDS:
            return
        self.labels_wake.set()
        if event.kind == JobKind.PLAN and event.state == JobState.DELIVERED:
            self.children_wake.set()

    async def poll(self) -> None:
        """Hand each due repo to a poll task of its own, every tick.

        Cancelling this stops new polls only: the ones in flight are the
        listener's to finish (finish_polls), so a stop does not throw away a
        listing the forge already sent.
        """
        await self._forever("forge.poll", self._poll_round, self.poll_wake)

    async def finish_polls(self, timeout: float) -> None:
        """Let the polls in flight record what they fetched, for up to `timeout` seconds.

        A poll cut short has made its request but recorded nothing: its
        issues wait a whole interval and its ETag is lost. What is still
        running when the time is up is cancelled; due_repos already moved
        its repo's next poll on.
        """
        polling = list(self._polling.values())
        if not polling:
            return
        _, late = await asyncio.wait(polling, timeout=timeout)
        for task in late:
            task.cancel()
        await asyncio.gather(*polling, return_exceptions=True)

    async def labels(self) -> None:
        await self._forever("forge.labels", self._labels_round, self.labels_wake)

    async def children(self) -> None:
        await self._forever("forge.children", self._children_round, self.children_wake)

    # -- rounds ------------------------------------------------------------

    async def _poll_round(self) -> None:
        room = self._max_polls - len(self._polling)
        if room <= 0:
            return
        repos = await self._db.once("due_repos", lambda c: queries.due_repos(c, utcnow(), room))
        if not repos:
            return
        source = await self._db.once("forge_token_source", queries.token_source)
        for repo in repos:
            key = str(repo.id)
            task = asyncio.create_task(self._poll_one(repo, source), name=f"poll {repo.name}")
            self._polling[key] = task
            task.add_done_callback(lambda _t, key=key: self._polling.pop(key, None))

    async def _poll_one(self, repo: TrackedRepo, source: dict[str, Any]) -> None:
        try:
            await poll_repo(self._db, repo, source, timeout=self._poll_timeout)
        except psycopg.OperationalError as exc:
            # The outcome could not be recorded: due_repos already moved the
            # repo's next poll one interval on, so it is polled again then.
            log.warning("forge.poll_unrecorded", repo=repo.name, error=str(exc).strip())
        except Exception as exc:  # a bug must not stop the other repos' polls
            log.warning("forge.poll_crashed", repo=repo.name, error=repr(exc))

    async def _labels_round(self) -> None:
        source = await self._db.once("forge_token_source", queries.token_source)
        while await sync_labels(self._db, source, _BATCH) >= _BATCH:
            pass

    async def _children_round(self) -> None:
        source = await self._db.once("forge_token_source", queries.token_source)
        while await create_children(self._db, source, _BATCH) >= _BATCH:
            pass

    async def _forever(
        self, name: str, round_: Callable[[], Awaitable[None]], wake: asyncio.Event
    ) -> None:
        backoff = Backoff(first=0.5, ceiling=max(self._tick, 5.0))
        while True:
            wake.clear()
            try:
                await round_()
            except psycopg.OperationalError as exc:
                log.warning(
                    "db.unavailable", call=name, error=str(exc).strip(), retry_in=backoff.delay
                )
                await backoff.sleep()
                continue
            except Exception as exc:  # logged, and tried again next tick
                log.warning("forge.loop_error", loop=name, error=repr(exc))
            else:
                backoff.reset()
            await wait_for(wake, self._tick)
