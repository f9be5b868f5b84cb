"""Refused routine fires made visible: routine_status's refusals of the last hour
(functions/90_views.sql) and the per-routine refusal counter (functions/94_metrics.sql).

A webhook delivery refused by the default guardrails (cooldown_secs 300, max_concurrent 1) is
answered 409 and GitHub does not redeliver it: these are where an operator sees it happened.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import psycopg

from listener.enums import LoopSkipReason
from tests.factories import make_agent, make_routine
from tests.sql.loops import make_loop
from tests.webhook_signing import sign

_SECRET = "a-signing-secret-of-some-length"


def _deliver(conn: psycopg.Connection, body: bytes) -> str | None:
    """One delivery to /hooks/deploys; the SQLSTATE it was refused with, if it was."""
    ts = int(datetime.now(UTC).timestamp())
    row = conn.execute(
        "select refused_sqlstate from ceaseless._receive_webhook('deploys', %s, %s, %s)",
        (body, sign(_SECRET, ts, body), datetime.fromtimestamp(ts, UTC)),
    ).fetchone()
    assert row is not None
    return row[0]


def _status(conn: psycopg.Connection, routine: UUID) -> dict[str, Any] | None:
    cur = conn.execute(
        "select skips_1h, skips_24h, last_skip_reason, last_skipped_at "
        "from ceaseless.routine_status where id = %s",
        (routine,),
    )
    row = cur.fetchone()
    if row is None:
        return None
    assert cur.description is not None
    return {col.name: value for col, value in zip(cur.description, row, strict=True)}


def _webhook_routine(conn: psycopg.Connection, owner: str = "alice") -> UUID:
    """A webhook routine with the guardrails a routine gets when it names none."""
    make_agent(conn)
    routine = make_routine(
        conn, "deploys", "webhook", {"path": "deploys", "secret": _SECRET}, user_id=owner
    )
    conn.execute(
        "update ceaseless.routines set cooldown_secs = default, max_concurrent = default "
        "where id = %s",
        (routine,),
    )
    return routine


def test_a_second_delivery_refused_by_the_default_guardrails_shows_in_routine_status(
    conn: psycopg.Connection,
) -> None:
    routine = _webhook_routine(conn)
    assert _deliver(conn, b"first") is None
    assert _deliver(conn, b"second") is not None
    reason = conn.execute(
        "select skip_reason from ceaseless.routine_runs where status = 'skipped'"
    ).fetchone()
    assert reason is not None

    status = _status(conn, routine)

    assert status is not None
    assert status["skips_1h"] == 1
    assert status["last_skip_reason"] == reason[0]
    assert status["last_skipped_at"] is not None


def test_refusals_older_than_an_hour_leave_the_hourly_count(conn: psycopg.Connection) -> None:
    routine = _webhook_routine(conn)
    conn.execute(
        "insert into ceaseless.routine_runs (routine_id, trigger_type, status, skip_reason, "
        "  started_at, completed_at) values "
        "(%(r)s, 'webhook', 'skipped', 'cooldown', now() - interval '2 hours', now()), "
        "(%(r)s, 'webhook', 'skipped', 'concurrency', now() - interval '90 minutes', now()), "
        "(%(r)s, 'webhook', 'skipped', 'dedup', now() - interval '3 hours', now())",
        {"r": routine},
    )

    status = _status(conn, routine)

    assert status is not None
    assert status["skips_1h"] == 0
    assert status["skips_24h"] == 3
    assert status["last_skip_reason"] == "concurrency"


def test_a_routine_without_refusals_shows_none(conn: psycopg.Connection) -> None:
    routine = _webhook_routine(conn)
    assert _deliver(conn, b"first") is None
    assert _status(conn, routine) == {
        "skips_1h": 0,
        "skips_24h": 0,
        "last_skip_reason": None,
        "last_skipped_at": None,
    }


def test_a_user_sees_the_refusals_of_their_own_routines_only(
    conn: psycopg.Connection, login_role: Any
) -> None:
    alice = login_role("alice")
    bob = login_role("bob")
    who = alice.execute("select current_user").fetchone()
    assert who is not None
    routine = _webhook_routine(conn, owner=who[0])
    assert _deliver(conn, b"first") is None
    assert _deliver(conn, b"second") is not None

    mine = _status(alice, routine)
    assert mine is not None and mine["skips_1h"] == 1
    assert _status(bob, routine) is None


def test_a_refused_delivery_counts_under_its_routine_for_prometheus(
    conn: psycopg.Connection,
) -> None:
    routine = _webhook_routine(conn)
    assert _deliver(conn, b"first") is None
    assert _deliver(conn, b"second") is not None

    rows = conn.execute(
        "select labels, value from ceaseless.metrics_snapshot() "
        "where sample = 'ceaseless_routine_skips_total' and value > 0"
    ).fetchall()

    assert len(rows) == 1
    labels, value = rows[0]
    assert value == 1
    assert labels["routine"] == "deploys"
    assert labels["routine_id"] == str(routine)
    assert labels["trigger"] == "webhook"
    assert labels["reason"] in {"cooldown", "concurrency"}


def test_a_refused_loop_fire_counts_under_its_loop_and_each_trigger_it_has_starts_at_zero(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    loop = make_loop(conn, triggers={"on_completion": True}, title="nightly tidy")
    conn.execute("select ceaseless.run_loop(%s)", (loop,))
    conn.execute("select ceaseless.run_loop(%s)", (loop,))  # refused: an iteration is live

    rows = conn.execute(
        "select labels, value from ceaseless.metrics_snapshot() "
        "where sample = 'ceaseless_loop_skips_total'"
    ).fetchall()
    counted = {(labels["trigger"], labels["reason"]): value for labels, value in rows}

    assert {labels["loop"] for labels, _ in rows} == {"nightly tidy"}
    assert {labels["loop_id"] for labels, _ in rows} == {str(loop)}
    # Manual and on_completion are this loop's triggers; cron and webhook are off.
    assert counted == {
        (trigger, reason.value): 1.0 if (trigger, reason) == ("manual", "live_iteration") else 0.0
        for trigger in ("manual", "on_completion")
        for reason in LoopSkipReason
    }
