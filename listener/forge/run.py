"""Running one forge job (discover, plan, implement): checkout, prompt, agent, delivery, cleanup.

The runner (listener/daemon/producer/runner.py) hands a claimed forge job here with a
function that runs its agent; this module wraps that call:

1. reads the job's issue reference, its tracked repo and the forge settings
   (one query);
2. fetches the issue and its comments with the runner's token, and clones the
   repo's default branch into a fresh per-run workspace on the branch
   `ceaseless/<job id>` (checkout.py);
3. runs the agent in the checkout with the prompt of prompt.py;
4. for an implement run that succeeded, asks the forge for the pull request
   from that branch (delivery.py);
5. removes the workspace, or keeps it when the run did not succeed and the
   setting forge_keep_failed_workspaces is true.

Guarantees:
- the API URL, the clone URL and the default branch are the tracked repo's
  the job came from (the one of its owner's that it names by forge, owner and
  repo), never the job's payload; a job that names no such repo fails with
  the reason and nothing is fetched, cloned or sent anywhere; the branch is
  always `ceaseless/<job id>`;
- a token goes only to the origins its source is bound to (tokens.py): the
  API's for the REST calls, the clone URL's for git; and none at all for a
  repo whose tracked_repo.tokens_allowed is false (its failures say so);
- a preparation that fails (the database, the forge or git unreachable, a
  token source or the forge root unusable, no tracked repo) is a failed run
  with the reason, retried per the job's policy; the agent does not start;
- a stop (cancel, lease lost, shutdown) during preparation ends it at once,
  git included, and the agent never starts;
- the workspace is `<forge root>/<job id>/<run id>` (workspace.py), outside
  the task workspace root: a retry never reuses a checkout a failed attempt
  left, and every path of this function removes the workspace unless it keeps
  it on purpose (logged with its path);
- no token reaches a log line or a run's error: the client and checkout scrub
  their messages, and nothing here formats a token.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from uuid import UUID

import psycopg

from listener import log
from listener.agents.base import RunResult
from listener.agents.environment import Identity
from listener.agents.sandbox import Isolation
from listener.database.pool import Database
from listener.enums import Outcome
from listener.forge import delivery
from listener.forge.checkout import CheckoutError, branch_for, prepare_checkout, remove_workspace
from listener.forge.client import ForgeClient, ForgeError, ForgeRepo
from listener.forge.prompt import Assignment, compose, fetch_issue
from listener.forge.tokens import TokenSourceError, not_allowed_hint, tokens_for
from listener.forge.workspace import ForgeRootError, hand_over, job_directory
from listener.queries.forge_runs import ForgeRunContext, forge_run_context
from listener.queries.jobs import ClaimedJob

# Deadline of each forge call the runner makes (issue, comments, pull request).
FORGE_TIMEOUT = 30.0

T = TypeVar("T")
# Runs the job's agent with this prompt in this directory.
Invoke = Callable[[str, str], Awaitable[RunResult]]


class PreparationFailed(Exception):
    """The job cannot run: its message is the run's error (never a token)."""


class Stopped(Exception):
    """The listener asked the job to stop while it was being prepared."""


@dataclass(frozen=True)
class _Target:
    """Where a forge run works: the repo, its issue, the branches, the tokens and the policy."""

    repo: ForgeRepo
    number: int
    clone_url: str
    default_branch: str
    branch: str
    token: str | None  # for the API (repo.api_url)
    git_token: str | None  # for git (clone_url)
    keep_failed: bool
    # Why the run is anonymous, when the repo may not use the tokens.
    not_allowed: str | None = None


async def run_forge_job(
    job: ClaimedJob,
    run_id: UUID,
    *,
    root: Path,
    database: Database,
    stop: asyncio.Event,
    invoke: Invoke,
) -> RunResult:
    """The run's result, with the pull request the forge reports for an implement run.

    `root` is the forge root (--forge-root), where the run's checkout is made.
    """
    workspace: Path | None = None
    keep = False
    result: RunResult | None = None
    try:
        target = await _target(job, database)
        keep = target.keep_failed
        identity = await _lane_user(job)
        workspace = await _workspace(root, job, run_id, identity)
        prompt = await _until_stopped(stop, _prepare(job, target, workspace, identity))
        result = await _deliver(job, target, await invoke(prompt, str(workspace)))
    except PreparationFailed as exc:
        log.warning("forge.prepare_failed", job=str(job.id), run=str(run_id), error=str(exc))
        result = RunResult(outcome=Outcome.FAILED, error=f"preparing the forge job failed: {exc}")
    except Stopped:
        result = RunResult(outcome=Outcome.CANCELLED, error="stopped before the agent started")
    finally:
        # Also when the agent's call raised (an adapter bug): no checkout is left behind
        # unless it is kept on purpose. None: the forge root was refused, nothing was made.
        failed = result is None or not _succeeded(job.kind, result)
        if workspace is not None:
            await _clean_up(workspace, job, run_id, keep=keep and failed)
    return result


