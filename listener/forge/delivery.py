"""Delivery of a forge job: the pull request the forge knows of, never the one an agent names.

After a forge job's agent has ended, the runner calls `settle`: for an
implement run that succeeded it asks the forge for the pull request whose head
is the job's branch and puts it on the result, all six fields, for finish_runs
to record; finish_runs decides what a succeeded implement run without one
becomes (failed, with the reason, retried per policy).

Guarantees:
- the agent's text is never read for a pull request: whatever the adapter
  parsed from the final message is dropped for every forge kind, and only the
  forge's answer is recorded;
- a lookup the forge does not answer (an error, a timeout, a rate limit) is
  tried again a few times, then the run is failed with the reason, so the job
  is retried per policy rather than recorded as delivered unverified or failed
  for a missing pull request that may exist.
"""

from __future__ import annotations

import asyncio

from listener.agents.base import PullRequestRef, RunResult
from listener.enums import Outcome
from listener.forge.client import ForgeClient, ForgeError

# Attempts at the lookup and the pause before each retry (seconds).
LOOKUP_ATTEMPTS = 3
LOOKUP_PAUSE = 2.0


async def find_pull_request(
    client: ForgeClient, *, forge: str, owner: str, repo: str, branch: str, base: str
) -> PullRequestRef | None:
    """The pull request from `branch` into `base`, as the forge reports it, or None."""
    pull = await client.pull_by_head(branch, base)
    if pull is None:
        return None
    return PullRequestRef(
        forge=forge,
        owner=owner,
        repo=repo,
        number=pull.number,
        head_branch=pull.head_branch,
        url=pull.html_url,
    )


async def settle(
    result: RunResult,
    *,
    kind: str,
    client: ForgeClient,
    forge: str,
    owner: str,
    repo: str,
    branch: str,
    base: str,
    pause: float = LOOKUP_PAUSE,
) -> RunResult:
    """The run's result with its pull request from the forge (implement + succeeded only)."""
    result.pull_request = None
    if kind != "implement" or result.outcome is not Outcome.SUCCEEDED:
        return result
    last: ForgeError | None = None
    for attempt in range(LOOKUP_ATTEMPTS):
        if attempt:
            await asyncio.sleep(pause)
        try:
            result.pull_request = await find_pull_request(
                client, forge=forge, owner=owner, repo=repo, branch=branch, base=base
            )
            return result
        except ForgeError as exc:
            last = exc
    result.outcome = Outcome.FAILED
    result.error = (
        f"the agent succeeded, but the forge could not be asked for the pull request from "
        f"{branch} into {base} ({LOOKUP_ATTEMPTS} attempts): {last}"
    )
    return result
