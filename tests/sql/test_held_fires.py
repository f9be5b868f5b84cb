"""Overlap policies and debounce through SQL, for routines and loops, with p_now pinned:
held fires (buffer_one, buffer_all and its bound, debounce windows) and fire_held, which
starts them through the one firing path; cancel_other and allow_all; bad input; who sees
held fires."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
import pytest

from tests.factories import complete_job, make_agent, make_routine
from tests.sql.loops import iterations, live, make_loop, run_loop, runs, succeed
from tests.sql.plans import explained, nodes
from tests.webhook_signing import sign

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=100)


def _event(conn: psycopg.Connection, content: str, at: datetime, user: str = "alice") -> None:
    conn.execute(
        "insert into ceaseless.events (user_id, content, created_at) values (%s, %s, %s)",
        (user, content, at),
    )


def _held(conn: psycopg.Connection, target: UUID) -> list[dict[str, Any]]:
    cur = conn.execute(
        "select * from ceaseless.held_fires where routine_id = %s or loop_id = %s order by seq",
        (target, target),
    )
    assert cur.description is not None
    names = [c.name for c in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def _fire_held(conn: psycopg.Connection, at: datetime) -> list[tuple[str, str | None]]:
    return [
        (r[0], r[1])
        for r in conn.execute(
            "select status, skip_reason from ceaseless.fire_held(%s)", (at,)
        ).fetchall()
    ]


def _routine_runs(conn: psycopg.Connection, routine: UUID) -> list[dict[str, Any]]:
    cur = conn.execute(
        "select * from ceaseless.routine_runs where routine_id = %s order by created_at, id",
        (routine,),
    )
    assert cur.description is not None
    names = [c.name for c in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def _running(conn: psycopg.Connection, routine: UUID) -> list[dict[str, Any]]:
    return [r for r in _routine_runs(conn, routine) if r["status"] == "running"]


def _event_routine(conn: psycopg.Connection, **columns: Any) -> UUID:
    return make_routine(conn, "watch", "event", {"pattern": "deploy"}, **columns)


# --- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("columns", "field", "rule"),
    [
        ({"overlap_policy": "queue"}, "overlap_policy", "must be one of skip, buffer_one"),
        ({"debounce_secs": -5}, "debounce_secs", "must be a positive number of seconds"),
        ({"debounce_secs": 0}, "debounce_secs", "must be a positive number of seconds"),
        ({"debounce_secs": 30, "debounce_max_secs": 10}, "debounce_max_secs", "at least"),
        ({"debounce_max_secs": 10}, "debounce_max_secs", "needs debounce_secs"),
    ],
)
def test_bad_flow_controls_are_refused_at_insert_naming_field_rule_and_value(
    conn: psycopg.Connection, columns: dict[str, Any], field: str, rule: str
) -> None:
    for table, make in (("routines", make_routine), ("loops", make_loop)):
        with pytest.raises(psycopg.Error) as error:
            make(conn, **columns)
        assert error.value.sqlstate == "CE422"
        message = str(error.value)
        assert f"{table}.{field}" in message and rule in message
        value = columns.get(field)
        assert json.dumps(value) in message


def test_a_loop_refuses_allow_all_saying_why(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as error:
        make_loop(conn, overlap_policy="allow_all")
    assert error.value.sqlstate == "CE422"
    assert "loops.overlap_policy" in str(error.value) and "one chain" in str(error.value)


def test_the_named_checks_hold_the_rules_for_a_writer_past_the_trigger(
    conn: psycopg.Connection,
) -> None:
    routine = make_routine(conn)
    conn.execute("alter table ceaseless.routines disable trigger routines_validate")
    with pytest.raises(psycopg.errors.CheckViolation) as error:
        conn.execute(
            "update ceaseless.routines set debounce_secs = 10, debounce_max_secs = 5 where id = %s",
            (routine,),
        )
    assert error.value.diag.constraint_name == "routines_debounce_max_at_least_secs"


def test_overlap_buffer_max_is_a_bounded_setting(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as error:
        conn.execute("update ceaseless.settings set value = '0' where key = 'overlap_buffer_max'")
    assert error.value.sqlstate == "CE422"


# --- routines ----------------------------------------------------------------------------


def test_skip_records_a_refused_fire_as_skipped(conn: psycopg.Connection) -> None:
    routine = _event_routine(conn, max_concurrent=1)
    _event(conn, "deploy 1", T0)
    _event(conn, "deploy 2", T0 + timedelta(seconds=1))
    assert [(r["status"], r["skip_reason"]) for r in _routine_runs(conn, routine)] == [
        ("running", None),
        ("skipped", "concurrency"),
    ]
    assert _held(conn, routine) == []


def test_buffer_one_keeps_the_newest_refused_fire_and_starts_it_when_the_run_ends(
    conn: psycopg.Connection,
) -> None:
    routine = _event_routine(conn, max_concurrent=1, overlap_policy="buffer_one")
    for i in range(3):
        _event(conn, f"deploy {i}", T0 + timedelta(seconds=i))
    [first] = _routine_runs(conn, routine)
    [held] = _held(conn, routine)
    assert (held["reason"], held["blocked_by"], held["fire_at"]) == (
        "buffered",
        "concurrency",
        None,
    )
    assert held["context"] == "deploy 2" and held["collapsed"] == 2
    # Still blocked: it stays, and no skipped run is written for the retry.
    assert _fire_held(conn, T0 + timedelta(seconds=5)) == [("buffered", "concurrency")]
    assert len(_routine_runs(conn, routine)) == 1
    complete_job(conn, first["job_id"], "succeeded", "ROUTINE_OK")
    assert _fire_held(conn, T0 + timedelta(seconds=6)) == [("running", None)]
    second = _running(conn, routine)[0]
    assert second["context"] == "deploy 2" and second["trigger_type"] == "event"
    assert second["trigger_detail"].startswith("2 fires collapsed: deploy 2")
    assert _held(conn, routine) == []


def test_buffer_one_waits_for_the_cooldown_end_and_the_scheduler_wakes_for_it(
    conn: psycopg.Connection,
) -> None:
    routine = _event_routine(conn, cooldown_secs=60, overlap_policy="buffer_one")
    conn.execute("update ceaseless.routines set last_run_at = %s where id = %s", (T0, routine))
    _event(conn, "deploy now", T0 + timedelta(seconds=10))
    [held] = _held(conn, routine)
    assert held["blocked_by"] == "cooldown" and held["fire_at"] == T0 + timedelta(seconds=60)
    next_fire = conn.execute("select ceaseless.next_schedule_fire()").fetchone()
    assert next_fire == (T0 + timedelta(seconds=60),)
    assert _fire_held(conn, T0 + timedelta(seconds=59)) == []
    assert _fire_held(conn, T0 + timedelta(seconds=60)) == [("running", None)]
    assert _held(conn, routine) == []


def test_buffer_all_keeps_every_refused_fire_in_order_up_to_its_bound(
    conn: psycopg.Connection,
) -> None:
    conn.execute("update ceaseless.settings set value = '3' where key = 'overlap_buffer_max'")
    routine = _event_routine(conn, max_concurrent=1, overlap_policy="buffer_all")
    for i in range(6):
        _event(conn, f"deploy {i}", T0 + timedelta(seconds=i))
    assert [h["context"] for h in _held(conn, routine)] == ["deploy 1", "deploy 2", "deploy 3"]
    # Past the bound: skipped and recorded.
    assert [(r["status"], r["skip_reason"], r["context"]) for r in _routine_runs(conn, routine)][
        1:
    ] == [("skipped", "concurrency", "deploy 4"), ("skipped", "concurrency", "deploy 5")]
    started = []
    for step in range(3):
        [run] = _running(conn, routine)
        complete_job(conn, run["job_id"], "succeeded", "ROUTINE_OK")
        assert _fire_held(conn, T0 + timedelta(seconds=10 + step)) == [("running", None)]
        started.append(_running(conn, routine)[0]["context"])
    assert started == ["deploy 1", "deploy 2", "deploy 3"]
    assert _held(conn, routine) == []


def test_cancel_other_cancels_the_live_run_and_starts_the_new_fire(
    conn: psycopg.Connection,
) -> None:
    routine = _event_routine(
        conn, max_concurrent=1, cooldown_secs=600, overlap_policy="cancel_other"
    )
    _event(conn, "deploy 1", T0)
    [old] = _running(conn, routine)
    _event(conn, "deploy 2", T0 + timedelta(seconds=5))
    job = conn.execute(
        "select state, last_error from ceaseless.job where id = %s", (old["job_id"],)
    ).fetchone()
    assert job is not None and job[0] == "cancelled" and "cancel_other" in job[1]
    # The cancelled run's end starts no cooldown against the fire that ended it.
    [new] = _running(conn, routine)
    assert new["context"] == "deploy 2"


def test_allow_all_ignores_max_concurrent_but_not_the_global_cap(
    conn: psycopg.Connection,
) -> None:
    routine = _event_routine(conn, max_concurrent=1, overlap_policy="allow_all")
    for i in range(3):
        _event(conn, f"deploy {i}", T0 + timedelta(seconds=i))
    assert len(_running(conn, routine)) == 3
    conn.execute("update ceaseless.settings set value = '3' where key = 'routine_max_running'")
    _event(conn, "deploy 4", T0 + timedelta(seconds=4))
    assert _routine_runs(conn, routine)[-1]["skip_reason"] == "global_cap"


def test_debounce_collapses_fifty_events_in_ten_seconds_into_one_run(
    conn: psycopg.Connection,
) -> None:
    routine = _event_routine(conn, debounce_secs=30, max_concurrent=5)
    for i in range(50):
        _event(conn, f"deploy {i}", T0 + timedelta(seconds=i * 0.2))
    last = T0 + timedelta(seconds=49 * 0.2)
    [held] = _held(conn, routine)
    assert (held["reason"], held["collapsed"], held["context"]) == ("debounced", 50, "deploy 49")
    assert held["fire_at"] == last + timedelta(seconds=30)
    assert _routine_runs(conn, routine) == []
    assert _fire_held(conn, last + timedelta(seconds=29)) == []
    assert _fire_held(conn, last + timedelta(seconds=30)) == [("running", None)]
    [run] = _routine_runs(conn, routine)
    assert run["context"] == "deploy 49"
    assert run["trigger_detail"].startswith("50 fires collapsed: deploy 49")
    assert _held(conn, routine) == []


def test_debounce_max_secs_fires_a_steady_stream_once_per_ceiling(
    conn: psycopg.Connection,
) -> None:
    routine = _event_routine(conn, debounce_secs=10, debounce_max_secs=60, max_concurrent=100)
    # An event every 2 s for 5 minutes: never 10 s of quiet.
    for i in range(150):
        at = T0 + timedelta(seconds=2 * i)
        _fire_held(conn, at)
        _event(conn, f"deploy {i}", at)
    starts = [r["started_at"] for r in _routine_runs(conn, routine)]
    assert starts == [T0 + timedelta(seconds=60 * k) for k in range(1, 5)]


def test_manual_fires_are_not_debounced(conn: psycopg.Connection) -> None:
    routine = make_routine(conn, debounce_secs=30)
    conn.execute("select ceaseless.run_routine(%s)", (routine,))
    assert len(_running(conn, routine)) == 1 and _held(conn, routine) == []


def test_held_fires_go_with_their_routine(conn: psycopg.Connection) -> None:
    routine = _event_routine(conn, debounce_secs=30)
    _event(conn, "deploy", T0)
    conn.execute("delete from ceaseless.routines where id = %s", (routine,))
    assert conn.execute("select count(*) from ceaseless.held_fires").fetchone() == (0,)


def test_a_routine_run_ending_wakes_the_scheduler_when_fires_are_held(
    conn: psycopg.Connection,
) -> None:
    routine = _event_routine(conn, max_concurrent=1, overlap_policy="buffer_one")
    _event(conn, "deploy 1", T0)
    _event(conn, "deploy 2", T0)
    conn.commit()
    conn.execute("listen ceaseless_schedule")
    conn.commit()
    [run] = _running(conn, routine)
    complete_job(conn, run["job_id"], "succeeded", "ROUTINE_OK")
    conn.commit()
    heard = [json.loads(n.payload) for n in conn.notifies(timeout=1, stop_after=1)]
    assert {"table": "held_fires", "id": str(routine)} in heard


# --- loops -------------------------------------------------------------------------------


def test_loop_buffer_one_starts_the_newest_fire_when_the_iteration_ends(
    conn: psycopg.Connection,
) -> None:
    loop = make_loop(conn, overlap_policy="buffer_one")
    first = run_loop(conn, loop)
    held_1 = run_loop(conn, loop)
    held_2 = run_loop(conn, loop)
    [held] = _held(conn, loop)
    assert held["id"] == held_2 != held_1 and held["blocked_by"] == "live_iteration"
    assert [r["status"] for r in runs(conn, loop)] == ["running"]
    assert _fire_held(conn, T0) == [("buffered", "live_iteration")]
    succeed(conn, first)
    assert _fire_held(conn, T0) == [("running", None)]
    assert [i["iteration"] for i in iterations(conn, loop)] == [1, 2]
    assert _held(conn, loop) == []


def test_loop_buffer_all_keeps_order_and_bound(conn: psycopg.Connection) -> None:
    conn.execute("update ceaseless.settings set value = '2' where key = 'overlap_buffer_max'")
    loop = make_loop(conn, overlap_policy="buffer_all", triggers={"webhook_enabled": False})
    run_loop(conn, loop)
    for _ in range(3):
        run_loop(conn, loop)
    assert len(_held(conn, loop)) == 2
    assert [(r["status"], r["skip_reason"]) for r in runs(conn, loop)] == [
        ("running", None),
        ("skipped", "live_iteration"),
    ]
    for _ in range(2):
        succeed(conn, live(conn, loop))
        assert _fire_held(conn, T0) == [("running", None)]
    assert [i["iteration"] for i in iterations(conn, loop)] == [1, 2, 3]


def test_loop_cancel_other_cancels_the_live_iteration_and_starts_the_next(
    conn: psycopg.Connection,
) -> None:
    loop = make_loop(
        conn, overlap_policy="cancel_other", policy={"kind": "iters", "spec": {"n": 5}}
    )
    first = run_loop(conn, loop)
    second = run_loop(conn, loop)
    by_id = {r["id"]: r for r in runs(conn, loop)}
    assert by_id[first]["status"] == "cancelled" and "cancel_other" in by_id[first]["error"]
    assert by_id[second]["status"] == "running" and by_id[second]["iteration"] == 2
    # The superseded iteration did not stop the loop.
    assert conn.execute(
        "select enabled, stopped_reason from ceaseless.loops where id = %s", (loop,)
    ).fetchone() == (True, None)
    jobs = conn.execute(
        "select j.state from ceaseless.job j where j.topology_run_id = %s", (first,)
    ).fetchall()
    assert jobs and all(j[0] == "cancelled" for j in jobs)


def test_a_cancelled_iteration_still_stops_a_cancel_other_loop(conn: psycopg.Connection) -> None:
    loop = make_loop(conn, overlap_policy="cancel_other")
    run = run_loop(conn, loop)
    conn.execute("select ceaseless.cancel_topology_run(%s)", (run,))
    assert conn.execute(
        "select stopped_reason from ceaseless.loops where id = %s", (loop,)
    ).fetchone() == ("cancelled",)


def test_loop_debounce_collapses_events_into_one_iteration(conn: psycopg.Connection) -> None:
    user = conn.execute("select current_user").fetchone()
    assert user is not None
    loop = make_loop(
        conn, triggers={"event": {"pattern": "deploy"}}, debounce_secs=30, debounce_max_secs=120
    )
    for i in range(50):
        _event(conn, f"deploy {i}", T0 + timedelta(seconds=i * 0.2), user=user[0])
    [held] = _held(conn, loop)
    assert held["collapsed"] == 50 and runs(conn, loop) == []
    assert _fire_held(conn, held["fire_at"]) == [("running", None)]
    [iteration] = iterations(conn, loop)
    assert iteration["task"].endswith("deploy 49")
    assert iteration["trigger_detail"].startswith("50 fires collapsed: deploy 49")


# --- who sees held fires -----------------------------------------------------------------


def test_a_user_sees_her_held_fires_and_not_another_users(
    conn: psycopg.Connection, login_role: Callable[..., psycopg.Connection]
) -> None:
    alice, bob = login_role("alice"), login_role("bob")
    for who in (alice, bob):
        name = who.execute("select current_user").fetchone()
        assert name is not None
        make_routine(
            conn,
            f"watch-{name[0]}",
            "event",
            {"pattern": "deploy"},
            user_id=name[0],
            debounce_secs=30,
        )
        conn.commit()
        who.execute("insert into ceaseless.events (content) values ('deploy')")
    for who in (alice, bob):
        rows = who.execute("select user_id from ceaseless.held_fires").fetchall()
        name = who.execute("select current_user").fetchone()
        assert rows == [name]
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.execute("delete from ceaseless.held_fires")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.execute("select ceaseless.fire_held()")


# --- where held fires show -----------------------------------------------------------------


def test_routine_status_and_explain_routine_show_held_fires(conn: psycopg.Connection) -> None:
    routine = _event_routine(conn, max_concurrent=1, overlap_policy="buffer_all")
    for i in range(3):
        _event(conn, f"deploy {i}", T0 + timedelta(seconds=i))
    status = conn.execute(
        "select overlap_policy, held_fires, held_collapsed, held_next_at "
        "from ceaseless.routine_status where id = %s",
        (routine,),
    ).fetchone()
    assert status == ("buffer_all", 2, 2, None)
    [first, *_] = conn.execute(
        "select reason, detail, clears_at from ceaseless.explain_routine(%s)", (routine,)
    ).fetchall()
    assert first[0] == "buffered" and "2 fires wait (overlap_policy buffer_all)" in first[1]
    assert "held by concurrency" in first[1] and "when a run of it ends" in first[1]


def test_loop_status_and_explain_loop_show_a_debounce_window(conn: psycopg.Connection) -> None:
    loop = make_loop(conn, triggers={"webhook_enabled": True}, debounce_secs=30)
    conn.execute(
        "select ceaseless._debounce_fire('loop', %s, 'alice', 'skip', 30, null, 'webhook', "
        "'webhook', 'body', %s)",
        (loop, T0),
    )
    status = conn.execute(
        "select debounce_secs, held_fires, held_next_at from ceaseless.loop_status where id = %s",
        (loop,),
    ).fetchone()
    assert status == (30, 1, T0 + timedelta(seconds=30))
    [first, *_] = conn.execute(
        "select reason, detail, clears_at from ceaseless.explain_loop(%s)", (loop,)
    ).fetchall()
    assert first[0] == "debounced" and first[2] == T0 + timedelta(seconds=30)
    assert "1 fires collapse into one" in first[1]


def test_a_webhook_answers_a_held_fire_without_a_refusal(conn: psycopg.Connection) -> None:
    routine = make_routine(
        conn,
        "hook",
        "webhook",
        {"path": "deploys", "secret": "a-signing-secret-of-some-length"},
        max_concurrent=1,
        overlap_policy="buffer_one",
    )
    answers = []
    for body in (b"one", b"two"):
        ts = int(datetime.now(UTC).timestamp())
        signature = sign("a-signing-secret-of-some-length", ts, body)
        answers.append(
            conn.execute(
                "select run_id, refused_sqlstate from ceaseless._receive_webhook(%s, %s, %s, %s)",
                ("deploys", body, signature, datetime.fromtimestamp(ts, UTC)),
            ).fetchone()
        )
    assert [a[1] for a in answers] == [None, None]
    [held] = _held(conn, routine)
    assert held["id"] == answers[1][0] and held["context"] == "two"


# --- races -------------------------------------------------------------------------------


def test_a_fire_during_a_release_opens_a_new_window_and_nothing_deadlocks(
    conn: psycopg.Connection, db_url: str
) -> None:
    routine = _event_routine(conn, debounce_secs=10, max_concurrent=5)
    _event(conn, "deploy 1", T0)
    conn.commit()
    with psycopg.connect(db_url) as releaser:
        # The release holds its held row (and the routine's fire admission) until it commits.
        assert _fire_held(releaser, T0 + timedelta(seconds=10)) == [("running", None)]
        done: list[BaseException | None] = []

        def fire() -> None:
            try:
                with psycopg.connect(db_url, autocommit=True) as c:
                    c.execute("set lock_timeout = '20s'")
                    _event(c, "deploy 2", T0 + timedelta(seconds=11))
                done.append(None)
            except BaseException as exc:  # reported below
                done.append(exc)

        thread = threading.Thread(target=fire)
        thread.start()
        # The fire waits for the release's admission, or passes its row by: either way the
        # release does not wait for it.
        while thread.is_alive() and not _someone_waits(conn):
            thread.join(0.01)
        releaser.commit()
        thread.join(30)
    assert done == [None]
    [run] = _routine_runs(conn, routine)
    assert run["context"] == "deploy 1"
    [held] = _held(conn, routine)
    assert (held["context"], held["collapsed"]) == ("deploy 2", 1)


def test_buffer_one_keeps_only_the_newest_when_a_fire_is_held_during_a_release(
    conn: psycopg.Connection, db_url: str
) -> None:
    """A fire held while fire_held has the older one in hand cannot replace it (the row is
    locked); the release, refused again, folds the older into the newer: one held fire, the
    newest, counting both."""
    routine = _event_routine(conn, max_concurrent=1, overlap_policy="buffer_one")
    _event(conn, "deploy 1", T0)
    _event(conn, "deploy 2", T0 + timedelta(seconds=1))
    conn.commit()
    [older] = _held(conn, routine)
    with psycopg.connect(db_url) as releaser:
        # A release in hand: the older row locked, as fire_held holds it while it fires.
        releaser.execute(
            "select from ceaseless.held_fires where id = %s for update", (older["id"],)
        )
        with psycopg.connect(db_url, autocommit=True) as other:
            _event(other, "deploy 3", T0 + timedelta(seconds=2))
        releaser.rollback()
    assert [h["context"] for h in _held(conn, routine)] == ["deploy 2", "deploy 3"]
    # The run still runs: the release is refused again, and the older fire folds in.
    assert _fire_held(conn, T0 + timedelta(seconds=3)) == [("buffered", "concurrency")]
    [held] = _held(conn, routine)
    assert (held["context"], held["collapsed"]) == ("deploy 3", 2)


def _someone_waits(conn: psycopg.Connection) -> bool:
    row = conn.execute(
        "select count(*) from pg_stat_activity "
        "where datname = current_database() and wait_event_type = 'Lock'"
    ).fetchone()
    conn.commit()
    return row is not None and row[0] > 0


def test_loop_debounce_max_secs_fires_a_steady_stream_once_per_ceiling(
    conn: psycopg.Connection,
) -> None:
    user = conn.execute("select current_user").fetchone()
    assert user is not None
    loop = make_loop(
        conn, triggers={"event": {"pattern": "deploy"}}, debounce_secs=10, debounce_max_secs=60
    )
    for i in range(150):
        at = T0 + timedelta(seconds=2 * i)
        for run in runs(conn, loop):
            if run["status"] in ("pending", "running"):
                succeed(conn, run["id"])
        _fire_held(conn, at)
        _event(conn, f"deploy {i}", at, user=user[0])
    starts = [i["created_at"] for i in iterations(conn, loop)]
    assert starts == [T0 + timedelta(seconds=60 * k) for k in range(1, 5)]


def test_a_held_backfill_slot_keeps_its_slot_and_is_not_backfilled_twice(
    conn: psycopg.Connection,
) -> None:
    routine = make_routine(
        conn,
        trigger_type="cron",
        trigger_config={"schedule": "0 * * * *", "timezone": "UTC"},
        max_concurrent=1,
        overlap_policy="buffer_all",
    )
    now = T0.replace(hour=12)

    def backfill() -> list[tuple[int, str, str]]:
        rows = conn.execute(
            "select slot_at, outcome, status from ceaseless.backfill_routine(%s, %s, %s, 10, %s)",
            (routine, T0.replace(hour=8), T0.replace(hour=11), now),
        ).fetchall()
        return [(r[0].hour, r[1], r[2]) for r in rows]

    assert backfill() == [
        (8, "fired", "running"),
        (9, "fired", "buffered"),
        (10, "fired", "buffered"),
    ]
    assert [h["slot_at"].hour for h in _held(conn, routine)] == [9, 10]
    assert [outcome for _, outcome, _ in backfill()] == ["already_fired"] * 3
    [run] = _running(conn, routine)
    complete_job(conn, run["job_id"], "succeeded", "ROUTINE_OK")
    assert _fire_held(conn, now) == [("running", None)]
    assert _running(conn, routine)[0]["slot_at"] == T0.replace(hour=9)


def test_a_fire_held_earlier_in_a_transaction_does_not_spare_a_cancelled_iteration(
    conn: psycopg.Connection,
) -> None:
    buffered = make_loop(conn, overlap_policy="buffer_one")
    run_loop(conn, buffered)
    superseding = make_loop(conn, overlap_policy="cancel_other")
    run = run_loop(conn, superseding)
    conn.commit()
    with conn.transaction():
        run_loop(conn, buffered)  # held: it inserts no run
        conn.execute("select ceaseless.cancel_topology_run(%s)", (run,))
    assert conn.execute(
        "select stopped_reason from ceaseless.loops where id = %s", (superseding,)
    ).fetchone() == ("cancelled",)


# --- cost ----------------------------------------------------------------------------------


def _held_fire_plan(conn: psycopg.Connection, target: UUID) -> dict[str, Any]:
    """The plan of fire_held's search for the fires to try, naming one routine."""
    with explained(conn) as plans, conn.transaction(force_rollback=True):
        tried = conn.execute(
            "select status from ceaseless.fire_held(%s, p_targets => %s)", (T0, [target])
        ).fetchall()
        assert tried == [("running",)]
    [found] = [p["Plan"] for p in plans if "with candidate" in p["Query Text"]]
    return found


