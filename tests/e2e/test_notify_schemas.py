"""Every NOTIFY payload the system sends matches its channel's schema.

The schemas: listener/notify_schemas.json, documented in docs/notify.md.

A connection LISTENs on every channel while a real listener works through a
scenario that touches each kind of change: jobs in bulk and alone, agent runs,
routines (manual, cron and a backfill), a loop's iterations, a gated run
approved and one skipped at its expiry, a loop disabled, configuration
changes, notifications queued and delivered through a `pg` sink. Every
payload received is validated; the test also requires each channel, and each
`table` of ceaseless_run, to have been heard, so a schema that nothing
exercises cannot pass unnoticed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any
from uuid import UUID

import jsonschema
import psycopg
import pytest

from listener import enums
from tests.e2e.support import ListenerProcess, wait_until
from tests.factories import make_agent, make_job, make_jobs, make_routine
from tests.sql.loops import loop_row, make_loop
from tests.sql.topology import graph, node, run_row, start_run

SCHEMAS = json.loads((Path(__file__).parents[2] / "listener" / "notify_schemas.json").read_text())
CHANNELS = [
    "ceaseless_job",
    "ceaseless_run",
    "ceaseless_schedule",
    "ceaseless_config",
    "ceaseless_notification",
]
SINK_CHANNEL = "ops_alerts"
RUN_TABLES = {"agent_run", "routine_runs", "topology_runs", "topology_nodes", "approvals", "loops"}


def _validator(name: str) -> jsonschema.protocols.Validator:
    schema = {**SCHEMAS, "$ref": f"#/$defs/{name}"}
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _schema_of(channel: str) -> str:
    return "notification_sink_pg" if channel == SINK_CHANNEL else channel


def _scenario(conn: psycopg.Connection) -> None:
    conn.execute(
        "update ceaseless.settings set value = %s where key = 'notification_sinks'",
        (json.dumps({"default": {"type": "pg", "channel": SINK_CHANNEL}}),),
    )
    # Jobs: a bulk insert (a grouped payload), one alone, one cancelled.
    make_jobs(conn, 30)
    later = make_job(conn, run_after=datetime.now(UTC) + timedelta(hours=1))
    conn.execute("select ceaseless.cancel_job(%s)", (later,))

    # Routines: a manual fire that notifies on success, and a cron routine.
    routine = make_routine(
        conn, "report", notify_on_success=True, notify_user="carol", action_type="lightweight"
    )
    conn.execute("select ceaseless.run_routine(%s)", (routine,))
    tick = make_routine(conn, "tick", "cron", {"schedule": "0 3 * * *"})
    # Two of its past slots backfilled.
    conn.execute(
        "select * from ceaseless.backfill_routine(%s, now() - interval '2 days', now())", (tick,)
    )

    # A loop of two iterations that stops itself; a cron loop, disabled.
    loop = make_loop(
        conn,
        g=graph([node("A", "answer")]),
        triggers={"on_completion": True},
        policy={"kind": "iters", "spec": {"n": 2}},
    )
    conn.execute("select ceaseless.run_loop(%s)", (loop,))
    cron_loop = make_loop(conn, g=graph([node("A", "answer")]), triggers={"cron": "0 4 * * *"})
    conn.execute("update ceaseless.loops set enabled = false where id = %s", (cron_loop,))

    # A gated run, approved.
    run = start_run(conn, graph([node("A", "answer", gate="approval")]))
    wait_until(
        lambda: (
            conn.execute(
                "select count(*) from ceaseless.approvals where topology_run_id = %s", (run,)
            ).fetchone()
            == (1,)
        ),
        30,
        "the gate never asked",
    )
    conn.execute(
        "select ceaseless.decide_approval(id, true, 'carol', 'go') from ceaseless.approvals "
        "where topology_run_id = %s",
        (run,),
    )

    # A gated node nobody answers, skipped at its expiry: the node after it runs.
    skipped = start_run(
        conn,
        graph(
            [node("A", "answer", gate="approval", approval_timeout_secs=1, on_expiry="skip"),
             node("B", "answer")],
            [("A", "B")],
        ),
    )  # fmt: skip

    wait_until(lambda: loop_row(conn, loop)["stopped_reason"] is not None, 30, "loop never ended")
    wait_until(lambda: run_row(conn, run)["status"] == "succeeded", 30, "gated run never ended")
    wait_until(
        lambda: run_row(conn, skipped)["status"] == "succeeded", 30, "skipping run never ended"
    )
    wait_until(
        lambda: (
            conn.execute(
                "select count(*) from ceaseless.job "
                "where state in ('pending', 'claimed', 'running')"
            ).fetchone()
            == (0,)
        ),
        30,
        "jobs never drained",
    )
    wait_until(
        lambda: (
            conn.execute(
                "select count(*) from ceaseless.notifications where status = 'pending'"
            ).fetchone()
            == (0,)
        ),
        30,
        "the outbox never settled",
    )


def test_every_payload_of_every_channel_matches_its_schema(
    conn: psycopg.Connection, db_url: str, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(conn, "noop", max_concurrent=50)
    make_agent(
        conn, "answer", "command", ["sh", "-c", "cat > /dev/null; printf answer"], max_concurrent=5
    )
    with psycopg.connect(db_url, autocommit=True) as listening:
        for channel in [*CHANNELS, SINK_CHANNEL]:
            listening.execute(f"listen {channel}")
        start_listener("--poll-interval", "2")
        _scenario(conn)
        received = [
            (n.channel, n.payload) for n in listening.notifies(timeout=2.0, stop_after=100_000)
        ]

    validators = {name: _validator(_schema_of(name)) for name in [*CHANNELS, SINK_CHANNEL]}
    problems = []
    for channel, payload in received:
        for error in validators[channel].iter_errors(json.loads(payload)):
            problems.append(f"{channel} {payload}: {error.message}")
    assert not problems, "\n".join(problems[:20])

    heard = {channel for channel, _ in received}
    assert heard == {*CHANNELS, SINK_CHANNEL}, heard
    tables = {json.loads(p)["table"] for c, p in received if c == "ceaseless_run"}
    assert tables == RUN_TABLES, tables
    # Both shapes of a grouped payload: one row by id, several by count.
    jobs = [json.loads(p) for c, p in received if c == "ceaseless_job"]
    assert any(j["id"] is None and j["count"] == 30 for j in jobs)
    assert any(j["id"] is not None for j in jobs)


_MIRRORED: list[tuple[str, str, type[StrEnum], tuple[Any, ...]]] = [
    ("ceaseless_job", "state", enums.JobState, ()),
    ("ceaseless_job", "kind", enums.JobKind, ()),
    ("run_routine_runs", "status", enums.RoutineRunStatus, ()),
    ("run_topology_runs", "status", enums.TopologyRunStatus, ()),
    ("run_topology_nodes", "status", enums.TopologyNodeState, ()),
    ("run_agent_run", "status", enums.Outcome, ("running",)),
    ("run_approvals", "status", enums.ApprovalDecision, ("pending",)),
    ("run_loops", "stopped_reason", enums.LoopStoppedReason, (None,)),
    ("notification_sink_pg", "kind", enums.NotificationKind, ()),
]


@pytest.mark.parametrize(("schema", "field", "enum", "extra"), _MIRRORED)
def test_schema_enums_match_the_python_enums(
    schema: str, field: str, enum: type[StrEnum], extra: tuple[Any, ...]
) -> None:
    """The schemas list what the CHECK constraints allow (mirrored by listener/enums.py)."""
    listed = SCHEMAS["$defs"][schema]["properties"][field]["enum"]
    assert set(listed) == {e.value for e in enum} | set(extra)


def test_a_payload_with_an_undocumented_field_is_refused() -> None:
    """The schemas are closed: a field added in SQL and not here fails the scenario above."""
    payload = {"table": "routines", "id": str(UUID(int=1)), "extra": 1}
    assert list(_validator("ceaseless_schedule").iter_errors(payload))
    assert not list(
        _validator("ceaseless_schedule").iter_errors({"table": "routines", "id": str(UUID(int=1))})
    )
