"""prune(): what is past retention goes, in bounded batches; what is live, or read by a live
rule, stays (functions/96_retention.sql).

Rows are backdated (their finished, completed, created, delivered or received time moved
into the past) rather than waited for; the retention settings keep their defaults (30 days
for jobs, runs and late results, 7 days for events and notifications, 90 for audit rows).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

import psycopg
import pytest

from tests.factories import complete_job, make_agent, make_job, make_routine
from tests.sql import loops
from tests.sql.plans import explained, nodes, statement
from tests.sql.topology import run_node

Connect = Callable[..., psycopg.Connection]

OLD = "now() - interval '40 days'"
FRESH = "now() - interval '1 day'"


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=100)


def _one(conn: psycopg.Connection, query: str, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def _prune(conn: psycopg.Connection, args: str = "", params: Any = None) -> dict[str, int]:
    rows = conn.execute(f"select kind, removed from ceaseless.prune({args})", params).fetchall()
    return dict(rows)


def _exists(conn: psycopg.Connection, table: str, row_id: object) -> bool:
    return bool(
        _one(conn, f"select exists (select from ceaseless.{table} where id = %s)", (row_id,))
    )


def _finished_job(conn: psycopg.Connection, state: str = "delivered", when: str = OLD) -> UUID:
    """A job that ended `when`, with the agent run that ended it."""
    job = make_job(conn)
    conn.execute(
        f"update ceaseless.job set state = %s, created_at = {when}, finished_at = {when}, "
        "attempts = 1 where id = %s",
        (state, job),
    )
    conn.execute(
        "insert into ceaseless.agent_run (job_id, agent, adapter, worker, attempt, outcome, "
        f"  started_at, finished_at) values (%s, 'noop', 'noop', 'w0', 1, 'succeeded', {when}, "
        f"  {when})",
        (job,),
    )
    return job


def _backdate_job(conn: psycopg.Connection, job: UUID, when: str = OLD) -> None:
    conn.execute(
        f"update ceaseless.job set created_at = {when}, finished_at = {when} where id = %s", (job,)
    )


def test_only_finished_jobs_past_retention_go_with_their_agent_runs(
    conn: psycopg.Connection,
) -> None:
    delivered = _finished_job(conn, "delivered")
    failed = _finished_job(conn, "failed")
    cancelled = _finished_job(conn, "cancelled")
    fresh = _finished_job(conn, "delivered", FRESH)
    pending = make_job(conn, created_at=_one(conn, f"select {OLD}"))
    # Blocked: waiting for a person, however long ago its agent stopped.
    blocked = make_job(conn)
    conn.execute(
        f"update ceaseless.job set state = 'blocked', created_at = {OLD}, finished_at = {OLD} "
        "where id = %s",
        (blocked,),
    )

    assert _prune(conn)["jobs"] == 3

    assert not any(_exists(conn, "job", j) for j in (delivered, failed, cancelled))
    assert all(_exists(conn, "job", j) for j in (fresh, pending, blocked))
    assert (
        _one(
            conn,
            "select count(*) from ceaseless.agent_run where job_id = any (%s)",
            ([delivered, failed, cancelled],),
        )
        == 0
    )
    assert _one(conn, "select count(*) from ceaseless.agent_run where job_id = %s", (fresh,)) == 1


def test_a_parent_job_stays_while_a_child_of_it_exists(conn: psycopg.Connection) -> None:
    parent = _finished_job(conn)
    child = make_job(conn)
    conn.execute("update ceaseless.job set parent_job_id = %s where id = %s", (parent, child))

    assert _prune(conn)["jobs"] == 0
    assert _exists(conn, "job", parent)

    conn.execute("select ceaseless.cancel_job(%s)", (child,))
    _backdate_job(conn, child)
    assert _prune(conn)["jobs"] == 1  # the child; its parent waits for the next pass
    assert _prune(conn)["jobs"] == 1
    assert not _exists(conn, "job", parent)


def _forge_job(conn: psycopg.Connection, kind: str, number: int, when: str) -> UUID:
    job = make_job(conn, kind=kind, forge="github", owner="o", repo="r", number=number)
    conn.execute(
        f"update ceaseless.job set state = 'delivered', finished_at = {when}, "
        f"created_at = {when} where id = %s",
        (job,),
    )
    return job


def test_a_forge_job_stays_while_it_is_its_issues_latest_of_its_kind(
    conn: psycopg.Connection,
) -> None:
    older = _forge_job(conn, "implement", 7, "now() - interval '50 days'")
    latest = _forge_job(conn, "implement", 7, OLD)
    other_kind = _forge_job(conn, "discover", 7, OLD)

    assert _prune(conn)["jobs"] == 1
    assert not _exists(conn, "job", older)
    # Without them the issue would look new, and be planned or implemented again.
    assert _exists(conn, "job", latest) and _exists(conn, "job", other_kind)


def _routine_run(conn: psycopg.Connection, routine: UUID, succeed: bool = True) -> UUID:
    """A manual run of the routine whose job delivers, or is cancelled (a failed run)."""
    run = _one(conn, "select ceaseless.run_routine(%s)", (routine,))
    job = _one(conn, "select job_id from ceaseless.routine_runs where id = %s", (run,))
    if succeed:
        complete_job(conn, job, "succeeded", message="ROUTINE_OK")
    else:
        conn.execute("select ceaseless.cancel_job(%s)", (job,))
    return run


def _backdate_run(conn: psycopg.Connection, run: UUID, when: str = OLD) -> None:
    conn.execute(
        f"update ceaseless.routine_runs set started_at = {when}, completed_at = {when} "
        "where id = %s",
        (run,),
    )
    conn.execute(f"update ceaseless.job set finished_at = {when} where routine_run_id = %s", (run,))


def test_routine_runs_go_with_their_jobs_keeping_the_latest_success_and_the_counts(
    conn: psycopg.Connection,
) -> None:
    routine = make_routine(conn)
    first, second, third = (_routine_run(conn, routine) for _ in range(3))
    failed = _routine_run(conn, routine, succeed=False)
    for run in (first, second, third, failed):
        _backdate_run(conn, run)
    jobs = {
        run: _one(conn, "select job_id from ceaseless.routine_runs where id = %s", (run,))
        for run in (first, second, third, failed)
    }
    conn.execute("select ceaseless._metrics_fold()")
    totals = conn.execute("select metric, labels, value from ceaseless.metric_totals").fetchall()
    count = _one(conn, "select run_count from ceaseless.routines where id = %s", (routine,))
    gauge = _one(
        conn,
        "select value from ceaseless.metrics_snapshot() "
        "where sample = 'ceaseless_routine_last_success_timestamp_seconds'",
    )

    removed = _prune(conn)

    assert removed["routine_runs"] == 3
    assert removed["jobs"] == 3
    # The latest success: the last-success gauge reads it.
    assert _exists(conn, "routine_runs", third)
    assert _exists(conn, "job", jobs[third])
    for run in (first, second, failed):
        assert not _exists(conn, "routine_runs", run)
        assert not _exists(conn, "job", jobs[run])
    conn.execute("select ceaseless._metrics_fold()")
    assert sorted(
        conn.execute("select metric, labels, value from ceaseless.metric_totals").fetchall(),
        key=str,
    ) == sorted(totals, key=str)
    assert _one(conn, "select run_count from ceaseless.routines where id = %s", (routine,)) == count
    assert (
        _one(
            conn,
            "select value from ceaseless.metrics_snapshot() "
            "where sample = 'ceaseless_routine_last_success_timestamp_seconds'",
        )
        == gauge
    )


def test_a_running_routine_run_and_one_with_a_blocked_job_stay(conn: psycopg.Connection) -> None:
    routine = make_routine(conn, max_concurrent=5)
    running = _one(conn, "select ceaseless.run_routine(%s)", (routine,))
    conn.execute(f"update ceaseless.routine_runs set started_at = {OLD} where id = %s", (running,))

    assert _prune(conn).get("routine_runs", 0) == 0
    assert _exists(conn, "routine_runs", running)
    assert _exists(
        conn,
        "job",
        _one(conn, "select job_id from ceaseless.routine_runs where id = %s", (running,)),
    )


def test_a_routine_run_inside_its_dedup_window_stays(conn: psycopg.Connection) -> None:
    routine = make_routine(conn, dedup_window_secs=90 * 86400)
    conn.execute(
        "insert into ceaseless.routine_runs (routine_id, trigger_type, status, completed_at, "
        f"  started_at, content_hash) values (%s, 'manual', 'failed', {OLD}, {OLD}, 'h1')",
        (routine,),
    )
    assert _prune(conn)["routine_runs"] == 0
    conn.execute(
        "update ceaseless.routines set dedup_window_secs = 86400 where id = %s", (routine,)
    )
    assert _prune(conn)["routine_runs"] == 1


def _backdate_iterations(conn: psycopg.Connection, loop: UUID) -> None:
    conn.execute(
        f"update ceaseless.topology_runs set finished_at = {OLD} "
        "where loop_id = %s and finished_at is not null",
        (loop,),
    )
    conn.execute(
        f"update ceaseless.job set finished_at = {OLD} where topology_run_id in "
        "(select id from ceaseless.topology_runs where loop_id = %s) and finished_at is not null",
        (loop,),
    )


def test_a_loop_keeps_its_latest_finished_iteration_and_its_prior_context(
    conn: psycopg.Connection,
) -> None:
    loop = loops.make_loop(conn)
    for n in (1, 2, 3):
        loops.succeed(conn, loops.run_loop(conn, loop), f"result {n}")
    live = loops.run_loop(conn, loop)  # iteration 4, live
    _backdate_iterations(conn, loop)

    removed = _prune(conn)

    assert removed["topology_runs"] == 2
    assert removed["jobs"] == 2  # the node jobs of iterations 1 and 2
    kept = [(r["iteration"], r["status"]) for r in loops.iterations(conn, loop)]
    assert [iteration for iteration, _ in kept] == [3, 4]
    assert kept[0][1] == "succeeded" and kept[1][1] in loops.LIVE
    assert (
        _one(
            conn,
            "select count(*) from ceaseless.topology_nodes n join ceaseless.topology_runs r "
            "on r.id = n.topology_run_id where r.loop_id = %s",
            (loop,),
        )
        == 2
    )

    # The live iteration ends; the next one reads iteration 4's message and is numbered 5.
    run_node(conn, live, "A", "succeeded", message="result 4")
    _backdate_iterations(conn, loop)
    assert _prune(conn)["topology_runs"] == 1
    fifth = loops.run_loop(conn, loop)
    row = conn.execute(
        "select iteration, task from ceaseless.topology_runs where id = %s", (fifth,)
    ).fetchone()
    assert row is not None
    assert row[0] == 5
    assert "## Prior iteration (4)" in row[1] and "result 4" in row[1]
    assert [r["iteration"] for r in loops.iterations(conn, loop)] == [4, 5]


def test_events_notifications_late_results_and_webhook_deliveries_past_retention_go(
    conn: psycopg.Connection,
) -> None:
    for when in (OLD, FRESH):
        conn.execute(
            "insert into ceaseless.events (user_id, content, created_at) "
            f"values ('alice', 'hello', {when})"
        )
        for status, delivered in (("delivered", when), ("pending", "null"), ("failed", "null")):
            conn.execute(
                "insert into ceaseless.notifications (source_table, source_id, kind, subject, "
                "  status, delivered_at, created_at) values ('routine_runs', gen_random_uuid(), "
                f"  'success', 's', %s, {delivered}, {when})",
                (status,),
            )
        conn.execute(
            "insert into ceaseless.late_results (run_id, worker, reason, result, received_at) "
            f"values (gen_random_uuid(), 'w0', 'lease_expired', '{{}}', {when})"
        )
    # Replay keys are needed for two replay windows (webhook_window_secs, 300 s).
    for when in ("now() - interval '11 minutes'", "now() - interval '9 minutes'"):
        conn.execute(
            "insert into ceaseless.webhook_deliveries (target, target_id, signature, sent_at, "
            f"  received_at) values ('routine', gen_random_uuid(), md5(random()::text), {when}, "
            f"  {when})"
        )

    removed = _prune(conn)

    assert {k: removed[k] for k in ("events", "notifications", "late_results")} == {
        "events": 1,
        "notifications": 1,
        "late_results": 1,
    }
    assert removed["webhook_deliveries"] == 1
    assert _one(conn, "select count(*) from ceaseless.events") == 1
    # Pending ones are live, failed ones are the record of what never arrived.
    assert conn.execute(
        "select status, count(*) from ceaseless.notifications group by status order by 1"
    ).fetchall() == [("delivered", 1), ("failed", 2), ("pending", 2)]
    assert _one(conn, "select count(*) from ceaseless.late_results") == 1
    assert _one(conn, "select count(*) from ceaseless.webhook_deliveries") == 1


def _old_audit_rows(conn: psycopg.Connection, count: int, days: int) -> None:
    conn.execute(
        "insert into ceaseless.audit_log (at, entity, entity_key, action) "
        "select now() - make_interval(days => %s), 'test', 'old ' || g, 'noted' "
        "from generate_series(1, %s) g",
        (days, count),
    )


def test_audit_rows_go_after_their_retention_and_never_inside_the_floor(
    conn: psycopg.Connection,
) -> None:
    _old_audit_rows(conn, 2, days=100)
    _old_audit_rows(conn, 3, days=20)
    conn.execute(
        "update ceaseless.settings set value = '86400' where key = 'retention_audit_log_secs'"
    )
    # A day of retention, but the floor (audit_log_min_retention_secs, 30 days) holds, even
    # for a pass dated a year ahead.
    assert _prune(conn, "p_now => now() + interval '1 year'")["audit_log"] == 2
    assert _one(conn, "select count(*) from ceaseless.audit_log where entity = 'test'") == 3


def test_each_pass_that_removes_leaves_one_audit_row_with_its_counts(
    conn: psycopg.Connection,
) -> None:
    _finished_job(conn)
    conn.execute(
        f"insert into ceaseless.events (user_id, content, created_at) values ('alice', 'x', {OLD})"
    )
    _prune(conn)
    _prune(conn)  # removes nothing: no row
    rows = conn.execute(
        "select actor, detail -> 'removed' from ceaseless.audit_log where entity = 'retention'"
    ).fetchall()
    assert len(rows) == 1
    assert rows[0][0] == _one(conn, "select session_user")
    assert rows[0][1]["jobs"] == 1 and rows[0][1]["events"] == 1
    assert rows[0][1]["routine_runs"] == 0


def test_a_dry_run_counts_and_removes_nothing(conn: psycopg.Connection) -> None:
    jobs = [_finished_job(conn) for _ in range(2)]
    routine = make_routine(conn)
    for _ in range(2):
        _backdate_run(conn, _routine_run(conn, routine))

    counted = _prune(conn, "p_dry_run => true")

    assert counted["jobs"] == 3 and counted["routine_runs"] == 1
    assert all(_exists(conn, "job", j) for j in jobs)
    assert _one(conn, "select count(*) from ceaseless.routine_runs") == 2
    assert _one(conn, "select count(*) from ceaseless.audit_log where entity = 'retention'") == 0
    assert _prune(conn) == counted


def test_a_pass_removes_at_most_p_limit_rows_of_a_kind_oldest_first(
    conn: psycopg.Connection,
) -> None:
    conn.execute(
        "insert into ceaseless.events (user_id, content, created_at) "
        "select 'alice', 'e' || g, now() - make_interval(days => 10 + g) "
        "from generate_series(1, 5) g"
    )
    assert _prune(conn, "p_limit => 2, p_only => 'events'") == {"events": 2}
    assert [
        r[0]
        for r in conn.execute("select content from ceaseless.events order by content").fetchall()
    ] == ["e1", "e2", "e3"]
    assert _prune(conn, "p_limit => 2, p_only => 'events'") == {"events": 2}
    assert _prune(conn, "p_limit => 2, p_only => 'events'") == {"events": 1}


def test_zero_keeps_a_kind_forever(conn: psycopg.Connection) -> None:
    conn.execute(
        "insert into ceaseless.events (user_id, content, created_at) "
        "values ('alice', 'x', now() - interval '10 years')"
    )
    _old_audit_rows(conn, 1, days=3650)
    for key in ("retention_events_secs", "retention_audit_log_secs"):
        conn.execute("update ceaseless.settings set value = '0' where key = %s", (key,))
    removed = _prune(conn)
    assert removed["events"] == 0 and removed["audit_log"] == 0
    assert _one(conn, "select count(*) from ceaseless.events") == 1
    assert _one(conn, "select count(*) from ceaseless.audit_log where entity = 'test'") == 1


def test_a_user_role_may_not_prune_and_an_operator_may_not_prune_audit_rows(
    conn: psycopg.Connection, login_role: Connect
) -> None:
    _finished_job(conn)
    _old_audit_rows(conn, 1, days=100)
    alice = login_role("alice")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.execute("select * from ceaseless.prune()")
    assert _one(conn, "select count(*) from ceaseless.job") == 1

    ops = login_role("ops", "ceaseless_operator")
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as error:
        ops.execute("select * from ceaseless.prune(p_only => 'audit_log')")
    assert "audit" in str(error.value)
    removed = _prune(ops)
    assert removed["jobs"] == 1 and "audit_log" not in removed
    for helper in (
        "ceaseless._prune_kind('jobs', now(), 10, false)",
        "ceaseless._delete_audit_rows(now() - interval '60 days', 10)",
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            ops.execute(f"select * from {helper}")

    listener = login_role("listener", "ceaseless_listener")
    assert _prune(listener)["audit_log"] == 1


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ("p_limit => 0", "prune.p_limit"),
        ("p_only => 'jobz'", "prune.p_only"),
        ("p_now => null", "prune.p_now"),
    ],
)
def test_bad_arguments_are_refused_naming_them(
    conn: psycopg.Connection, args: str, field: str
) -> None:
    with pytest.raises(psycopg.Error) as error:
        conn.execute(f"select * from ceaseless.prune({args})")
    assert error.value.sqlstate == "CE422"
    assert field in str(error.value)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("retention_jobs_secs", "-1"),
        ("retention_events_secs", '"a week"'),
        ("prune_interval_secs", "0"),
    ],
)
def test_a_bad_retention_setting_is_refused_naming_key_rule_and_value(
    conn: psycopg.Connection, key: str, value: str
) -> None:
    with pytest.raises(psycopg.Error) as error:
        conn.execute("update ceaseless.settings set value = %s::jsonb where key = %s", (value, key))
    assert error.value.sqlstate == "CE422"
    message = str(error.value)
    assert f"settings.{key}" in message and "must be an integer from" in message
    assert value in message


def test_a_second_prune_while_one_runs_returns_nothing(
    conn: psycopg.Connection, db_url: str
) -> None:
    _finished_job(conn)
    with psycopg.connect(db_url) as other:
        other.execute("select * from ceaseless.prune(p_only => 'events')")  # holds the lock
        assert _prune(conn) == {}
        assert _one(conn, "select count(*) from ceaseless.job") == 1
        other.rollback()
    assert _prune(conn)["jobs"] == 1


def test_a_batch_reads_the_oldest_rows_by_index_not_the_whole_history(
    conn: psycopg.Connection,
) -> None:
    """20,000 recent finished jobs and three past retention: the batch is read through
    job_created_idx, and costs buffers for the three, not for the history."""
    conn.execute(
        "insert into ceaseless.job (kind, agent, prompt, state, finished_at, attempts) "
        "select 'task', 'noop', 'recent', 'delivered', now() - interval '2 days', 1 "
        "from generate_series(1, 20000)"
    )
    for _ in range(3):
        _finished_job(conn)
    conn.execute("analyze ceaseless.job")

    with explained(conn) as plans:
        assert _prune(conn, "p_only => 'jobs'") == {"jobs": 3}

    plan = statement(plans, "select j.id")
    scans = [n for n in nodes(plan) if n.get("Relation Name") == "job" and n.get("Alias") == "j"]
    assert scans and scans[0]["Node Type"] == "Index Scan", scans
    assert scans[0]["Index Name"] == "job_created_idx"
    # The empty tables beside it may be read whole; the history may not.
    assert not [
        n for n in nodes(plan) if n["Node Type"] == "Seq Scan" and n["Relation Name"] == "job"
    ]
    buffers = plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
    assert buffers < 100, buffers


def _status(conn: psycopg.Connection) -> dict[str, tuple[Any, ...]]:
    rows = conn.execute(
        "select kind, extract(epoch from kept_for)::bigint, cutoff is null, last_pass_at, "
        "removed_by_last_pass from ceaseless.retention_status"
    ).fetchall()
    return {row[0]: row[1:] for row in rows}


def test_retention_status_shows_what_each_kind_keeps_and_what_the_last_pass_removed(
    conn: psycopg.Connection, login_role: Connect
) -> None:
    status = _status(conn)
    assert list(status) == [
        "routine_runs", "topology_runs", "jobs", "events", "notifications", "late_results",
        "webhook_deliveries", "audit_log",
    ]  # fmt: skip
    assert status["jobs"] == (30 * 86400, False, None, 0)
    conn.execute("update ceaseless.settings set value = '0' where key = 'retention_events_secs'")
    assert _status(conn)["events"][:2] == (None, True)

    _finished_job(conn)
    _finished_job(conn)
    removed = _prune(conn)
    assert removed["jobs"] == 2
    after = _status(conn)
    last_pass = _one(conn, "select max(at) from ceaseless.audit_log where entity = 'retention'")
    assert after["jobs"][2:] == (last_pass, 2)
    assert after["routine_runs"][2:] == (last_pass, 0)

    # A pass with nothing to remove leaves no audit row: the last pass is still that one.
    assert sum(_prune(conn).values()) == 0
    assert _status(conn)["jobs"][2:] == (last_pass, 2)

    ops = login_role("ops", "ceaseless_operator")
    assert _status(ops) == _status(conn)
    listener = login_role("listener", "ceaseless_listener")
    assert _status(listener) == _status(conn)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        login_role("alice").execute("select * from ceaseless.retention_status")
