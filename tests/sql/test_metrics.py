"""metrics_snapshot() and the counting triggers (functions/94_metrics.sql).

The plan test fills the big tables with history first: a scrape must cost
what is live, not what was ever done.
"""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from listener.enums import Outcome, SkipReason, TopologyRunStatus, TriggerType
from tests.factories import (
    claim_started,
    finish,
    make_agent,
    make_job,
    make_jobs,
    make_routine,
    pause_lane,
)
from tests.sql.loops import make_loop
from tests.sql.plans import explained, nodes, statement
from tests.webhook_signing import sign

_SECRET = "a-signing-secret-of-some-length"

_BIG_TABLES = {"job", "agent_run", "routine_runs", "topology_runs", "notifications", "audit_log"}


def _snapshot(conn: psycopg.Connection) -> dict[tuple[str, str], float]:
    """{(sample, labels as sorted JSON): value}."""
    rows = conn.execute("select sample, labels, value from ceaseless.metrics_snapshot()").fetchall()
    return {(sample, json.dumps(labels, sort_keys=True)): value for sample, labels, value in rows}


def _key(sample: str, **labels: str) -> tuple[str, str]:
    return sample, json.dumps(labels, sort_keys=True)


def _history(conn: psycopg.Connection, jobs: int) -> None:
    """`jobs` delivered jobs with a finished run each, as a long-running install has."""
    conn.execute(
        "insert into ceaseless.job (kind, agent, prompt, state, finished_at, claimed_by, attempts) "
        "select 'task', 'noop', 'old', 'delivered', now() - interval '2 days', null, 1 "
        "from generate_series(1, %s)",
        (jobs,),
    )
    conn.execute(
        "insert into ceaseless.agent_run (job_id, agent, adapter, worker, attempt, outcome, "
        "  started_at, finished_at) "
        "select id, 'noop', 'noop', 'w0', 1, 'succeeded', now() - interval '2 days', "
        "       now() - interval '2 days' from ceaseless.job where state = 'delivered'"
    )
    conn.execute(
        "insert into ceaseless.notifications (source_table, source_id, kind, subject, status, "
        "  delivered_at) "
        "select 'routine_runs', gen_random_uuid(), 'success', 'old', 'delivered', now() "
        "from generate_series(1, %s)",
        (jobs,),
    )
    routine = make_routine(conn, "history")
    conn.execute(
        "insert into ceaseless.routine_runs (routine_id, trigger_type, status, completed_at) "
        "select %s, 'manual', 'ok', now() from generate_series(1, %s)",
        (routine, jobs),
    )


def test_queue_depth_and_lane_usage_by_lane(conn: psycopg.Connection) -> None:
    make_agent(conn, "noop", max_concurrent=3, window_budget=50, window_secs=600)
    make_agent(conn, "other", max_concurrent=2)
    make_jobs(conn, 5)
    make_job(conn, run_after=datetime.now(UTC) + timedelta(hours=1))
    make_jobs(conn, 2, agent="other")
    claim_started(conn, limit=2)
    pause_lane(conn, "other", datetime.now(UTC) + timedelta(minutes=5))

    snap = _snapshot(conn)

    assert snap[_key("ceaseless_jobs", lane="noop", state="pending")] == 4
    assert snap[_key("ceaseless_jobs", lane="noop", state="running")] == 2
    assert snap[_key("ceaseless_jobs", lane="noop", state="claimed")] == 0
    assert snap[_key("ceaseless_jobs", lane="other", state="pending")] == 2
    assert snap[_key("ceaseless_jobs_due", lane="noop")] == 3
    assert snap[_key("ceaseless_lane_live_runs", lane="noop")] == 2
    assert snap[_key("ceaseless_lane_max_concurrent", lane="noop")] == 3
    assert snap[_key("ceaseless_lane_window_started_runs", lane="noop")] == 2
    assert snap[_key("ceaseless_lane_window_budget", lane="noop")] == 50
    assert _key("ceaseless_lane_window_budget", lane="other") not in snap  # unlimited
    assert snap[_key("ceaseless_lane_paused", lane="other")] == 1
    assert snap[_key("ceaseless_lane_paused", lane="noop")] == 0
    assert snap[_key("ceaseless_oldest_due_job_age_seconds", lane="noop")] >= 0


