"""The recorder: sessions and results into the database, in batches, until they are there.

Guarantees:
- a session an agent reports is sent to note_sessions as soon as the recorder
  is free, so a job rescued after this listener dies can resume it;
- a result stays in the ledger's `unrecorded` until finish_runs has answered
  for it; calls are retried with backoff, and retrying is safe (a repeated
  finish of a result already recorded is answered as recorded);
- a result the database refuses (its run was ended by someone else: a lease
  sweep, a cancel) is logged with the reason; the database keeps it apart in
  late_results and never writes it onto the closed run;
- a result the database cannot store at all (an error that is not a lost
  connection: a value out of range, a check it breaks) costs only its own
  run: the batch is split until the result is alone, and that run is then
  recorded as failed with the database's reason instead; if even that is
  refused, it is logged and left to the lease sweep. The recorder never
  stops on such a result, and the other results of its batch are recorded;
- `drain` is for shutdown: it keeps trying until the given moment and returns
  what it could not record, so the caller can name it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from uuid import UUID

import psycopg

from listener import log
from listener.agents.base import RunResult
from listener.daemon.producer.ledger import Ledger
from listener.database.pool import Database
from listener.enums import Outcome
from listener.queries import jobs
from listener.queries.jobs import FinishedRun

_BATCH = 2000


class Recorder:
    def __init__(
        self,
        database: Database,
        worker: str,
        ledger: Ledger,
        *,
        on_recorded: Callable[[Iterable[UUID]], None] | None = None,
    ) -> None:
        self._db = database
        self._worker = worker
        self._ledger = ledger
        # Told the jobs of each batch finish_runs answered (their directories may go).
        self._on_recorded = on_recorded
        self._sessions: dict[UUID, str] = {}
        self._wake = asyncio.Event()

    def record(self, finished: FinishedRun) -> None:
        self._ledger.unrecorded[finished.job_id] = finished
        self._wake.set()

    def note_session(self, run_id: UUID, session_id: str) -> None:
        self._sessions[run_id] = session_id
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._flush(give_up_at=None)

    async def drain(self, give_up_at: float) -> list[FinishedRun]:
        """Record what is left, trying until loop time `give_up_at`; returns what was not."""
        try:
            await self._flush(give_up_at)
        except psycopg.OperationalError as exc:
            log.warning("recorder.gave_up", error=str(exc).strip())
        return list(self._ledger.unrecorded.values())

    async def _flush(self, give_up_at: float | None) -> None:
        if self._sessions:
            sessions, self._sessions = self._sessions, {}
            try:
                await self._db.retry(
                    "note_sessions",
                    lambda conn: jobs.note_sessions(conn, self._worker, sessions),
                    give_up_at=give_up_at,
                )
            except psycopg.OperationalError:
                # Shutdown ran out of time: the results below matter more.
                self._sessions = {**sessions, **self._sessions}
        while self._ledger.unrecorded:
            batch = list(self._ledger.unrecorded.values())[:_BATCH]
            answers = await self._finish(batch, give_up_at)
            self._settle(batch, answers)
            if self._on_recorded is not None:
                self._on_recorded(finished.job_id for finished in batch)
            self._ledger.wake.set()

    async def _finish(
        self, batch: list[FinishedRun], give_up_at: float | None
    ) -> list[jobs.Finished]:
        """finish_runs for the batch; a refused batch is split until the refused result is alone.

        Raises only OperationalError (the database away past `give_up_at`).
        """
        try:
            return await self._db.retry(
                "finish_runs",
                lambda conn: jobs.finish_runs(conn, self._worker, batch),
                give_up_at=give_up_at,
            )
        except psycopg.OperationalError:
            raise
        except psycopg.Error as exc:
            if len(batch) > 1:
                half = len(batch) // 2
                return [
                    *await self._finish(batch[:half], give_up_at),
                    *await self._finish(batch[half:], give_up_at),
                ]
            return await self._finish_unstorable(batch[0], exc, give_up_at)

    async def _finish_unstorable(
        self, finished: FinishedRun, exc: psycopg.Error, give_up_at: float | None
    ) -> list[jobs.Finished]:
        reason = f"{exc.sqlstate}: {(exc.diag.message_primary or str(exc)).strip()}"
        log.warning(
            "run.result_unstorable",
            job=str(finished.job_id),
            run=str(finished.run_id),
            error=reason,
        )
        failed = FinishedRun(
            finished.run_id,
            finished.job_id,
            RunResult(
                outcome=Outcome.FAILED,
                exit_status=finished.result.exit_status,
                error=f"the agent's result could not be stored ({reason[:500]}); "
                "the run is recorded as failed instead",
            ),
        )
        try:
            return await self._db.retry(
                "finish_runs",
                lambda conn: jobs.finish_runs(conn, self._worker, [failed]),
                give_up_at=give_up_at,
            )
        except psycopg.OperationalError:
            raise
        except psycopg.Error as again:
            log.event(
                "run.result_dropped",
                logging.ERROR,
                job=str(finished.job_id),
                run=str(finished.run_id),
                error=f"{again.sqlstate}: {(again.diag.message_primary or str(again)).strip()}",
                left_to="the lease sweep",
            )
            return []

    def _settle(self, batch: list[FinishedRun], answers: list[jobs.Finished]) -> None:
        answered = {answer.run_id: answer for answer in answers}
        for finished in batch:
            self._ledger.unrecorded.pop(finished.job_id, None)
            answer = answered.get(finished.run_id)
            if answer is None:
                log.warning(
                    "run.result_unanswered",
                    job=str(finished.job_id),
                    run=str(finished.run_id),
                    outcome=str(finished.result.outcome),
                )
            elif not answer.recorded:
                log.warning(
                    "run.result_refused",
                    job=str(finished.job_id),
                    run=str(finished.run_id),
                    outcome=str(finished.result.outcome),
                    reason=answer.refusal,
                    kept_in="ceaseless.late_results",
                )
