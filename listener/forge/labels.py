"""Label mirroring: a forge job's state shown as a label on its issue, by a separate identity.

`labels_due` says which jobs' issues should now carry which label (and which
label to take off); this module writes that to the forge with the LABEL
token (the `label_env` identity of forge_token_source, never the runner's)
and reports back with `labels_synced`, or `labels_sync_failed`, which sets
when it is tried again.

Guarantees:
- labels are written, never read: nothing here looks at an issue's labels;
- a failed sync never touches the job's state, only its sync bookkeeping,
  and is retried when the database says;
- `labels_synced` carries the job's updated_at as labels_due read it, so a
  job that moved on meanwhile is still due (the database compares);
- every change has a deadline, and one repo or job failing never stops the
  others' changes;
- no token in a log line or a recorded error.
"""

from __future__ import annotations

from typing import Any

from listener import log
from listener.database.pool import Database
from listener.forge.client import ForgeClient, NoToken, each_per_repo
from listener.forge.poller import utcnow
from listener.forge.tokens import TokenSourceError, not_allowed_hint, tokens_for
from listener.queries import forge_loops as queries
from listener.queries.forge_loops import LabelChange

DEFAULT_LABEL_TIMEOUT = 30.0


async def sync_labels(
    database: Database,
    token_source: dict[str, Any],
    limit: int,
    *,
    timeout: float = DEFAULT_LABEL_TIMEOUT,
) -> int:
    """Mirror up to `limit` due label changes; returns how many the forge took."""
    changes = await database.once("labels_due", lambda c: queries.labels_due(c, utcnow(), limit))

    async def synced(change: LabelChange, _: None) -> None:
        await database.once(
            "labels_synced",
            lambda c: queries.labels_synced(
                c, change.job_id, change.add_label, change.job_updated_at, utcnow()
            ),
        )
        log.event(
            "forge.label_synced",
            repo=f"{change.owner}/{change.repo}",
            number=change.number,
            job=str(change.job_id),
            label=change.add_label,
            removed=change.remove_label,
        )

    return await each_per_repo(
        changes,
        lambda change: _label_token(token_source, change),
        _change_label,
        doing="the label change",
        timeout=timeout,
        done=synced,
        failed=lambda change, error: _failed(database, change, error),
    )


def _label_token(token_source: dict[str, Any], first: LabelChange) -> str:
    try:
        tokens = tokens_for(token_source, first.forge, first.api_url, allowed=first.tokens_allowed)
    except TokenSourceError as exc:
        raise NoToken(f"the label token could not be read: {exc}") from None
    if tokens.labels is None:
        # Never the runner's token instead: labels are the other identity's.
        raise NoToken(
            "no label token is configured (forge_token_source: label_env or file)"
            if first.tokens_allowed
            else not_allowed_hint(first.forge, first.owner, first.repo)
        )
    return tokens.labels


async def _change_label(client: ForgeClient, change: LabelChange) -> None:
    if change.remove_label is not None:
        await client.remove_label(change.number, change.remove_label)
    await client.add_label(change.number, change.add_label)


async def _failed(database: Database, change: LabelChange, error: str) -> None:
    retry_at = await database.once(
        "labels_sync_failed",
        lambda c: queries.labels_sync_failed(c, change.job_id, error, utcnow()),
    )
    log.warning(
        "forge.label_sync_failed",
        repo=f"{change.owner}/{change.repo}",
        number=change.number,
        job=str(change.job_id),
        error=error,
        retry_at=retry_at,
    )
