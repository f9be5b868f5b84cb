"""Typed NOTIFY payloads and the channels they arrive on.

The database sends small JSON documents of ids and states (functions/25_notify_audit.sql);
this module turns them into dataclasses so the daemon routes each kind to exactly
one handler and never digs through raw dicts.

Guarantees: `parse` never raises. Any role that can connect can NOTIFY any
channel with any text, so a payload that is not what our functions send (not
JSON, nested too deep, a field of the wrong type) is an `Unknown` event, which
no handler acts on: a forged message costs its sender one ignored event, never
a part of the listener.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from uuid import UUID

JOB_CHANNEL = "ceaseless_job"
RUN_CHANNEL = "ceaseless_run"
SCHEDULE_CHANNEL = "ceaseless_schedule"
CONFIG_CHANNEL = "ceaseless_config"


@dataclass(frozen=True)
class JobChanged:
    """One job (id set) or a group of `count` jobs of one kind moved to `state`."""

    id: UUID | None
    count: int
    kind: str | None
    agent: str | None
    state: str
    old_state: str | None


@dataclass(frozen=True)
class ConfigChanged:
    table: str


@dataclass(frozen=True)
class ScheduleChanged:
    """A cron-bearing row needs its next_fire_at (re)computed."""

    table: str
    id: UUID


@dataclass(frozen=True)
class NotificationQueued:
    count: int


@dataclass(frozen=True)
class RunChanged:
    """A topology run, one of its nodes or approvals, or a loop changed (ceaseless_run).

    `run_id` is the run concerned (None for a loop's own change); `loop_id` the
    loop, when the payload names it (a run's changes do, its nodes' do not).
    """

    table: str
    run_id: UUID | None
    loop_id: UUID | None
    status: str


@dataclass(frozen=True)
class Unknown:
    channel: str
    payload: str


NOTIFICATION_CHANNEL = "ceaseless_notification"

Event = JobChanged | ConfigChanged | ScheduleChanged | NotificationQueued | RunChanged | Unknown


def parse(channel: str, payload: str) -> Event:
    try:
        data = json.loads(payload)
        if not isinstance(data, dict):
            return Unknown(channel, payload)
        return _parse(channel, data) or Unknown(channel, payload)
    except (ValueError, TypeError, RecursionError):
        return Unknown(channel, payload)


def _text(data: dict, key: str, default: str | None = None) -> str | None:
    """A string field (or the default when absent); TypeError for any other JSON type."""
    value = data.get(key, default)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{key} is not a string")
    return value


def _uuid(data: dict, key: str) -> UUID | None:
    value = _text(data, key)
    return UUID(value) if value else None


def _count(data: dict) -> int:
    value = data.get("count", 1)
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError("count is not an integer")
    return value


def _parse(channel: str, data: dict) -> Event | None:
    if channel == JOB_CHANNEL:
        return JobChanged(
            id=_uuid(data, "id"),
            count=_count(data),
            kind=_text(data, "kind"),
            agent=_text(data, "agent"),
            state=_text(data, "state", "") or "",
            old_state=_text(data, "old_state"),
        )
    if channel == CONFIG_CHANNEL:
        return ConfigChanged(table=_text(data, "table", "") or "")
    if channel == SCHEDULE_CHANNEL and (key := _uuid(data, "id")):
        return ScheduleChanged(table=_text(data, "table", "") or "", id=key)
    if channel == NOTIFICATION_CHANNEL:
        return NotificationQueued(count=_count(data))
    if channel == RUN_CHANNEL and (key := _uuid(data, "id")):
        return _run_changed(data, key)
    return None


def _run_changed(data: dict, key: UUID) -> RunChanged:
    table = _text(data, "table", "") or ""
    status = _text(data, "status", "") or ""
    if table == "loops":
        return RunChanged(table, None, key, status)
    run = (_uuid(data, "run_id") or key) if table == "approvals" else key
    return RunChanged(table, run, _uuid(data, "loop_id"), status)
