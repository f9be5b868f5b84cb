"""The supervisor: starts a listener's parts, and stops them in order.

Parts: the notifier (one LISTEN connection, its events routed by router.py),
the producer (claimer, runner, recorder, leases and fence, and the sweep of
jobs' working directories), maintenance (lease sweep, cron, outbox, retention),
the forge lane's loops (repo polls, label mirror, child issues: listener/forge/loop.py)
and, when asked, the webhook ingress on a pool of its own.

Guarantees on SIGTERM / SIGINT:
- no new claims; running agents get `shutdown_grace` seconds to end, and their
  results are retried until the grace period ends;
- what still runs then is stopped and released back to pending
  (release_jobs: the attempt is refunded, the session kept for resuming);
- results that could not be recorded are logged by job and run
  (listener.results_unrecorded) and the exit status is 3 — their jobs run
  again once their leases pass; 0 means every result reached the database.
If a part crashes, the listener logs it and shuts down the same way with exit
status 1, so a process manager restarts a whole listener rather than a limping
one.

Guarantees at start:
- the HTTP address (--http) is bound before anything else starts: a taken
  port logs `http.bind_failed` with the address and the error, and the
  process exits 1 at once, with nothing started that would outlive it;
- every step that waits for the database races SIGTERM: a listener that
  cannot reach its database stops when told to;
- the listener reports its agents' isolation and how its own database
  connection authenticated (listener_reports, read by listener_status and
  `ceaseless status`), and warns at start (`db.no_password`) when that
  connection used no password; the row is removed at a clean stop;
- a DATABASE_URL that goes through a connection pooler is used for everything
  but LISTEN, which takes --listen-url; without one, or with one that goes through
  a pooler too, the listener logs why in one line and exits 1
  (listener/database/pooler.py);
- `listener.stopped` is logged once, with the exit status the process exits with.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Iterable
from typing import TypeVar

import psycopg

from listener import log
from listener.agents.sandbox import Isolation
from listener.backoff import Backoff
from listener.config import ListenerConfig, workspace_root
from listener.daemon.maintenance import Maintenance
from listener.daemon.notifier import Notifier
from listener.daemon.producer.claimer import Claimer
from listener.daemon.producer.leases import Leases
from listener.daemon.producer.ledger import Ledger, StopReason
from listener.daemon.producer.recorder import Recorder
from listener.daemon.producer.workdirs import JobDirectories
from listener.daemon.registry import Registry
from listener.daemon.router import Router
from listener.database.pool import Database
from listener.database.pooler import PoolerRefused, Route, find_route
from listener.enums import Sandbox
from listener.events import (
    CONFIG_CHANNEL,
    JOB_CHANNEL,
    NOTIFICATION_CHANNEL,
    RUN_CHANNEL,
    SCHEDULE_CHANNEL,
)
from listener.forge.loop import ForgeLoops
from listener.queries import jobs, listener_reports, webhooks
from listener.queries.registry import setting_int
from listener.web.observer import ObserverLimits
from listener.web.server import Bound, Ingress, Limits, bind, serve

EXIT_PART_CRASHED = 1
EXIT_START_FAILED = 1
EXIT_RESULTS_UNRECORDED = 3
_CHANNELS = [JOB_CHANNEL, CONFIG_CHANNEL, SCHEDULE_CHANNEL, NOTIFICATION_CHANNEL]
# How long a released agent gets between SIGTERM and SIGKILL at shutdown.
_RELEASE_GRACE_SECS = 5.0
# How long a cancelled part has to end before it is cancelled again (_cancel).
_RECANCEL_SECS = 1.0

T = TypeVar("T")


class _Stopped(Exception):
    """SIGTERM or SIGINT came while the listener was still starting."""


def run(config: ListenerConfig) -> int:
    """Serve until SIGTERM or SIGINT; returns the process exit status."""

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        return await Listener(config).serve(stop)

    return asyncio.run(main())


class Listener:
    def __init__(self, config: ListenerConfig) -> None:
        self.config = config
        self._reported = False
        self._pooled = False
        name = f"ceaseless listener {config.worker_id}"
        self.db = Database(config.url, name, deadline=config.db_deadline)
        self.registry = Registry(config.lease_secs)
        self.ledger = Ledger()
        self.directories = JobDirectories(workspace_root(config.workdir), self.db, self.ledger)
        self.recorder = Recorder(
            self.db, config.worker_id, self.ledger, on_recorded=self.directories.recorded
        )
        self.claimer = Claimer(
            config, self.db, self.registry, self.ledger, self.recorder, self.directories
        )
        self.leases = Leases(config, self.db, self.registry, self.ledger)
        self.maintenance = Maintenance(config, self.db, self.ledger)
        # At least half a second: repos are due by the second, and labels and
        # children are woken by NOTIFY; a listener told to poll for work every
        # 0.1 s need not ask the forge tables as often.
        self.forge = ForgeLoops(self.db, tick=max(config.poll_interval, 0.5))
        self.router = Router(self.db, self.registry, self.ledger, self.maintenance)
        self.router.on_job_changed = self.forge.job_changed
        self.notifier = Notifier(
            # A session of its own, never a pooler's (listener/database/pooler.py).
            config.listen_url or config.url,
            f"ceaseless listen {config.worker_id}",
            # The run observer follows runs on the same connection: one LISTEN
            # per process, however many clients follow.
            [*_CHANNELS, RUN_CHANNEL] if config.http else _CHANNELS,
            on_event=self.router.route,
            on_subscribed=self.router.caught_up,
            deadline=config.db_deadline,
        )

    async def serve(self, stop: asyncio.Event) -> int:
        """Serve until `stop` is set, then shut down; returns the exit status."""
        log.event("listener.starting", worker=self.config.worker_id)
        bound = None
        if self.config.http:
            try:
                bound = bind(self.config.http)
            except (OSError, ValueError) as exc:
                log.event(
                    "http.bind_failed",
                    logging.ERROR,
                    address=self.config.http,
                    error=str(exc),
                    problem="another process serves this address, or it is not this host's; "
                    "stop it or choose another --http",
                )
                return self._stopped(EXIT_START_FAILED)
        try:
            return await self._serve(stop, bound)
        finally:
            if bound is not None:
                bound.sock.close()

    async def _serve(self, stop: asyncio.Event, bound: Bound | None) -> int:
        isolation = _announce_isolation(self.config.workdir)
        stopped = asyncio.create_task(stop.wait())
        try:
            route = await self._until_stopped(stopped, self._find_route())
            self._pooled = route.pooled
            await self.db.open(pooled=route.pooled)
            await self._until_stopped(stopped, self.db.retry("load", self.registry.reload))
            await self._report(stopped, isolation)
            http = await self._start_http(stopped, bound)
        except _Stopped:
            await self._withdraw()
            await self.db.close()
            return self._stopped(0)
        except PoolerRefused as exc:
            log.event("listener.start_failed", logging.ERROR, error=str(exc))
            stopped.cancel()
            return self._stopped(EXIT_START_FAILED)
        except Exception as exc:
            log.event("listener.start_failed", logging.ERROR, error=repr(exc))
            stopped.cancel()
            await self._withdraw()
            await self.db.close()
            return self._stopped(EXIT_START_FAILED)
        parts = {
            "notifier": self.notifier.run(),
            "claimer": self.claimer.run(),
            "recorder": self.recorder.run(),
            "job_directories": self.directories.sweep(),
            "heartbeat": self.leases.heartbeat(),
            "fence": self.leases.fence(),
            "lease_sweep": self.maintenance.sweep_leases(),
            "cron": self.maintenance.keep_cron(),
            "outbox": self.maintenance.deliver_notifications(),
            "retention": self.maintenance.prune(),
            "relay": self.maintenance.relay_announcements(),
            "forge_poll": self.forge.poll(),
            "forge_labels": self.forge.labels(),
            "forge_children": self.forge.children(),
        }
        tasks = {name: asyncio.create_task(part, name=name) for name, part in parts.items()}
        log.event(
            "listener.ready",
            worker=self.config.worker_id,
            concurrency=self.config.concurrency,
            poll_interval=self.config.poll_interval,
            lease_secs=self.registry.lease_secs,
        )
        done, _ = await asyncio.wait(
            [stopped, *tasks.values()], return_when=asyncio.FIRST_COMPLETED
        )
        crashed = [task for task in done if task is not stopped]
        for task in crashed:
            error = None if task.cancelled() else task.exception()
            log.warning("listener.part_crashed", part=task.get_name(), error=repr(error))
        stopped.cancel()
        if http is not None:
            await http.close()
        status = await self._shutdown(tasks)
        return self._stopped(status or (EXIT_PART_CRASHED if crashed else 0))

    async def _find_route(self) -> Route:
        """Whether the pool goes through a pooler, refusing a LISTEN that would; retried while
        the database cannot be reached."""
        backoff = Backoff()
        while True:
            try:
                route = await find_route(
                    self.config.url, self.config.listen_url, self.config.db_deadline
                )
                break
            except psycopg.OperationalError as exc:
                log.warning(
                    "db.unavailable", call="route", error=str(exc).strip(), retry_in=backoff.delay
                )
                await backoff.sleep()
        if route.pooled:
            log.event("db.pooled", listen="direct", **route.deadlines)
        if route.missing:
            log.warning(
                "db.no_server_deadline",
                problem="through a connection pooler the listener cannot ask for server-side "
                "deadlines, and its login role sets none: a backend whose listener was cut off "
                "keeps its locks until the pooler notices; set them with: "
                + "; ".join(route.missing),
            )
        return route

    def _stopped(self, status: int) -> int:
        log.event("listener.stopped", worker=self.config.worker_id, exit_status=status)
        return status

    async def _until_stopped(self, stopped: asyncio.Task[bool], step: Awaitable[T]) -> T:
        """`step`, unless SIGTERM comes first: a database that never answers must not hold it."""
        task = asyncio.ensure_future(step)
        await asyncio.wait({stopped, task}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise _Stopped()
        return task.result()

    async def _report(self, stopped: asyncio.Task[bool], isolation: Isolation) -> None:
        """Record how agents are confined and how this listener reached the database.

        `ceaseless status` reads the row; the database words the warning
        (_db_auth_warning), so the log and status say the same.
        """
        auth = await self._until_stopped(
            stopped, self.db.retry("db auth", listener_reports.db_auth)
        )
        report = listener_reports.Report(
            worker=self.config.worker_id,
            sandbox=Sandbox.BWRAP if isolation.sandboxed else Sandbox.NONE,
            agent_user=isolation.identity.name if isolation.identity else None,
            isolation_warning=isolation.warning(),
            db_auth=auth,
            http=self.config.http,
        )
        warning = await self._until_stopped(
            stopped, self.db.retry("listener report", lambda c: listener_reports.report(c, report))
        )
        self._reported = True
        if warning is not None:
            log.warning("db.no_password", auth=auth, problem=warning)

    async def _withdraw(self) -> None:
        if not self._reported:
            return
        try:
            await self.db.once(
                "withdraw listener report",
                lambda c: listener_reports.withdraw(c, self.config.worker_id),
                deadline=min(self.db.deadline, 5.0),
            )
        except psycopg.Error as exc:
            log.warning("listener.report_not_withdrawn", error=str(exc).strip()[:200])

    async def _start_http(self, stopped: asyncio.Task[bool], bound: Bound | None) -> Ingress | None:
        if bound is None:
            return None
        max_body = self.config.max_body
        if max_body is None:
            max_body = await self._until_stopped(
                stopped,
                self.db.retry("settings", lambda c: setting_int(c, "webhook_max_body_bytes")),
            )
        token_pattern = await self._until_stopped(
            stopped, self.db.retry("webhook token pattern", webhooks.token_pattern)
        )
        header_names = await self._until_stopped(
            stopped, self.db.retry("webhook header names", webhooks.header_names)
        )
        ingress = await serve(
            self.config.url,
            bound,
            worker_id=self.config.worker_id,
            limits=Limits(
                max_body=max_body,
                max_requests=self.config.http_max_requests,
                read_timeout=self.config.http_read_timeout,
                db_deadline=self.config.db_deadline,
            ),
            token_pattern=token_pattern,
            header_names=header_names,
            observer_limits=ObserverLimits(
                max_clients=self.config.observer_max_clients,
                keepalive=self.config.observer_keepalive,
                send_timeout=self.config.observer_send_timeout,
            ),
            http_token_given=self.config.http_token,
            dashboard_user=self.config.dashboard_user,
            pooled=self._pooled,
        )
        self.router.on_run_changed = ingress.hub.changed
        self.router.on_caught_up = ingress.hub.caught_up
        # Streams that opened before the hook was set read once now.
        ingress.hub.caught_up()
        return ingress

    # -- shutdown -----------------------------------------------------------

    async def _shutdown(self, tasks: dict[str, asyncio.Task[None]]) -> int:
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + self.config.shutdown_grace
        self.claimer.accepting = False
        tasks["claimer"].cancel()
        tasks["forge_poll"].cancel()
        log.event(
            "listener.stopping",
            running=len(self.ledger.running),
            grace_secs=self.config.shutdown_grace,
        )
        agents = [h.task for h in self.ledger.running.values() if h.task]
        polls = asyncio.create_task(self.forge.finish_polls(max(give_up_at - loop.time(), 0)))
        if agents:
            await asyncio.wait(agents, timeout=max(give_up_at - loop.time(), 0))
        await polls
        await self._release_leftovers()
        tasks["recorder"].cancel()
        unrecorded = await self.recorder.drain(give_up_at)
        await _cancel(tasks.values())
        await self.router.close()
        await self._withdraw()
        await self.db.close()
        if unrecorded:
            log.warning(
                "listener.results_unrecorded",
                jobs=[str(f.job_id) for f in unrecorded],
                runs=[str(f.run_id) for f in unrecorded],
                outcomes=[str(f.result.outcome) for f in unrecorded],
                note="these jobs run again once their leases pass",
            )
            return EXIT_RESULTS_UNRECORDED
        return 0

    async def _release_leftovers(self) -> None:
        """Stop what still runs and give back every job held here whose result is not pending.

        Asked of the database rather than taken from the ledger: a claim
        whose reply was lost at the last moment holds jobs the ledger never saw.
        """
        leftovers = list(self.ledger.running.values())
        for held in leftovers:
            held.request_stop(StopReason.RELEASED, grace=_RELEASE_GRACE_SECS)
        if leftovers:
            await asyncio.wait([h.task for h in leftovers if h.task], timeout=30)
        worker = self.config.worker_id
        deadline = min(self.db.deadline, 5.0)
        ids = [h.job.id for h in leftovers]
        try:
            held = await self.db.once(
                "held_jobs", lambda conn: jobs.held_jobs(conn, worker), deadline=deadline
            )
            ids = [job_id for job_id in held if job_id not in self.ledger.unrecorded]
            if ids:
                released = await self.db.once(
                    "release_jobs",
                    lambda conn: jobs.release_jobs(conn, worker, ids),
                    deadline=deadline,
                )
                log.event("listener.released", jobs=released)
        except psycopg.OperationalError as exc:
            if ids:
                log.warning(
                    "listener.release_failed",
                    jobs=[str(i) for i in ids],
                    error=str(exc).strip(),
                    note="these jobs run again once their leases pass",
                )


async def _cancel(tasks: Iterable[asyncio.Task[None]]) -> None:
    """Cancel `tasks` and wait for them to end, cancelling again any that carry on.

    A cancellation can be lost on its way in: psycopg_pool waits for a free
    connection with asyncio.wait_for, which on Python 3.11 swallows a
    cancellation that arrives as a connection is handed over, and the part
    then goes on to its next round as if never told to stop.
    """
    pending = set(tasks)
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=_RECANCEL_SECS)


def _announce_isolation(workdir: str | None) -> Isolation:
    """Say at startup how agents are confined; loudly when they are not (spec §10)."""
    isolation = Isolation.current()
    if (warning := isolation.warning()) is not None:
        log.warning("agents.not_isolated", problem=warning)
    if (problem := isolation.workspace_problem(workdir)) is not None:
        log.warning("agents.workspace_unreachable", problem=problem)
    users = {
        "per_lane": "an OS user per lane",
        "own": "the listener's own, a HOME per lane",
        "pinned": isolation.identity.name if isolation.identity else "the listener's own",
    }
    log.event(
        "agents.isolation",
        sandbox=Sandbox.BWRAP if isolation.sandboxed else Sandbox.NONE,
        network="own namespace" if isolation.sandboxed and isolation.own_network else "host",
        user=users[isolation.users.mode],
        containment=isolation.containment.mode,
    )
    return isolation
