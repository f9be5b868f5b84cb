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
    if channel == RUN_CHANNEL and data.get("id"):
        return _run_changed(data)
    return Unknown(channel, payload)


def _run_changed(data: dict) -> RunChanged:
    table = data.get("table", "")
    key = UUID(data["id"])
    if table == "loops":
        return RunChanged(table, None, key, data.get("status", ""))
    run = UUID(data["run_id"]) if table == "approvals" and data.get("run_id") else key
    loop = UUID(data["loop_id"]) if data.get("loop_id") else None
    return RunChanged(table, run, loop, data.get("status", ""))
