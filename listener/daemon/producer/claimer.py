"""The claimer: claim due jobs in batches and start their agents.

Woken by the ledger's `wake` (NOTIFY of new work, a freed slot, a reconnect)
or, failing that, every poll interval, so a lost NOTIFY never strands work.

Guarantees: an agent runs only for a job this listener claimed and whose run
the same statement opened (claim_jobs with p_start); each claimed job's local
lease is counted from just before the claim was sent, so it never outlasts
the database's; no more agents run at once than the configured concurrency;
a claimed job whose payload cannot be decoded fails alone, with the reason,
and its agent never starts.
"""

from __future__ import annotations

import asyncio

import psycopg

from listener import counters, log
from listener.agents import run_noop
from listener.agents.base import RunResult
from listener.agents.process import StopRequest
from listener.backoff import wait_for
from listener.config import ListenerConfig, forge_root, workspace_root
from listener.daemon.producer.ledger import Held, Ledger
from listener.daemon.producer.recorder import Recorder
from listener.daemon.producer.runner import run_held
from listener.daemon.producer.workdirs import JobDirectories
from listener.daemon.registry import Registry
from listener.database.connections import UndecodableJSON
from listener.database.pool import Database
from listener.enums import Adapter, Outcome
from listener.queries import jobs
from listener.queries.jobs import ClaimedJob, FinishedRun


class Claimer:
    def __init__(
        self,
        config: ListenerConfig,
        database: Database,
        registry: Registry,
        ledger: Ledger,
        recorder: Recorder,
        directories: JobDirectories,
    ) -> None:
        self._config = config
        self._db = database
        self._registry = registry
        self._ledger = ledger
        self._recorder = recorder
        self._directories = directories
        # Checked when the config was made; resolved once here.
        self._forge_root = forge_root(config.forge_root, workspace_root(config.workdir))
        self.accepting = True

    def _free_slots(self) -> int:
        busy = len(self._ledger.running) + len(self._ledger.unrecorded)
        return self._config.concurrency - busy

    async def run(self) -> None:
        ledger = self._ledger
        while True:
            await wait_for(ledger.wake, self._config.poll_interval)
            ledger.wake.clear()
            while self.accepting:
                limit = min(self._free_slots(), self._config.batch_size)
                if limit <= 0:
                    break
                async with ledger.claiming:
                    claimed, sent_at = await self._claim(limit)
                    counters.CLAIM_LAG.claimed(len(claimed))
                    if claimed:
                        await self._start(claimed, sent_at + self._registry.lease_secs)
                if len(claimed) < limit:
                    break

    async def _claim(self, limit: int) -> tuple[list[ClaimedJob], float]:
        loop = asyncio.get_running_loop()
        sent_at = loop.time()
        lease_secs = self._registry.lease_secs

        async def attempt(conn: psycopg.AsyncConnection) -> list[ClaimedJob]:
            nonlocal sent_at
            sent_at = loop.time()
            return await jobs.claim_and_start(
                conn,
                self._config.worker_id,
                limit,
                kinds=self._config.kinds,
                agents=self._config.agents,
                lease_secs=lease_secs,
            )

        claimed = await self._db.retry("claim", attempt)
        return claimed, sent_at

    async def _start(self, claimed: list[ClaimedJob], lease_ends: float) -> None:
        """Start the agents of jobs claimed and started (their runs are open)."""
        if any(job.agent not in self._registry.agents for job in claimed):
            await self._db.retry("reload", self._registry.reload)
        for job in claimed:
            assert job.run_id is not None, "claim_and_start opens a run per job"
            agent = self._registry.agents[job.agent]
            # Fields are formatted only if the line is written.
            log.debug("job.started", job=job.id, run=job.run_id, agent=agent.name)
            if isinstance(job.payload, UndecodableJSON):
                log.warning("job.undecodable_payload", job=job.id, run=job.run_id)
                failed = RunResult(
                    outcome=Outcome.FAILED,
                    error=f"job.payload is {job.payload}; the agent was not started",
                )
                self._recorder.record(FinishedRun(job.run_id, job.id, failed))
                continue
            if agent.adapter is Adapter.NOOP:
                self._recorder.record(FinishedRun(job.run_id, job.id, run_noop()))
                continue
            held = Held(job, job.run_id, lease_ends, StopRequest())
            self._ledger.running[job.id] = held
            held.task = asyncio.create_task(
                run_held(
                    held,
                    agent,
                    directories=self._directories,
                    forge_root=self._forge_root,
                    database=self._db,
                    ledger=self._ledger,
                    recorder=self._recorder,
                )
            )