def test_finished_runs_count_by_outcome_with_a_duration_histogram(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    make_jobs(conn, 3)
    runs = list(claim_started(conn, limit=3).values())
    conn.execute(
        "update ceaseless.agent_run set started_at = now() - interval '2 minutes' where id = %s",
        (runs[2],),
    )
    finish(conn, runs[0], "succeeded")
    finish(conn, runs[1], "failed", error="boom")
    finish(conn, runs[2], "succeeded")

    snap = _snapshot(conn)

    assert snap[_key("ceaseless_agent_runs_total", lane="noop", outcome="succeeded")] == 2
    assert snap[_key("ceaseless_agent_runs_total", lane="noop", outcome="failed")] == 1
    buckets = {
        json.loads(labels)["le"]: value
        for (sample, labels), value in snap.items()
        if sample == "ceaseless_agent_run_duration_seconds_bucket"
    }
    # Cumulative: the two quick runs under 0.25 s and up; the slow one from 300 s.
    assert buckets["0.25"] == 2
    assert buckets["60"] == 2
    assert buckets["300"] == 3
    assert buckets["+Inf"] == 3
    assert snap[_key("ceaseless_agent_run_duration_seconds_count", lane="noop")] == 3
    assert snap[_key("ceaseless_agent_run_duration_seconds_sum", lane="noop")] >= 120


def test_fold_moves_deltas_into_totals_and_changes_no_number(conn: psycopg.Connection) -> None:
    make_agent(conn)
    for _ in range(3):
        make_jobs(conn, 2)
        for run in claim_started(conn, limit=2).values():
            finish(conn, run, "succeeded")
    before = _snapshot(conn)
    # Six finish statements of one run each: a count, a bucket and a sum each.
    assert conn.execute("select count(*) from ceaseless.metric_deltas").fetchone() == (18,)

    folded = conn.execute("select ceaseless._metrics_fold()").fetchone()

    assert folded == (18,)
    assert conn.execute("select count(*) from ceaseless.metric_deltas").fetchone() == (0,)
    assert _snapshot(conn) == before
    assert before[_key("ceaseless_agent_runs_total", lane="noop", outcome="succeeded")] == 6


def _webhook(conn: psycopg.Connection, body: bytes) -> str | None:
    """Fire the `deploys` webhook routine; the SQLSTATE of a refusal, kept as a skipped run."""
    ts = int(datetime.now(UTC).timestamp())
    row = conn.execute(
        "select refused_sqlstate from ceaseless._receive_webhook('deploys', %s, %s, %s)",
        (body, sign(_SECRET, ts, body), datetime.fromtimestamp(ts, UTC)),
    ).fetchone()
    assert row is not None
    return row[0]


def test_routine_fires_and_skips_count_by_routine_and_reason(conn: psycopg.Connection) -> None:
    make_agent(conn)
    hook = make_routine(conn, "hook", "webhook", {"path": "deploys", "secret": _SECRET})
    other = make_routine(conn, "other")
    assert _webhook(conn, b"first") is None
    conn.execute("update ceaseless.routines set cooldown_secs = 600, last_run_at = now()")
    assert _webhook(conn, b"second") == "CE411"

    snap = _snapshot(conn)

    assert snap[_key("ceaseless_routine_fires_total", trigger="webhook")] == 1
    refused = {"routine": "hook", "routine_id": str(hook), "trigger": "webhook"}
    assert snap[_key("ceaseless_routine_skips_total", **refused, reason="cooldown")] == 1
    assert snap[_key("ceaseless_routine_skips_total", **refused, reason="concurrency")] == 0
    untouched = {"routine": "other", "routine_id": str(other), "trigger": "manual"}
    assert snap[_key("ceaseless_routine_skips_total", **untouched, reason="cooldown")] == 0
    assert snap[_key("ceaseless_routine_runs_running")] == 1


def test_a_fire_refused_after_insert_counts_under_its_routine(conn: psycopg.Connection) -> None:
    """A run updated to skipped (a later step refused it) is counted by the update trigger."""
    make_agent(conn)
    routine = make_routine(conn, "late")
    run = conn.execute(
        "insert into ceaseless.routine_runs (routine_id, trigger_type) values (%s, 'manual') "
        "returning id",
        (routine,),
    ).fetchone()
    assert run is not None
    conn.execute(
        "update ceaseless.routine_runs set status = 'skipped', skip_reason = 'concurrency', "
        "completed_at = now() where id = %s",
        (run[0],),
    )

    labels = {"routine": "late", "routine_id": str(routine), "trigger": "manual"}
    assert (
        _snapshot(conn)[_key("ceaseless_routine_skips_total", **labels, reason="concurrency")] == 1
    )


def test_every_counter_label_set_is_served_at_zero_from_the_start(
    conn: psycopg.Connection,
) -> None:
    """Before anything ran: every lane's outcomes, every trigger type, every routine's refusal
    reasons, every loop ending and every sink, at 0 (the value lists are the CHECK lists,
    which listener/enums.py mirrors)."""
    make_agent(conn, "noop")
    routine = make_routine(conn, "nightly", "cron", {"schedule": "0 3 * * *"})
    conn.execute(
        "update ceaseless.settings set value = %s where key = 'notification_sinks'",
        (json.dumps({"ops": {"type": "pg", "channel": "ops_alerts"}}),),
    )

    snap = _snapshot(conn)

    expected = (
        [_key("ceaseless_agent_runs_total", lane="noop", outcome=o) for o in Outcome]
        + [_key("ceaseless_routine_fires_total", trigger=t) for t in TriggerType]
        + [
            _key(
                "ceaseless_routine_skips_total",
                routine="nightly",
                routine_id=str(routine),
                trigger="cron",
                reason=r,
            )
            for r in SkipReason
        ]
        + [
            _key("ceaseless_loop_iterations_total", status=s)
            for s in ("succeeded", "failed", "cancelled", "skipped")
        ]
        + [
            _key(f"ceaseless_notifications_{what}_total", channel=c)
            for what in ("delivered", "failed")
            for c in ("default", "ops")
        ]
        + [
            _key("ceaseless_agent_run_duration_seconds_count", lane="noop"),
            _key("ceaseless_agent_run_duration_seconds_sum", lane="noop"),
        ]
    )
    assert {k: snap.get(k) for k in expected} == dict.fromkeys(expected, 0)
    # The final statuses are every status a topology run ends in.
    assert {"succeeded", "failed", "cancelled", "skipped"} == set(TopologyRunStatus) - {
        "pending",
        "running",
        "awaiting_approval",
    }


def test_histogram_buckets_are_all_there_in_numeric_order_for_every_lane(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, "noop")
    make_agent(conn, "idle")
    make_jobs(conn, 1)
    runs = list(claim_started(conn, limit=1).values())
    conn.execute(
        "update ceaseless.agent_run set started_at = now() - interval '20 minutes' where id = %s",
        (runs[0],),
    )
    finish(conn, runs[0], "succeeded")
    bounds = [
        "0.05", "0.25", "1", "5", "15", "60", "300", "900", "1800", "3600", "10800", "+Inf",
    ]  # fmt: skip

    rows = conn.execute(
        "select sample, labels from ceaseless.metrics_snapshot() "
        "where family = 'ceaseless_agent_run_duration_seconds'"
    ).fetchall()
    rows_by_lane: dict[str, list[tuple[str, dict[str, str]]]] = {}
    for sample, labels in rows:
        rows_by_lane.setdefault(labels["lane"], []).append((sample, labels))

    # One label set after the other, each: its buckets by numeric le, then _count and _sum.
    assert [lane for lane, _ in itertools.groupby(r[1]["lane"] for r in rows)] == ["idle", "noop"]
    for lane, samples in rows_by_lane.items():
        names = [sample.rsplit("_", 1)[1] for sample, _ in samples]
        assert names == ["bucket"] * len(bounds) + ["count", "sum"], lane
        assert [labels["le"] for _, labels in samples[: len(bounds)]] == bounds, lane
    snap = _snapshot(conn)
    assert snap[_key("ceaseless_agent_run_duration_seconds_bucket", lane="noop", le="900")] == 0
    assert snap[_key("ceaseless_agent_run_duration_seconds_bucket", lane="noop", le="1800")] == 1
    assert snap[_key("ceaseless_agent_run_duration_seconds_bucket", lane="idle", le="+Inf")] == 0


def test_blocked_jobs_are_a_gauge_by_lane(conn: psycopg.Connection) -> None:
    make_agent(conn, "noop")
    make_agent(conn, "other")
    make_jobs(conn, 3)
    runs = list(claim_started(conn, limit=3).values())
    assert finish(conn, runs[0], "needs_human") == "blocked"
    assert finish(conn, runs[1], "auth_failed") == "blocked"
    finish(conn, runs[2], "succeeded")

    snap = _snapshot(conn)

    assert snap[_key("ceaseless_jobs_blocked", lane="noop")] == 2
    assert snap[_key("ceaseless_jobs_blocked", lane="other")] == 0


def test_each_routine_serves_the_time_of_its_last_success(conn: psycopg.Connection) -> None:
    make_agent(conn)
    daily = make_routine(conn, "daily")
    never = make_routine(conn, "never")
    conn.execute(
        "insert into ceaseless.routine_runs (routine_id, trigger_type, status, started_at, "
        "  completed_at) values "
        "(%(r)s, 'manual', 'ok', '2026-01-01 00:00Z', '2026-01-01 00:05Z'), "
        "(%(r)s, 'manual', 'ok', '2026-01-02 00:00Z', '2026-01-02 00:05Z'), "
        "(%(r)s, 'manual', 'failed', '2026-01-03 00:00Z', '2026-01-03 00:05Z'), "
        "(%(n)s, 'manual', 'failed', '2026-01-03 00:00Z', '2026-01-03 00:05Z')",
        {"r": daily, "n": never},
    )

    snap = _snapshot(conn)

    last = datetime(2026, 1, 2, 0, 5, tzinfo=UTC).timestamp()
    series = "ceaseless_routine_last_success_timestamp_seconds"
    assert snap[_key(series, routine="daily", routine_id=str(daily))] == last
    assert _key(series, routine="never", routine_id=str(never)) not in snap


def test_notifications_delivered_and_failed_by_channel(conn: psycopg.Connection) -> None:
    ids = [
        row[0]
        for row in conn.execute(
            "insert into ceaseless.notifications (source_table, source_id, kind, subject) "
            "select 'routine_runs', gen_random_uuid(), 'failure', 's' "
            "from generate_series(1, 3) returning id"
        ).fetchall()
    ]
    conn.execute(
        "update ceaseless.notifications set status = 'delivered', delivered_at = now() "
        "where id = any(%s)",
        (ids[:2],),
    )
    conn.execute("update ceaseless.notifications set status = 'failed' where id = %s", (ids[2],))

    snap = _snapshot(conn)

    assert snap[_key("ceaseless_notifications_delivered_total", channel="default")] == 2
    assert snap[_key("ceaseless_notifications_failed_total", channel="default")] == 1
    assert snap[_key("ceaseless_notifications_pending")] == 0


def test_the_relay_backlog_is_a_gauge(conn: psycopg.Connection, db_url: str) -> None:
    make_agent(conn)
    assert _snapshot(conn)[_key("ceaseless_announcements_waiting")] == 0
    assert _snapshot(conn)[_key("ceaseless_oldest_announcement_age_seconds")] == 0
    with psycopg.connect(db_url, autocommit=True, options="-c ceaseless.notify=relay") as writer:
        for _ in range(2):
            writer.execute(
                "insert into ceaseless.job (kind, agent, prompt) values ('task', 'noop', 'x')"
            )
    conn.execute("update ceaseless.announcements set created_at = now() - interval '90 s'")

    snap = _snapshot(conn)

    assert snap[_key("ceaseless_announcements_waiting")] == 2
    assert 90 <= snap[_key("ceaseless_oldest_announcement_age_seconds")] < 120


def test_user_role_transactions_count_too(conn: psycopg.Connection, login_role: Any) -> None:
    """The triggers fire in a user role's transaction and write what it may not."""
    make_agent(conn)
    alice = login_role("alice")
    who = alice.execute("select current_user").fetchone()
    assert who is not None
    routine = make_routine(alice, user_id=who[0])
    alice.execute("select ceaseless.run_routine(%s)", (routine,))

    assert _snapshot(conn)[_key("ceaseless_routine_fires_total", trigger="manual")] == 1


def test_a_scrape_reads_indexes_not_history(conn: psycopg.Connection) -> None:
    """The snapshot's plan: no Seq Scan of a big table, however much history."""
    make_agent(conn)
    make_agent(conn, "other")
    _history(conn, 20_000)
    make_jobs(conn, 50)
    claim_started(conn, limit=5)
    conn.execute("analyze")

    # The statement inside the function, as the listener's scrape runs it (a function with
    # a SET clause is not inlined, so its own statement is the one to read).
    with explained(conn) as plans:
        conn.execute("select * from ceaseless.metrics_snapshot()").fetchall()
    tree = nodes(statement(plans, "with families"))
    read = {n.get("Relation Name") for n in tree if "Relation Name" in n}
    assert {"job", "agent_run"} <= read
    seq = {n["Relation Name"] for n in tree if n["Node Type"] == "Seq Scan"}
    assert not seq & _BIG_TABLES, seq


def test_the_upgrade_keeps_run_counters_under_lane_and_recounts_refusals_by_routine(
    conn: psycopg.Connection,
) -> None:
    """db/0055 on an install that counted under the old labels: no run counter restarts, and
    the refusals kept as skipped runs are counted again under their routine or loop."""
    make_agent(conn)
    routine = make_routine(conn, "hook")
    conn.execute(
        "insert into ceaseless.routine_runs (routine_id, trigger_type, status, skip_reason, "
        "  completed_at) "
        "select %s, 'webhook', 'skipped', 'cooldown', now() from generate_series(1, 3)",
        (routine,),
    )
    loop = make_loop(conn, title="tidy")
    conn.execute("select ceaseless.run_loop(%s)", (loop,))
    conn.execute("select ceaseless.run_loop(%s)", (loop,))  # refused: an iteration is live
    conn.execute("delete from ceaseless.metric_deltas")
    old_totals = [
        ("ceaseless_agent_runs_total", {"agent": "noop", "outcome": "failed"}, 7),
        ("ceaseless_agent_run_duration_seconds_bucket", {"agent": "noop", "le": "1"}, 7),
        ("ceaseless_agent_run_duration_seconds_sum", {"agent": "noop"}, 2.5),
        ("ceaseless_routine_skips_total", {"trigger": "webhook", "reason": "cooldown"}, 5),
    ]
    for metric, labels, value in old_totals:
        conn.execute(
            "insert into ceaseless.metric_totals (metric, labels, value) values (%s, %s, %s)",
            (metric, json.dumps(labels), value),
        )
    migration = Path(__file__).parents[2] / "db" / "0055_metrics_lane_label_and_refusals.sql"
    with conn.transaction():
        conn.execute(
            "drop index ceaseless.job_blocked_idx, ceaseless.routine_runs_last_ok_idx, "
            "ceaseless.routine_runs_skipped_idx"
        )
        conn.execute(migration.read_text())  # type: ignore[call-overload]

    snap = _snapshot(conn)

    assert snap[_key("ceaseless_agent_runs_total", lane="noop", outcome="failed")] == 7
    assert snap[_key("ceaseless_agent_run_duration_seconds_bucket", lane="noop", le="1")] == 7
    assert snap[_key("ceaseless_agent_run_duration_seconds_sum", lane="noop")] == 2.5
    labels = {"routine": "hook", "routine_id": str(routine), "trigger": "webhook"}
    assert snap[_key("ceaseless_routine_skips_total", **labels, reason="cooldown")] == 3
    loop_labels = {"loop": "tidy", "loop_id": str(loop), "trigger": "manual"}
    assert snap[_key("ceaseless_loop_skips_total", **loop_labels, reason="live_iteration")] == 1
    assert not [key for key in snap if '"agent"' in key[1]]
    assert _key("ceaseless_routine_skips_total", trigger="webhook", reason="cooldown") not in snap
