"""Row factories with state-consistent defaults, so a test names only what it is about."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg

# The timeout of an agent that a test lets time out after it has started
# something (a child, a session line): long enough for a loaded machine to start
# the keeper and the fake and let it write, which took more than 1 s under CI.
STARTED_AGENT_TIMEOUT_SECS = 5


def make_agent(
    conn: psycopg.Connection,
    name: str = "noop",
    adapter: str = "noop",
    argv: list[str] | None = None,
    **columns: Any,
) -> str:
    values: dict[str, Any] = {"name": name, "adapter": adapter, "argv": argv or [], **columns}
    if "env" in values:
        values["env"] = json.dumps(values["env"])
    names = ", ".join(values)
    marks = ", ".join(["%s"] * len(values))
    conn.execute(f"insert into ceaseless.agents ({names}) values ({marks})", list(values.values()))
    return name


def pause_lane(
    conn: psycopg.Connection, agent: str, until: datetime, reason: str | None = "rate limit"
) -> None:
    """Pause a lane as a rate limit (or an operator) does: a row in lane_pauses."""
    conn.execute(
        "insert into ceaseless.lane_pauses (agent, paused_until, reason) values (%s, %s, %s)",
        (agent, until, reason),
    )


def make_job(
    conn: psycopg.Connection, agent: str = "noop", kind: str = "task", **columns: Any
) -> UUID:
    values: dict[str, Any] = {"agent": agent, "kind": kind, "prompt": "do the thing", **columns}
    if "payload" in values:
        values["payload"] = json.dumps(values["payload"])
    names = ", ".join(values)
    marks = ", ".join(["%s"] * len(values))
    row = conn.execute(
        f"insert into ceaseless.job ({names}) values ({marks}) returning id", list(values.values())
    ).fetchone()
    assert row is not None
    return row[0]


def make_jobs(
    conn: psycopg.Connection, count: int, agent: str = "noop", kind: str = "task"
) -> None:
    conn.execute(
        "insert into ceaseless.job (kind, agent, prompt) "
        "select %s, %s, 'job ' || g from generate_series(1, %s) g",
        (kind, agent, count),
    )


def ended_long_ago(conn: psycopg.Connection, state: str = "delivered", days: int = 40) -> UUID:
    """A job that was created and ended in `state` `days` days ago, as retention sees one."""
    job = make_job(conn)
    conn.execute(
        "update ceaseless.job set state = %s, "
        "created_at = now() - make_interval(days => %s), "
        "finished_at = now() - make_interval(days => %s) where id = %s",
        (state, days, days, job),
    )
    return job


def job_state(conn: psycopg.Connection, job_id: UUID) -> str:
    row = conn.execute("select state from ceaseless.job where id = %s", (job_id,)).fetchone()
    assert row is not None
    return row[0]


def claim(conn: psycopg.Connection, worker: str = "w1", limit: int = 10, **kw: Any) -> list[UUID]:
    args = ", ".join(f"{k} => %({k})s" for k in kw)
    rows = conn.execute(
        f"select id from ceaseless.claim_jobs(%(worker)s, %(limit)s{', ' + args if args else ''})",
        {"worker": worker, "limit": limit, **kw},
    ).fetchall()
    return [row[0] for row in rows]


def claim_started(
    conn: psycopg.Connection, worker: str = "w1", limit: int = 10, **kw: Any
) -> dict[UUID, UUID]:
    """Claim and start as a listener does (claim_jobs with p_start): {job id: run id}."""
    args = "".join(f", {k} => %({k})s" for k in kw)
    rows = conn.execute(
        f"select id, run_id from ceaseless.claim_jobs(%(worker)s, %(limit)s, "
        f"p_start => true{args})",
        {"worker": worker, "limit": limit, **kw},
    ).fetchall()
    return dict(rows)


def finish(
    conn: psycopg.Connection, run_id: UUID, outcome: str, worker: str = "w1", **fields: Any
) -> str:
    payload = json.dumps([{"run_id": str(run_id), "outcome": outcome, **fields}], default=str)
    row = conn.execute(
        "select job_state from ceaseless.finish_runs(%s, %s::jsonb)", (worker, payload)
    ).fetchone()
    assert row is not None
    return row[0]


def make_routine(
    conn: psycopg.Connection,
    name: str = "r1",
    trigger_type: str = "manual",
    trigger_config: dict[str, Any] | None = None,
    action_type: str = "lightweight",
    action_config: dict[str, Any] | None = None,
    agent: str = "noop",
    **columns: Any,
) -> UUID:
    values: dict[str, Any] = {
        "name": name,
        "user_id": columns.pop("user_id", "alice"),
        "trigger_type": trigger_type,
        "trigger_config": json.dumps(trigger_config or {}),
        "action_type": action_type,
        "action_config": json.dumps(
            action_config
            if action_config is not None
            else (
                {"prompt": "check"}
                if action_type == "lightweight"
                else {"title": "t", "description": "d"}
            )
        ),
        "agent": agent,
        "cooldown_secs": columns.pop("cooldown_secs", 0),
        **columns,
    }
    names = ", ".join(values)
    marks = ", ".join(["%s"] * len(values))
    row = conn.execute(
        f"insert into ceaseless.routines ({names}) values ({marks}) returning id",
        list(values.values()),
    ).fetchone()
    assert row is not None
    return row[0]


def run_of(conn: psycopg.Connection, run_id: UUID) -> dict[str, Any]:
    cur = conn.execute("select * from ceaseless.routine_runs where id = %s", (run_id,))
    row = cur.fetchone()
    assert row is not None and cur.description is not None
    return {col.name: value for col, value in zip(cur.description, row, strict=True)}


def complete_job(
    conn: psycopg.Connection, job_id: UUID, outcome: str, message: str | None = None
) -> str:
    """Drive a job through claim (and start) → finish as listener w1 would."""
    conn.execute(
        "update ceaseless.job set run_after = now() - interval '1 second' where id = %s", (job_id,)
    )
    runs = claim_started(conn, limit=100)
    assert job_id in runs
    return finish(conn, runs[job_id], outcome, final_message=message)
