"""What the engine remembers within a transaction is its own, and the running count is recounted.

Any session can `set ceaseless.<anything>`. As alice: `ceaseless.loop_fire` made her run
iteration 1 of bob's loop; `ceaseless.fire_mode = 'shared'` with a large `fire_room` started
four routine runs under routine_max_running = 2; `ceaseless.run_shard = 999` during cancel_job
lost the run's decrement for good. None of them may change an outcome now; and the shards the
global cap reads are recounted from routine_runs, exactly, while fires and finishes go on.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any
from uuid import UUID

import psycopg
import pytest

from tests.factories import make_agent
from tests.sql.loops import make_loop
from tests.sql.topology import graph, node

Connect = Callable[..., psycopg.Connection]


def _one(c: psycopg.Connection, query: str, params: Any = None) -> Any:
    row = c.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def _routine(c: psycopg.Connection, name: str = "r", max_concurrent: int = 10) -> UUID:
    return _one(
        c,
        "insert into ceaseless.routines (name, trigger_type, action_type, action_config, agent, "
        "cooldown_secs, max_concurrent) values (%s, 'manual', 'lightweight', "
        "'{\"prompt\": \"p\"}', 'noop', 0, %s) returning id",
        (name, max_concurrent),
    )


def _counts(conn: psycopg.Connection) -> tuple[int, int]:
    """(sum of the shards, running routine runs)."""
    row = conn.execute(
        "select (select coalesce(sum(running), 0) from ceaseless.routine_run_shards), "
        "(select count(*) from ceaseless.routine_runs where status = 'running')"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_a_setting_does_not_make_a_users_run_an_iteration_of_another_users_loop(
    conn: psycopg.Connection, login_role: Connect
) -> None:
    make_agent(conn)
    alice, bob = login_role("alice"), login_role("bob")
    bobs_loop = make_loop(bob)
    forged = uuid.uuid4()
    alice.execute("select set_config('ceaseless.loop_fire', %s, false)", (str(forged),))
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.execute(
            "insert into ceaseless.topology_runs (id, graph, task, loop_id, iteration) "
            "values (%s, %s, 'alice''s task', %s, 1)",
            (forged, json.dumps(graph([node("A")])), bobs_loop),
        )
    # Nor does it open the door to any other role: only _fire_loop inserts an iteration.
    conn.execute("select set_config('ceaseless.loop_fire', %s, false)", (str(forged),))
    with pytest.raises(psycopg.Error) as error:
        conn.execute(
            "insert into ceaseless.topology_runs (id, graph, task, loop_id, iteration, user_id) "
            "values (%s, %s, 'alice''s task', %s, 1, 'alice')",
            (forged, json.dumps(graph([node("A")])), bobs_loop),
        )
    assert error.value.sqlstate == "CE422"
    assert _one(conn, "select count(*) from ceaseless.topology_runs") == 0
    # The loop's own fires still go through.
    fired = _one(bob, "select ceaseless.run_loop(%s)", (bobs_loop,))
    assert _one(conn, "select status from ceaseless.topology_runs where id = %s", (fired,)) == (
        "running"
    )


def test_settings_do_not_lift_the_global_cap(conn: psycopg.Connection, login_role: Connect) -> None:
    make_agent(conn, max_concurrent=10)
    conn.execute("update ceaseless.settings set value = '2' where key = 'routine_max_running'")
    alice = login_role("alice")
    routine = _routine(alice)
    alice.execute("set ceaseless.fire_mode = 'shared'")
    alice.execute("set ceaseless.fire_room = '1000'")
    statuses = []
    for _ in range(4):
        run = _one(alice, "select ceaseless.run_routine(%s)", (routine,))
        statuses.append(
            _one(
                conn,
                "select status || coalesce(':' || skip_reason, '') from ceaseless.routine_runs "
                "where id = %s",
                (run,),
            )
        )
    assert statuses == ["running", "running", "skipped:global_cap", "skipped:global_cap"]
    assert _counts(conn) == (2, 2)


def test_a_setting_cannot_lose_a_runs_place_in_the_running_count(
    conn: psycopg.Connection, login_role: Connect
) -> None:
    make_agent(conn, max_concurrent=10)
    alice = login_role("alice")
    routine = _routine(alice)
    runs = [_one(alice, "select ceaseless.run_routine(%s)", (routine,)) for _ in range(3)]
    assert _counts(conn) == (3, 3)
    alice.execute("set ceaseless.run_shard = '999'")
    for run in runs:
        job = _one(conn, "select job_id from ceaseless.routine_runs where id = %s", (run,))
        alice.execute("select ceaseless.cancel_job(%s)", (job,))
    assert _counts(conn) == (0, 0)


def test_a_transaction_moves_one_shard_however_often_it_counts(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=10)
    routine = _routine(conn)
    with conn.transaction():
        for _ in range(3):
            conn.execute("select ceaseless.run_routine(%s)", (routine,))
        moved = conn.execute(
            "select shard, running from ceaseless.routine_run_shards where running <> 0"
        ).fetchall()
    assert len(moved) == 1 and moved[0][1] == 3


def test_the_recount_puts_a_lost_or_doubled_count_right_and_says_so(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, max_concurrent=10)
    routine = _routine(conn)
    for _ in range(2):
        conn.execute("select ceaseless.run_routine(%s)", (routine,))
    assert _one(conn, "select ceaseless.recount_routine_run_shards()") == 0
    # A count lost in an earlier version: runs that no shard holds any more.
    conn.execute("update ceaseless.routine_run_shards set running = running + 5 where shard = 7")
    assert _counts(conn) == (7, 2)

    assert _one(conn, "select ceaseless.recount_routine_run_shards()") == -5

    assert _counts(conn) == (2, 2)
    audit = conn.execute(
        "select action, detail from ceaseless.audit_log where entity = 'routine_run_shards'"
    ).fetchall()
    assert audit == [("recount", {"counted": 7, "running": 2, "correction": -5})]
    conn.execute("update ceaseless.routine_run_shards set running = running - 4 where shard = 3")
    assert _one(conn, "select ceaseless.recount_routine_run_shards()") == 4
    assert _counts(conn) == (2, 2)


def test_the_recount_is_exact_and_waits_for_nothing_while_fires_and_finishes_are_open(
    conn: psycopg.Connection, db_url: str
) -> None:
    make_agent(conn, max_concurrent=10)
    firing, finishing = _routine(conn, "firing"), _routine(conn, "finishing")
    ending = _one(conn, "select ceaseless.run_routine(%s)", (finishing,))
    ending_job = _one(conn, "select job_id from ceaseless.routine_runs where id = %s", (ending,))
    conn.execute("update ceaseless.routine_run_shards set running = running + 3 where shard = 0")

    with psycopg.connect(db_url) as fire, psycopg.connect(db_url) as finish:
        fire.execute("select ceaseless.run_routine(%s)", (firing,))
        finish.execute("select ceaseless.cancel_job(%s)", (ending_job,))
        # Both hold a shard, uncommitted; the recount takes neither, nor waits for them.
        conn.execute("set lock_timeout = '2s'")
        assert _one(conn, "select ceaseless.recount_routine_run_shards()") == -3
        fire.commit()
        finish.commit()

    assert _counts(conn) == (1, 1)
    assert _one(conn, "select ceaseless.recount_routine_run_shards()") == 0


def test_a_second_recount_at_once_skips_rather_than_correct_twice(
    conn: psycopg.Connection, db_url: str
) -> None:
    make_agent(conn)
    conn.execute("update ceaseless.routine_run_shards set running = running + 2 where shard = 5")
    with psycopg.connect(db_url) as first:
        assert _one(first, "select ceaseless.recount_routine_run_shards()") == -2
        assert _one(conn, "select ceaseless.recount_routine_run_shards()") is None
        first.commit()
    assert _counts(conn) == (0, 0)
    assert _one(conn, "select ceaseless.recount_routine_run_shards()") == 0


def test_a_user_role_cannot_recount_or_move_the_count(login_role: Connect) -> None:
    alice = login_role("alice")
    for call in ("recount_routine_run_shards()", "_count_running(-1)", "_remember_fire('x', 9)"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            alice.execute(f"select ceaseless.{call}")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.execute("select * from ceaseless.transaction_state")


def test_maintenance_forgets_the_state_of_backends_that_have_exited(
    conn: psycopg.Connection, db_url: str
) -> None:
    make_agent(conn, max_concurrent=10)
    routine = _routine(conn)
    with psycopg.connect(db_url, autocommit=True) as other:
        other.execute("select ceaseless.run_routine(%s)", (routine,))
        gone = _one(other, "select pg_backend_pid()")
    conn.execute("select ceaseless.run_routine(%s)", (routine,))
    mine = _one(conn, "select pg_backend_pid()")
    wait = "select count(*) from pg_stat_activity where pid = %s"
    for _ in range(100):
        if _one(conn, wait, (gone,)) == 0:
            break
        conn.execute("select pg_sleep(0.05)")
    assert _one(conn, "select ceaseless.forget_ended_backends()") == 1
    rows = conn.execute("select backend_pid from ceaseless.transaction_state").fetchall()
    assert rows == [(mine,)]