async def _lane_user(job: ClaimedJob) -> Identity | None:
    """The OS user the job's lane runs as (None: the listener's own), made on first use."""
    try:
        return await asyncio.to_thread(Isolation.current().identity_for, job.agent)
    except (OSError, subprocess.SubprocessError) as exc:
        raise PreparationFailed(f"the OS user of lane {job.agent!r} is unusable: {exc}") from None


async def _workspace(root: Path, job: ClaimedJob, run_id: UUID, identity: Identity | None) -> Path:
    try:
        return await asyncio.to_thread(job_directory, root, job.id, identity) / str(run_id)
    except ForgeRootError as exc:
        raise PreparationFailed(str(exc)) from None


async def _deliver(job: ClaimedJob, target: _Target, result: RunResult) -> RunResult:
    """The result with the forge's pull request (implement runs that succeeded), else none."""
    if job.kind != "implement" or result.outcome is not Outcome.SUCCEEDED:
        result.pull_request = None  # never the agent's word for it
        return result
    async with ForgeClient(target.repo, target.token, timeout=FORGE_TIMEOUT) as client:
        return await delivery.settle(
            result,
            kind=job.kind,
            client=client,
            forge=target.repo.forge,
            owner=target.repo.owner,
            repo=target.repo.repo,
            branch=target.branch,
            base=target.default_branch,
        )


def _succeeded(kind: str, result: RunResult) -> bool:
    """Whether the run did what it was for, as far as the listener can tell."""
    if result.outcome is not Outcome.SUCCEEDED:
        return False
    return kind != "implement" or result.pull_request is not None


async def _target(job: ClaimedJob, database: Database) -> _Target:
    try:
        context = await database.once(
            "forge_run_context", lambda conn: forge_run_context(conn, job.id)
        )
    except psycopg.OperationalError as exc:
        raise PreparationFailed(f"the database could not be read: {exc}") from None
    if context is None:
        raise PreparationFailed("the job is gone")
    return _target_of(job, context)


def _target_of(job: ClaimedJob, context: ForgeRunContext) -> _Target:
    forge, owner, name, number = context.forge, context.owner, context.repo, context.number
    if forge is None or owner is None or name is None or number is None:
        raise PreparationFailed("the job names no issue (job.forge, owner, repo and number)")
    api_url, clone_url, branch = context.api_url, context.clone_url, context.default_branch
    if context.repo_id is None or api_url is None or clone_url is None or branch is None:
        raise PreparationFailed(
            f"the job names {forge} {owner}/{name}, which is not a tracked repo of its owner "
            f"{context.user_id}: a forge job runs only against the tracked repo it came from "
            "(ceaseless.tracked_repo), never against URLs of its payload"
        )
    try:
        allowed = context.tokens_allowed
        api = tokens_for(context.token_source, forge, api_url, allowed=allowed)
        git = tokens_for(context.token_source, forge, api_url, allowed=allowed, url=clone_url)
    except TokenSourceError as exc:
        raise PreparationFailed(f"the forge token source is unusable: {exc}") from None
    return _Target(
        repo=ForgeRepo(forge, api_url, owner, name),
        number=number,
        clone_url=clone_url,
        default_branch=branch,
        branch=branch_for(job.id),
        token=api.runner,
        git_token=git.runner,
        keep_failed=context.keep_failed_workspaces,
        not_allowed=None if allowed else not_allowed_hint(forge, owner, name),
    )


async def _prepare(
    job: ClaimedJob, target: _Target, workspace: Path, identity: Identity | None
) -> str:
    """Fetch the issue, make the checkout, and return the agent's prompt."""
    try:
        async with ForgeClient(target.repo, target.token, timeout=FORGE_TIMEOUT) as client:
            issue = await fetch_issue(client, target.number)
        await prepare_checkout(
            clone_url=target.clone_url,
            default_branch=target.default_branch,
            branch=target.branch,
            directory=workspace,
            token=target.git_token,
        )
    except (ForgeError, CheckoutError) as exc:
        why = f"{exc}; {target.not_allowed}" if target.not_allowed else str(exc)
        raise PreparationFailed(why) from None
    await asyncio.to_thread(hand_over, workspace, identity)
    assignment = Assignment(
        kind=job.kind,
        job_prompt=job.prompt,
        branch=target.branch,
        base_branch=target.default_branch,
        repository=f"{target.repo.owner}/{target.repo.repo}",
    )
    return compose(assignment, issue)


async def _until_stopped(stop: asyncio.Event, work: Awaitable[T]) -> T:
    """`work`'s result, or Stopped as soon as `stop` is set (`work` is cancelled)."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    if not task.done() or task.cancelled():
        raise Stopped
    return task.result()


async def _clean_up(workspace: Path, job: ClaimedJob, run_id: UUID, *, keep: bool) -> None:
    if keep and workspace.exists():
        log.event("forge.workspace_kept", job=str(job.id), run=str(run_id), path=str(workspace))
        return
    try:
        await remove_workspace(workspace)
        with contextlib.suppress(OSError):
            workspace.parent.rmdir()  # the job's directory, once no run of it is kept
    except OSError as exc:
        log.warning(
            "forge.workspace_not_removed", job=str(job.id), path=str(workspace), error=str(exc)
        )
