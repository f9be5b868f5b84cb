"""The listener: LISTEN, claim, spawn, heartbeat, finish — and nothing else.

Four tasks share one small state (what this listener is running):
- the notifier holds a dedicated LISTEN connection, reconnects with backoff when
  it drops, and on every (re)connect wakes the claimer to catch up;
- the claimer claims in batches when woken (NOTIFY, a finished run) or when the
  fallback poll interval passes — claim and run start in one statement — and
  spawns the agents;
- the finisher records finished runs in batches, retrying until the database
  has them (finish_runs is idempotent, so a retry after a lost reply is safe);
- the heartbeat extends leases, stops agents whose job this listener no longer
  holds (cancelled, or expired and taken), and sweeps expired leases.

Guarantees: an agent runs only for a job this listener claimed and whose run the
same statement opened (claim_jobs with p_start); every run
that started is finished in the database (by us, or by lease expiry if we die);
on stop, no new claims, running agents get `shutdown_grace` seconds, and what
remains is killed and released back to pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar
from uuid import UUID

import aiohttp
import psycopg
from psycopg_pool import AsyncConnectionPool

from listener import db, log, queries, scheduler
from listener.agents import adapter_for, run_agent, run_noop
from listener.agents.base import AgentConfig, RunResult, Task
from listener.context import compose_prompt
from listener.enums import Adapter, JobState, Outcome
from listener.events import (
    CONFIG_CHANNEL,
    JOB_CHANNEL,
    NOTIFICATION_CHANNEL,
    SCHEDULE_CHANNEL,
    ConfigChanged,
    JobChanged,
    NotificationQueued,
    ScheduleChanged,
    parse,
)
from listener.outbox import deliver_due

T = TypeVar("T")

_RECONNECT_MAX_SECS = 5.0


async def _wait(event: asyncio.Event, timeout: float) -> None:
    """Wait for `event` at most `timeout` seconds.

    asyncio.timeout, not asyncio.wait_for: on Python 3.11 wait_for can swallow a
    cancellation that arrives as the event fires, leaving a task that was told
    to stop waiting another full interval.
    """
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class ListenerConfig:
    url: str
    worker_id: str = field(default_factory=default_worker_id)
    concurrency: int = 32
    batch_size: int = 500
    poll_interval: float = 5.0
    sweep_interval: float = 5.0
    lease_secs: int | None = None
    shutdown_grace: float = 30.0
    kinds: list[str] | None = None
    agents: list[str] | None = None
    workdir: str | None = None
    # "host:port" to serve the webhook ingress on; None serves nothing.
    http: str | None = None
    max_body: int = 1 << 20


@dataclass
class _Running:
    job: queries.ClaimedJob
    run_id: UUID
    cancel: asyncio.Event
    task: asyncio.Task[None] | None = None
    released: bool = False


class Listener:
    def __init__(self, config: ListenerConfig) -> None:
        self.config = config
        self._pool: AsyncConnectionPool = db.pool(
            config.url, application_name=f"ceaseless listener {config.worker_id}", size=4
        )
        self._agents: dict[str, AgentConfig] = {}
        self._running: dict[UUID, _Running] = {}
        self._finished: asyncio.Queue[queries.FinishedRun] = asyncio.Queue()
        self._unrecorded: set[UUID] = set()
        self._wake = asyncio.Event()
        self._accepting = True
        self._lease_secs = config.lease_secs or 60
        # Set when a call may have committed without our hearing back: the
        # next healthy moment reconciles what the database says we hold.
        self._reconcile = asyncio.Event()
        # Held from claim until the claimed jobs are tracked, so reconciling
        # never mistakes a claim in flight for a forgotten one.
        self._claiming = asyncio.Lock()
        self._schedule_wake = asyncio.Event()
        self._to_schedule: set[UUID] = set()
        self._notify_wake = asyncio.Event()

    # -- lifecycle ----------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until `stop` is set, then shut down gracefully."""
        log.event("listener.starting", worker=self.config.worker_id)
        await self._pool.open(wait=False)
        await self._with_retry("load", self._reload)
        tasks = [
            asyncio.create_task(self._notifier(), name="notifier"),
            asyncio.create_task(self._claimer(), name="claimer"),
            asyncio.create_task(self._finisher(), name="finisher"),
            asyncio.create_task(self._heartbeat(), name="heartbeat"),
            asyncio.create_task(self._scheduler(), name="scheduler"),
            asyncio.create_task(self._deliverer(), name="deliverer"),
        ]
        http_runner = await self._start_http()
        log.event(
            "listener.ready",
            worker=self.config.worker_id,
            concurrency=self.config.concurrency,
            poll_interval=self.config.poll_interval,
        )
        stopped = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait([stopped, *tasks], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not stopped and task.exception():
                log.warning(
                    "listener.task_crashed", task=task.get_name(), error=repr(task.exception())
                )
        if http_runner is not None:
            await http_runner.cleanup()
        await self._shutdown(tasks)

    async def _start_http(self) -> object | None:
        if not self.config.http:
            return None
        from listener.http import serve

        host, _, port = self.config.http.rpartition(":")
        return await serve(self._pool, host or "127.0.0.1", int(port), self.config.max_body)

    async def _shutdown(self, tasks: list[asyncio.Task[None]]) -> None:
        self._accepting = False
        log.event(
            "listener.stopping", running=len(self._running), grace_secs=self.config.shutdown_grace
        )
        pending = [r.task for r in self._running.values() if r.task]
        if pending:
            await asyncio.wait(pending, timeout=self.config.shutdown_grace)
        leftovers = list(self._running.values())
        for running in leftovers:
            running.released = True
            running.cancel.set()
        if leftovers:
            await asyncio.wait([r.task for r in leftovers if r.task], timeout=30)
            ids = [r.job.id for r in leftovers]
            with contextlib.suppress(psycopg.Error):
                async with self._pool.connection() as conn:
                    released = await queries.release_jobs(conn, self.config.worker_id, ids)
                log.event("listener.released", jobs=released)
        # Let the finisher record what completed, then stop everything.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(10):
                await self._drained()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._pool.close()
        log.event("listener.stopped", worker=self.config.worker_id)

    async def _drained(self) -> None:
        while not self._finished.empty() or self._unrecorded:
            await asyncio.sleep(0.01)

    # -- database access ----------------------------------------------------

    async def _with_retry(
        self, what: str, call: Callable[[psycopg.AsyncConnection], Awaitable[T]]
    ) -> T:
        """Run `call` on a pooled connection, retrying with backoff while the database is away."""
        delay = 0.05
        while True:
            try:
                async with self._pool.connection() as conn:
                    return await call(conn)
            except psycopg.OperationalError as exc:
                log.warning("db.unavailable", call=what, error=str(exc).strip(), retry_in=delay)
                self._reconcile.set()
                await asyncio.sleep(delay)
                delay = min(delay * 2, _RECONNECT_MAX_SECS)

    async def _reload(self, conn: psycopg.AsyncConnection) -> None:
        self._agents = await queries.load_agents(conn)
        if self.config.lease_secs is None:
            self._lease_secs = await queries.lease_secs(conn)
        log.event("config.loaded", agents=len(self._agents), lease_secs=self._lease_secs)

    # -- notifier -----------------------------------------------------------

    async def _notifier(self) -> None:
        delay = 0.05
        while True:
            try:
                conn = await db.connect_async(
                    self.config.url,
                    application_name=f"ceaseless listen {self.config.worker_id}",
                )
            except psycopg.OperationalError as exc:
                log.warning("listen.connect_failed", error=str(exc).strip(), retry_in=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, _RECONNECT_MAX_SECS)
                continue
            try:
                async with conn:
                    channels = [JOB_CHANNEL, CONFIG_CHANNEL, SCHEDULE_CHANNEL, NOTIFICATION_CHANNEL]
                    for channel in channels:
                        await conn.execute(f"listen {channel}")
                    log.event("listen.subscribed", channels=channels)
                    delay = 0.05
                    # Anything that happened while we were not listening is
                    # caught up by one claim round and a config reload.
                    self._reconcile.set()
                    self._wake.set()
                    self._schedule_wake.set()
                    self._notify_wake.set()
                    await self._with_retry("reload", self._reload)
                    await self._consume(conn)
            except psycopg.OperationalError as exc:
                log.warning("listen.lost", error=str(exc).strip(), retry_in=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, _RECONNECT_MAX_SECS)

    async def _consume(self, conn: psycopg.AsyncConnection) -> None:
        while True:
            async for notify in conn.notifies(timeout=self.config.poll_interval):
                self._route(parse(notify.channel, notify.payload))
            # Quiet for a whole interval: prove the connection is alive, so a
            # silently dead socket is found within one interval, not never.
            await conn.execute("select 1")

    def _route(self, event: object) -> None:
        if isinstance(event, JobChanged):
            if event.state == JobState.CANCELLED:
                self._stop_cancelled(event)
            elif event.state == JobState.PENDING or event.old_state in (
                JobState.CLAIMED,
                JobState.RUNNING,
            ):
                # New work, or a lane slot freed somewhere.
                self._wake.set()
        elif isinstance(event, ScheduleChanged):
            if event.table == "routines":
                self._to_schedule.add(event.id)
                self._schedule_wake.set()
        elif isinstance(event, NotificationQueued):
            self._notify_wake.set()
        elif isinstance(event, ConfigChanged):
            asyncio.get_running_loop().create_task(self._with_retry("reload", self._reload))
            self._wake.set()

    def _stop_cancelled(self, event: JobChanged) -> None:
        if event.id is None:
            # A bulk cancel names no ids: the heartbeat finds which were ours.
            self._reconcile.set()
            return
        running = self._running.get(event.id)
        if running is not None:
            log.event("job.cancel_requested", job=str(event.id))
            running.cancel.set()

    # -- claimer ------------------------------------------------------------

    def _free_slots(self) -> int:
        return self.config.concurrency - len(self._running) - self._finished.qsize()

    async def _claimer(self) -> None:
        while True:
            await _wait(self._wake, self.config.poll_interval)
            self._wake.clear()
            while self._accepting:
                limit = min(self._free_slots(), self.config.batch_size)
                if limit <= 0:
                    break
                async with self._claiming:
                    jobs = await self._with_retry(
                        "claim",
                        lambda conn, limit=limit: queries.claim_and_start(
                            conn,
                            self.config.worker_id,
                            limit,
                            kinds=self.config.kinds,
                            agents=self.config.agents,
                            lease_secs=self.config.lease_secs,
                        ),
                    )
                    if jobs:
                        await self._start(jobs)
                if len(jobs) < limit:
                    break

    async def _start(self, jobs: list[queries.ClaimedJob]) -> None:
        """Spawn the agents of jobs claimed and started (their runs are open)."""
        if any(job.agent not in self._agents for job in jobs):
            await self._with_retry("reload", self._reload)
        for job in jobs:
            assert job.run_id is not None, "claim_and_start opens a run per job"
            agent = self._agents[job.agent]
            # Fields are formatted only if the line is written.
            log.debug("job.started", job=job.id, run=job.run_id, agent=agent.name)
            if agent.adapter is Adapter.NOOP:
                self._record(queries.FinishedRun(job.run_id, job.id, run_noop()))
                continue
            running = _Running(job, job.run_id, asyncio.Event())
            self._running[job.id] = running
            running.task = asyncio.create_task(self._run(running, agent))

    async def _run(self, running: _Running, agent: AgentConfig) -> None:
        job = running.job
        task = Task(
            job_id=str(job.id),
            run_id=str(running.run_id),
            prompt=compose_prompt(job.prompt, job.payload, Path(self.config.workdir or ".")),
            max_turns=job.max_turns,
            resume_session_id=job.resume_session_id,
            cwd=self.config.workdir,
            max_tokens=job.payload.get("max_tokens"),
        )
        try:
            result = await run_agent(adapter_for(agent.adapter), agent, task, cancel=running.cancel)
        except Exception as exc:  # an adapter bug must not strand the run
            result = RunResult(outcome=Outcome.FAILED, error=f"listener error: {exc!r}")
        finally:
            self._running.pop(job.id, None)
            self._wake.set()
        if running.released:
            return
        log.event(
            "job.finished",
            job=str(job.id),
            run=str(running.run_id),
            outcome=str(result.outcome),
            exit_status=result.exit_status,
        )
        self._record(queries.FinishedRun(running.run_id, job.id, result))

    def _record(self, finished: queries.FinishedRun) -> None:
        self._unrecorded.add(finished.job_id)
        self._finished.put_nowait(finished)

    # -- finisher -----------------------------------------------------------

    async def _finisher(self) -> None:
        while True:
            batch = [await self._finished.get()]
            while not self._finished.empty() and len(batch) < 2000:
                batch.append(self._finished.get_nowait())
            await self._with_retry(
                "finish_runs",
                lambda conn, batch=batch: queries.finish_runs(conn, self.config.worker_id, batch),
            )
            for finished in batch:
                self._unrecorded.discard(finished.job_id)
            self._wake.set()

    # -- heartbeat ----------------------------------------------------------

    async def _heartbeat(self) -> None:
        interval = min(self.config.sweep_interval, max(self._lease_secs / 3, 0.2))
        while True:
            await _wait(self._reconcile, interval)
            reconcile = self._reconcile.is_set()
            self._reconcile.clear()
            held = [*self._running, *self._unrecorded]
            if held:
                lost = await self._with_retry(
                    "extend_leases",
                    lambda conn, held=held: queries.extend_leases(
                        conn, self.config.worker_id, held, self.config.lease_secs
                    ),
                )
                for job_id in lost:
                    running = self._running.get(job_id)
                    if running is not None and not running.cancel.is_set():
                        log.event("job.no_longer_held", job=str(job_id))
                        running.cancel.set()
            if reconcile:
                await self._release_forgotten()
            expired = await self._with_retry("expire_leases", queries.expire_leases)
            if expired:
                log.event("lease.expired", jobs=expired)
                self._wake.set()
            interval = min(self.config.sweep_interval, max(self._lease_secs / 3, 0.2))

    async def _release_forgotten(self) -> None:
        """Release jobs the database says we hold but we do not know of.

        A claim or start whose reply was lost to a dropped connection leaves
        such jobs; waiting for their lease to expire would delay them for no
        reason.
        """
        async with self._claiming:
            held = await self._with_retry(
                "held_jobs", lambda conn: queries.held_jobs(conn, self.config.worker_id)
            )
            known = set(self._running) | self._unrecorded
            forgotten = [job_id for job_id in held if job_id not in known]
        if forgotten:
            released = await self._with_retry(
                "release_jobs",
                lambda conn: queries.release_jobs(conn, self.config.worker_id, forgotten),
            )
            log.event("listener.released_forgotten", jobs=released)
            self._wake.set()

    # -- scheduler ----------------------------------------------------------

    async def _scheduler(self) -> None:
        """Keep cron time: schedule what asks for it, fire what is due, sleep until the next."""
        await self._with_retry(
            "cron.reconcile", lambda c: scheduler.reconcile(c, scheduler.utcnow())
        )
        while True:
            self._schedule_wake.clear()
            if self._to_schedule:
                ids = list(self._to_schedule)
                self._to_schedule.clear()
                await self._with_retry(
                    "cron.schedule",
                    lambda c, ids=ids: scheduler.schedule(c, scheduler.utcnow(), ids),
                )
            report = await self._with_retry(
                "cron.fire", lambda c: scheduler.fire_due(c, scheduler.utcnow())
            )
            timeout = self.config.poll_interval
            if report.next_due is not None:
                until = (report.next_due - scheduler.utcnow()).total_seconds()
                # Never 0: a due routine another listener holds locked would
                # otherwise spin this loop until that listener commits.
                timeout = min(timeout, max(until, 0.05))
            await _wait(self._schedule_wake, timeout)

    # -- notifications ------------------------------------------------------

    async def _deliverer(self) -> None:
        """Deliver the notification outbox: when told of new rows, and every poll for retries."""
        batch = 100
        async with aiohttp.ClientSession() as http:
            while True:
                self._notify_wake.clear()
                delay = 0.05
                while True:
                    try:
                        handled = await deliver_due(
                            self._pool, self.config.worker_id, http=http, limit=batch
                        )
                    except psycopg.OperationalError as exc:
                        log.warning(
                            "db.unavailable",
                            call="deliver_notifications",
                            error=str(exc).strip(),
                            retry_in=delay,
                        )
                        await asyncio.sleep(delay)
                        delay = min(delay * 2, _RECONNECT_MAX_SECS)
                        continue
                    if handled < batch:
                        break
                await _wait(self._notify_wake, self.config.poll_interval)
