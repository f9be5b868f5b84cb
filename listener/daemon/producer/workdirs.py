"""Each job's working directory: made before its agent starts, removed once the job has ended.

A task agent runs in `<workspace root>/.ceaseless-jobs/<job id>`, never in the
root itself: the root is shared by every user's and lane's jobs, and a job's
files are its own. The runner calls `prepare` before each run; the sweeper
(`sweep`, one of the listener's loops) removes directories of jobs that have
ended.

Guarantees:
- a job's directory belongs to its lane's OS user (mode 0700), is made by the
  listener itself (never through a path an agent could have swapped: every
  step is checked with lstat, below a parent the listener owns, mode 0711), and
  is the same for every attempt of the job: a retry finds what the previous
  attempt left, and a resumed session finds the directory it was started in;
- a directory left by another lane's user (the job's lane was changed) is
  emptied first: one lane never finds another's files;
- a directory goes once ended_jobs (functions/10_jobs.sql) says its
  job will not run again: within about a second of its result being recorded
  by the listener that ran it, else at the next full sweep (at startup, then
  every minute) of any listener of the same database that shares the root;
  never while this listener runs the job, and never for a job the database does
  not know (another database's listeners may share the root).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path
from uuid import UUID

from listener import log
from listener.agents.environment import Identity
from listener.agents.sandbox import Isolation
from listener.agents.users import private_directory
from listener.backoff import wait_for
from listener.config import JOB_DIRECTORIES
from listener.daemon.producer.ledger import Ledger
from listener.database.pool import Database
from listener.queries import jobs

FULL_SWEEP_SECS = 60.0
# Results recorded close together are swept together.
_BATCH_SECS = 1.0
_QUERY_IDS = 1000


class JobDirectories:
    def __init__(self, root: Path, database: Database, ledger: Ledger) -> None:
        self.root = root
        self._db = database
        self._ledger = ledger
        self._recorded: set[UUID] = set()
        # Jobs whose directory this listener made: only their recorded results
        # need a look before the next full sweep. A job run without one (a
        # noop or forge job) costs the sweep nothing.
        self._made: set[UUID] = set()
        self._wake = asyncio.Event()

    def path(self, job_id: UUID) -> Path:
        return self.root / JOB_DIRECTORIES / str(job_id)

    async def prepare(self, job_id: UUID, lane: str, isolation: Isolation) -> Path:
        """The job's directory, made (or kept from an earlier attempt) for lane `lane`'s user."""
        identity = await asyncio.to_thread(isolation.identity_for, lane)
        path = self.path(job_id)
        self._made.add(job_id)
        await asyncio.to_thread(_prepare, path, identity)
        return path

    def recorded(self, job_ids: Iterable[UUID]) -> None:
        """Results of these jobs are in the database: their jobs may have ended."""
        made = [job for job in job_ids if job in self._made]
        if made:
            self._recorded.update(made)
            self._wake.set()

    async def sweep(self) -> None:
        """Remove the directories of ended jobs, for as long as the listener runs."""
        loop = asyncio.get_running_loop()
        next_full = loop.time()
        while True:
            await wait_for(self._wake, max(0.0, next_full - loop.time()))
            self._wake.clear()
            if loop.time() >= next_full:
                candidates = await asyncio.to_thread(self._listed)
                next_full = loop.time() + FULL_SWEEP_SECS
            else:
                candidates = set()
            candidates |= self._recorded
            self._recorded = set()
            await self._remove_ended(candidates)
            await asyncio.sleep(_BATCH_SECS)

    async def _remove_ended(self, candidates: set[UUID]) -> None:
        ids = [job for job in candidates if job not in self._ledger.running]
        for start in range(0, len(ids), _QUERY_IDS):
            batch = ids[start : start + _QUERY_IDS]
            ended = await self._db.retry(
                "ended_jobs", lambda conn, batch=batch: jobs.ended_jobs(conn, batch)
            )
            # A retry may have been claimed here since the answer.
            gone = [job for job in ended if job not in self._ledger.running]
            self._made.difference_update(gone)
            # One thread hop for the batch, not one per directory.
            failed = await asyncio.to_thread(self._remove_all, gone)
            for job, error in failed:
                log.warning("job.directory_not_removed", job=str(job), error=error)

    def _remove_all(self, job_ids: list[UUID]) -> list[tuple[UUID, str]]:
        """Remove these jobs' directories; the ones that could not be removed, with why."""
        failed = []
        for job in job_ids:
            try:
                remove_tree(self.path(job))
            except OSError as exc:
                failed.append((job, str(exc)))
        return failed

    def _listed(self) -> set[UUID]:
        found: set[UUID] = set()
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.root / JOB_DIRECTORIES):
                with contextlib.suppress(ValueError):
                    found.add(UUID(entry.name))
        return found


def _prepare(path: Path, identity: Identity | None) -> None:
    uid, gid = (identity.uid, identity.gid) if identity else (os.geteuid(), os.getegid())
    # 0711: every lane's user passes through to its own directory, none lists the others.
    private_directory(path.parent, os.geteuid(), os.getegid(), mode=0o711)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if info is not None and (not stat.S_ISDIR(info.st_mode) or info.st_uid != uid):
        remove_tree(path)
    private_directory(path, uid, gid, mode=0o700)


def give_to(path: Path, identity: Identity | None) -> None:
    """Hand a directory the listener made (a forge checkout) to the lane's user, whole."""
    if identity is None or identity.uid == os.geteuid():
        return
    for directory, dirs, files in os.walk(path):
        for name in (directory, *(os.path.join(directory, n) for n in dirs + files)):
            os.lchown(name, identity.uid, identity.gid)


def remove_tree(path: Path) -> None:
    """Remove `path` and everything in it, whatever modes its agent left (symlinks not followed)."""

    def writable_and_again(function: object, name: str, _exc: object) -> None:
        # The agent made a directory read-only: we own it (or are root), so undo that.
        parent = os.path.dirname(name)
        with contextlib.suppress(OSError):
            os.chmod(parent, stat.S_IRWXU)
        if os.path.isdir(name) and not os.path.islink(name):
            with contextlib.suppress(OSError):
                os.chmod(name, stat.S_IRWXU)
            shutil.rmtree(name, onerror=writable_and_again)
        else:
            os.unlink(name)

    if not os.path.lexists(path):
        return
    if os.path.islink(path) or not os.path.isdir(path):
        os.unlink(path)
        return
    shutil.rmtree(path, onerror=writable_and_again)
