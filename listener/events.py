"""Typed NOTIFY payloads and the channels they arrive on.

The database sends small JSON documents of ids and states (functions/30_notify_audit.sql);
this module turns them into dataclasses so the daemon routes each kind to exactly
one handler and never digs through raw dicts.
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
class Unknown:
    channel: str
    payload: str


NOTIFICATION_CHANNEL = "ceaseless_notification"

Event = JobChanged | ConfigChanged | ScheduleChanged | NotificationQueued | Unknown


def parse(channel: str, payload: str) -> Event:
    try:
        data = json.loads(payload)
    except ValueError:
        return Unknown(channel, payload)
    if channel == JOB_CHANNEL:
        raw_id = data.get("id")
        return JobChanged(
            id=UUID(raw_id) if raw_id else None,
            count=int(data.get("count", 1)),
            kind=data.get("kind"),
            agent=data.get("agent"),
            state=data.get("state", ""),
            old_state=data.get("old_state"),
        )
    if channel == CONFIG_CHANNEL:
        return ConfigChanged(table=data.get("table", ""))
    if channel == SCHEDULE_CHANNEL and data.get("id"):
        return ScheduleChanged(table=data.get("table", ""), id=UUID(data["id"]))
    if channel == NOTIFICATION_CHANNEL:
        return NotificationQueued(count=int(data.get("count", 1)))
    return Unknown(channel, payload)
