"""Firing routines through SQL: guardrails, events, manual runs, outcomes flowing back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID

import psycopg
import pytest

from tests.factories import complete_job, make_agent, make_routine, run_of
from tests.sql.plans import explained, nodes


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=100)


def _manual(conn: psycopg.Connection, routine: UUID) -> dict[str, object]:
    row = conn.execute("select ceaseless.run_routine(%s)", (routine,)).fetchone()
    assert row is not None
    return run_of(conn, row[0])


def _event(
    conn: psycopg.Connection, content: str, user: str = "alice", channel: str | None = None
) -> int:
    row = conn.execute(
        "insert into ceaseless.events (user_id, channel, content) values (%s, %s, %s) "
        "returning fired_count",
        (user, channel, content),
    ).fetchone()
    assert row is not None
    return row[0]


def _runs(conn: psycopg.Connection, routine: UUID) -> list[tuple[str, str | None]]:
    return [
        (r[0], r[1])
        for r in conn.execute(
            "select status, skip_reason from ceaseless.routine_runs where routine_id = %s "
            "order by started_at, created_at",
            (routine,),
        ).fetchall()
    ]


def test_manual_run_creates_a_running_run_and_its_job(conn: psycopg.Connection) -> None:
    routine = make_routine(conn)
    run = _manual(conn, routine)
    assert run["status"] == "running" and run["trigger_type"] == "manual"
    job = conn.execute(
        "select kind, state, routine_run_id, expects_reply from ceaseless.job where id = %s",
        (run["job_id"],),
    ).fetchone()
    assert job == ("routine", "pending", run["id"], True)


def test_manual_run_ignores_cooldown_but_respects_max_concurrent(
    conn: psycopg.Connection,
) -> None:
    routine = make_routine(conn, cooldown_secs=3600, max_concurrent=1)
    conn.execute("update ceaseless.routines set last_run_at = now() where id = %s", (routine,))
    assert _manual(conn, routine)["status"] == "running"
    second = _manual(conn, routine)
    assert (second["status"], second["skip_reason"]) == ("skipped", "concurrency")


def test_event_fires_matching_routines_of_that_user_only(conn: psycopg.Connection) -> None:
    mine = make_routine(
        conn, "mine", "event", {"pattern": "deploy (failed|broken)"}, max_concurrent=5
    )
    channel = make_routine(conn, "ci-only", "event", {"pattern": "deploy", "channel": "CI"})
    make_routine(conn, "other-user", "event", {"pattern": "deploy"}, user_id="bob")
    make_routine(conn, "no-match", "event", {"pattern": "^never$"})
    assert _event(conn, "the deploy failed at noon", channel="ci") == 2
    assert _runs(conn, mine) == [("running", None)]
    assert _runs(conn, channel) == [("running", None)]
    # The channel-bound routine ignores another channel; the unbound one fires.
    assert _event(conn, "deploy broken", channel="chat") == 1
    assert _runs(conn, mine) == [("running", None), ("running", None)]


def test_event_in_cooldown_is_dropped_and_recorded(conn: psycopg.Connection) -> None:
    routine = make_routine(
        conn, trigger_type="event", trigger_config={"pattern": "x"}, cooldown_secs=600
    )
    conn.execute("update ceaseless.routines set last_run_at = now() where id = %s", (routine,))
    assert _event(conn, "x") == 0
    assert _runs(conn, routine) == [("skipped", "cooldown")]


def test_dedup_window_drops_an_identical_event(conn: psycopg.Connection) -> None:
    routine = make_routine(
        conn,
        trigger_type="event",
        trigger_config={"pattern": "alert"},
        dedup_window_secs=600,
        max_concurrent=5,
    )
    assert _event(conn, "alert: disk full") == 1
    assert _event(conn, "alert: disk full") == 0
    assert _event(conn, "alert: cpu hot") == 1
    assert _runs(conn, routine) == [("running", None), ("skipped", "dedup"), ("running", None)]


def test_global_cap_on_running_routine_runs(conn: psycopg.Connection) -> None:
    conn.execute("update ceaseless.settings set value = '2' where key = 'routine_max_running'")
    routines = [make_routine(conn, f"r{i}") for i in range(3)]
    statuses = [_manual(conn, r)["skip_reason"] for r in routines]
    assert statuses == [None, None, "global_cap"]


def test_disabled_routine_is_not_fired_by_events(conn: psycopg.Connection) -> None:
    make_routine(conn, trigger_type="event", trigger_config={"pattern": "x"}, enabled=False)
    assert _event(conn, "x") == 0


def test_lightweight_routine_ok_reply_closes_the_run_ok(conn: psycopg.Connection) -> None:
    routine = make_routine(conn)
    run = _manual(conn, routine)
    assert complete_job(conn, run["job_id"], "succeeded", "ROUTINE_OK") == "delivered"
    done = run_of(conn, run["id"])
    assert done["status"] == "ok" and done["completed_at"] is not None
    row = conn.execute(
        "select run_count, consecutive_failures, last_run_at is not null, "
        "state->>'last_status' from ceaseless.routines where id = %s",
        (routine,),
    ).fetchone()
    assert row == (1, 0, True, "ok")


def test_lightweight_other_reply_is_attention_with_summary_and_notification(
    conn: psycopg.Connection,
) -> None:
    routine = make_routine(conn, notify_channel="ops", notify_user="carol")
    run = _manual(conn, routine)
    complete_job(conn, run["job_id"], "succeeded", "The disk is 97% full.")
    done = run_of(conn, run["id"])
    assert (done["status"], done["result_summary"]) == ("attention", "The disk is 97% full.")
    note = conn.execute(
        "select kind, channel, recipient, body from ceaseless.notifications where source_id = %s",
        (run["id"],),
    ).fetchone()
    assert note == ("attention", "ops", "carol", "The disk is 97% full.")


def test_lightweight_empty_reply_is_retried_twice_then_failed(conn: psycopg.Connection) -> None:
    routine = make_routine(conn)
    run = _manual(conn, routine)
    job = run["job_id"]
    assert complete_job(conn, job, "succeeded", "") == "pending"
    conn.execute("update ceaseless.job set run_after = now() where id = %s", (job,))
    assert complete_job(conn, job, "succeeded", "   ") == "pending"
    conn.execute("update ceaseless.job set run_after = now() where id = %s", (job,))
    assert complete_job(conn, job, "succeeded", None) == "failed"
    assert run_of(conn, run["id"])["status"] == "failed"
    outcomes = conn.execute(
        "select outcome, error from ceaseless.agent_run where job_id = %s", (job,)
    ).fetchall()
    assert outcomes == [("failed", "the agent's reply was empty")] * 3
    failures = conn.execute(
        "select consecutive_failures from ceaseless.routines where id = %s", (routine,)
    ).fetchone()
    assert failures == (1,)


def test_full_job_routine_gets_max_turns_and_ends_with_its_job(conn: psycopg.Connection) -> None:
    routine = make_routine(
        conn,
        action_type="full_job",
        action_config={"title": "Tidy", "description": "Tidy the repo.", "max_iterations": 7},
    )
    run = _manual(conn, routine)
    job = conn.execute(
        "select max_turns, prompt, expects_reply from ceaseless.job where id = %s", (run["job_id"],)
    ).fetchone()
    assert job == (7, "Tidy\n\nTidy the repo.", False)
    complete_job(conn, run["job_id"], "succeeded", "done")
    assert run_of(conn, run["id"])["status"] == "ok"


def test_cancelled_job_fails_its_routine_run(conn: psycopg.Connection) -> None:
    routine = make_routine(conn, action_type="full_job")
    run = _manual(conn, routine)
    conn.execute("select ceaseless.cancel_job(%s)", (run["job_id"],))
    assert run_of(conn, run["id"])["status"] == "failed"


def test_cron_fire_defers_a_cooldown_to_its_end(conn: psycopg.Connection) -> None:
    routine = make_routine(conn, trigger_type="manual", cooldown_secs=600)
    now = datetime.now(UTC)
    finished = now - timedelta(seconds=100)
    # A cron routine whose last run ended 100 s ago: cooling down for 500 s more.
    conn.execute(
        "update ceaseless.routines set trigger_type = 'cron', "
        'trigger_config = \'{"schedule": "* * * * *"}\', last_run_at = %s where id = %s',
        (finished, routine),
    )
    conn.execute(
        "update ceaseless.routines set next_fire_at = %s where id = %s",
        (now - timedelta(seconds=1), routine),
    )
    rows = conn.execute(
        "select status, skip_reason, next_fire_at from ceaseless.fire_cron("
        "array['routine'], %s, %s, %s, %s)",
        ([routine], [now + timedelta(minutes=1)], [0], now),
    ).fetchall()
    assert rows == [("skipped", "cooldown", finished + timedelta(seconds=600))]


def test_event_matching_probes_the_key_index_whatever_the_number_of_routines(
    conn: psycopg.Connection,
) -> None:
    # A thousand routines for the event's user and five thousand for others,
    # on a table without statistics, as right after a user creates them.
    conn.execute(
        "insert into ceaseless.routines (name, user_id, agent, trigger_type, trigger_config, "
        "action_type, action_config) "
        "select 'r' || g, case when g <= 1000 then 'alice' else 'user' || g end, 'noop', "
        "'event', jsonb_build_object('pattern', 'alert-' || g || ' '), 'lightweight', "
        '\'{"prompt": "p"}\' from generate_series(1, 6000) g'
    )
    with explained(conn) as plans:
        assert _event(conn, "alert-7 on host 3") == 1

    read = {}
    for plan in plans:
        for node in nodes(plan["Plan"]):
            if node.get("Relation Name") == "routines":
                index = node.get("Index Name", node["Node Type"])
                rows = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
                read[index] = read.get(index, 0) + rows * node.get("Actual Loops", 1)
    assert read.get("routines_event_key_idx", 0) >= 1, read
    # The candidates, the routine fired and its lock: a handful of rows, not
    # the user's thousand.
    assert sum(read.values()) < 20, read