def _routines_waiting_for_a_run(conn: psycopg.Connection, count: int) -> None:
    """`count` more routines, each with one fire held until a run of it ends."""
    conn.execute(
        "insert into ceaseless.routines (name, user_id, trigger_type, trigger_config, "
        "  action_type, action_config, agent, overlap_policy) "
        "select 'busy-' || n || '-' || gen_random_uuid(), 'alice', 'manual', '{}', "
        "  'lightweight', '{\"prompt\": \"check\"}', 'noop', 'buffer_one' "
        "from generate_series(1, %s) n",
        (count,),
    )
    conn.execute(
        "insert into ceaseless.held_fires (routine_id, user_id, reason, blocked_by, policy, "
        "  trigger_type, first_at, last_at) "
        "select r.id, r.user_id, 'buffered', 'concurrency', 'buffer_one', 'manual', %s, %s "
        "from ceaseless.routines r "
        "where not exists (select from ceaseless.held_fires h where h.routine_id = r.id)",
        (T0, T0),
    )
    conn.execute("analyze ceaseless.routines")
    conn.execute("analyze ceaseless.held_fires")


def test_fire_held_after_one_run_ends_reads_that_routine_not_every_held_fire(
    conn: psycopg.Connection,
) -> None:
    """A listener names the routine whose run ended: the search reads its first held fire
    and the timed ones due by index, the same few pages with 20 or 5,000 routines waiting."""
    _routines_waiting_for_a_run(conn, 20)
    first = make_routine(conn, "ended", overlap_policy="buffer_one")
    _routines_waiting_for_a_run(conn, 0)
    small = _held_fire_plan(conn, first)
    _routines_waiting_for_a_run(conn, 4_980)
    large = _held_fire_plan(conn, first)

    seq = [
        n
        for n in nodes(large)
        if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "held_fires"
    ]
    assert not seq, json.dumps(large, indent=1)[:3000]
    assert _buffers(large) <= _buffers(small) + 4, (_buffers(small), _buffers(large))


def _buffers(plan: dict[str, Any]) -> int:
    return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])
