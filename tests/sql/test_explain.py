"""explain_job, explain_routine, explain_topology_run: each reason, created and read back.

Where a reason is the claim's or the firing path's own rule, the test also asks
that rule (claim_jobs, run_routine) and checks it agrees: explain mirrors them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from uuid import UUID

import psycopg
import pytest

from tests.factories import (
    claim,
    claim_started,
    finish,
    make_agent,
    make_job,
    make_routine,
    pause_lane,
    run_of,
)
from tests.sql.topology import diamond, graph, node, run_node, start_run

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)

Why = list[tuple[str, str, datetime | None]]


def _why_job(conn: psycopg.Connection, job: UUID, now: datetime | None = None) -> Why:
    if now is None:
        return conn.execute("select * from ceaseless.explain_job(%s)", (job,)).fetchall()
    return conn.execute("select * from ceaseless.explain_job(%s, %s)", (job, now)).fetchall()


def _why_routine(conn: psycopg.Connection, routine: UUID, now: datetime | None = None) -> Why:
    if now is None:
        return conn.execute("select * from ceaseless.explain_routine(%s)", (routine,)).fetchall()
    return conn.execute(
        "select * from ceaseless.explain_routine(%s, %s)", (routine, now)
    ).fetchall()


def _why_run(conn: psycopg.Connection, run: UUID) -> Why:
    return conn.execute("select * from ceaseless.explain_topology_run(%s)", (run,)).fetchall()


def _reasons(rows: Why) -> list[str]:
    return [row[0] for row in rows]


def _one(rows: Why, reason: str) -> tuple[str, datetime | None]:
    found = [(detail, clears) for r, detail, clears in rows if r == reason]
    assert len(found) == 1, rows
    return found[0]


# Jobs ------------------------------------------------------------------------


def test_a_due_job_in_a_free_lane_is_ready_and_the_claim_takes_it(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    job = make_job(conn)

    detail, clears = _one(_why_job(conn, job), "ready")

    assert "lane noop admits it (4 free slots)" in detail and clears is None
    assert claim(conn) == [job]


def test_a_job_not_due_says_until_when_and_why(conn: psycopg.Connection) -> None:
    make_agent(conn)
    job = make_job(conn, run_after=T0 + timedelta(minutes=5), last_error="exit status 1")

    assert _reasons(_why_job(conn, job, T0)) == ["not_due"]
    detail, clears = _one(_why_job(conn, job, T0), "not_due")
    assert clears == T0 + timedelta(minutes=5)
    assert "exit status 1" in detail
    assert claim(conn, p_now=T0) == []
    assert _reasons(_why_job(conn, job, clears)) == ["ready"]
    assert claim(conn, p_now=clears) == [job]


def test_a_full_lane_holds_the_job_until_a_run_ends(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=1)
    first = make_job(conn, run_after=T0 - timedelta(seconds=2))
    waiting = make_job(conn, run_after=T0 - timedelta(seconds=1))
    assert claim_started(conn, p_now=T0).keys() == {first}

    detail, clears = _one(_why_job(conn, waiting, T0), "lane_full")

    assert "1 live jobs (0 claimed, 1 running) of max_concurrent 1" in detail
    assert clears is None
    assert claim(conn, p_now=T0) == []


def test_a_spent_window_budget_clears_when_the_oldest_run_leaves_the_window(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, window_budget=2, window_secs=3600)
    first, second, third = (
        make_job(conn, run_after=T0 - timedelta(minutes=10 - n)) for n in range(3)
    )
    runs = claim_started(conn, limit=1, p_now=T0)
    runs |= claim_started(conn, limit=1, p_now=T0 + timedelta(minutes=1))
    assert runs.keys() == {first, second}
    for run in runs.values():
        finish(conn, run, "succeeded")
    now = T0 + timedelta(minutes=30)

    detail, clears = _one(_why_job(conn, third, now), "window_budget")

    assert "started 2 runs in the last 3600 s and holds 0 claimed jobs" in detail
    assert "window_budget 2" in detail
    assert clears == T0 + timedelta(hours=1)
    assert claim(conn, p_now=now) == []
    assert claim(conn, p_now=clears - timedelta(seconds=1)) == []
    assert _reasons(_why_job(conn, third, clears)) == ["ready"]
    assert claim(conn, p_now=clears) == [third]


def test_a_window_budget_filled_by_claimed_jobs_has_no_known_end(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, window_budget=1)
    first = make_job(conn, run_after=T0 - timedelta(seconds=2))
    waiting = make_job(conn, run_after=T0 - timedelta(seconds=1))
    assert claim(conn, limit=1, p_now=T0) == [first]

    detail, clears = _one(_why_job(conn, waiting, T0), "window_budget")

    assert "holds 1 claimed jobs" in detail and clears is None


def test_a_paused_lane_says_until_when_and_why(conn: psycopg.Connection) -> None:
    make_agent(conn)
    job = make_job(conn, run_after=T0)
    pause_lane(conn, "noop", T0 + timedelta(minutes=15), reason="rate limit")

    detail, clears = _one(_why_job(conn, job, T0), "lane_paused")

    assert clears == T0 + timedelta(minutes=15)
    assert "(rate limit)" in detail
    assert claim(conn, p_now=T0) == []
    assert claim(conn, p_now=clears) == [job]


def test_a_disabled_agent_holds_its_jobs_with_no_end(conn: psycopg.Connection) -> None:
    make_agent(conn, enabled=False)
    job = make_job(conn)

    detail, clears = _one(_why_job(conn, job), "agent_disabled")

    assert "set enabled = true where name = 'noop'" in detail and clears is None
    assert claim(conn) == []


def test_every_reason_that_holds_a_job_is_listed_not_only_the_first(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, enabled=False)
    job = make_job(conn, run_after=T0 + timedelta(hours=1))
    pause_lane(conn, "noop", T0 + timedelta(hours=2))

    rows = _why_job(conn, job, T0)

    assert _reasons(rows) == ["not_due", "agent_disabled", "lane_paused"]
    assert [clears for _, _, clears in rows] == [
        T0 + timedelta(hours=1),
        None,
        T0 + timedelta(hours=2),
    ]


def test_a_job_behind_older_due_work_of_its_lane_says_so(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=1)
    older = make_job(conn, run_after=T0 - timedelta(seconds=2))
    younger = make_job(conn, run_after=T0 - timedelta(seconds=1))

    assert _reasons(_why_job(conn, older, T0)) == ["ready"]
    assert _reasons(_why_job(conn, younger, T0)) == ["behind_older_jobs"]
    assert claim(conn, p_now=T0) == [older]


def test_claimed_running_and_finished_jobs_say_what_they_are(conn: psycopg.Connection) -> None:
    make_agent(conn)
    claimed = make_job(conn)
    assert claim(conn) == [claimed]
    running = make_job(conn)
    assert claim_started(conn).keys() == {running}
    cancelled = make_job(conn)
    conn.execute("select ceaseless.cancel_job(%s)", (cancelled,))

    assert "claimed by listener w1" in _one(_why_job(conn, claimed), "claimed")[0]
    assert "running by listener w1" in _one(_why_job(conn, running), "running")[0]
    assert "the job is cancelled" in _one(_why_job(conn, cancelled), "finished")[0]


def test_an_unknown_job_is_ce404(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as raised:
        _why_job(conn, UUID(int=7))
    assert raised.value.sqlstate == "CE404"
    assert "explain_job: no job with id" in str(raised.value)


def test_a_user_explains_its_own_job_and_someone_elses_is_unknown(
    conn: psycopg.Connection, login_role: Callable[..., psycopg.Connection]
) -> None:
    make_agent(conn, max_concurrent=1)
    # Another owner's running job fills the lane: its count is the lane's,
    # though alice cannot see the job itself.
    make_job(conn, run_after=T0 - timedelta(seconds=1))
    claim_started(conn, p_now=T0)
    alice = login_role("alice")
    bob = login_role("bob")
    row = alice.execute(
        "insert into ceaseless.job (kind, agent, prompt) values ('task', 'noop', 'hi') returning id"
    ).fetchone()
    assert row is not None

    assert _reasons(_why_job(alice, row[0])) == ["lane_full"]
    with pytest.raises(psycopg.Error) as raised:
        _why_job(bob, row[0])
    assert raised.value.sqlstate == "CE404"


# Routines --------------------------------------------------------------------


def test_an_event_routine_nothing_holds_is_ready_and_says_what_fires_it(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    routine = make_routine(conn, trigger_type="event", trigger_config={"pattern": "deploy"})

    detail, clears = _one(_why_routine(conn, routine), "ready")

    assert detail == 'fires on an event of user alice matching "deploy"' and clears is None


def test_a_disabled_routine_says_so_with_its_last_error(conn: psycopg.Connection) -> None:
    make_agent(conn)
    routine = make_routine(conn)
    conn.execute(
        "select ceaseless.disable_schedule('routine', %s, 'croniter refused it')", (routine,)
    )

    detail, clears = _one(_why_routine(conn, routine), "disabled")

    assert "croniter refused it" in detail and clears is None
    run = conn.execute("select ceaseless.run_routine(%s)", (routine,)).fetchone()
    assert run is not None and run_of(conn, run[0])["skip_reason"] == "disabled"


def test_a_routine_whose_agent_is_disabled_says_so(conn: psycopg.Connection) -> None:
    make_agent(conn)
    routine = make_routine(conn)
    conn.execute("update ceaseless.agents set enabled = false where name = 'noop'")

    assert _reasons(_why_routine(conn, routine)) == ["agent_disabled"]
    run = conn.execute("select ceaseless.run_routine(%s)", (routine,)).fetchone()
    assert run is not None and run_of(conn, run[0])["skip_reason"] == "agent_disabled"


def test_a_routine_in_cooldown_clears_at_its_end(conn: psycopg.Connection) -> None:
    make_agent(conn)
    routine = make_routine(
        conn,
        trigger_type="event",
        trigger_config={"pattern": "x"},
        cooldown_secs=300,
    )
    conn.execute(
        "update ceaseless.routines set last_run_at = %s where id = %s",
        (T0 - timedelta(seconds=60), routine),
    )

    detail, clears = _one(_why_routine(conn, routine, T0), "cooldown")

    assert clears == T0 + timedelta(seconds=240)
    assert "cooldown_secs is 300" in detail
    assert _reasons(_why_routine(conn, routine, clears)) == ["ready"]


def test_a_routine_at_max_concurrent_says_how_many_run(conn: psycopg.Connection) -> None:
    make_agent(conn)
    routine = make_routine(conn, max_concurrent=1)
    conn.execute("select ceaseless.run_routine(%s)", (routine,))

    detail, clears = _one(_why_routine(conn, routine), "concurrency")

    assert detail.startswith("1 runs are running of max_concurrent 1") and clears is None
    run = conn.execute("select ceaseless.run_routine(%s)", (routine,)).fetchone()
    assert run is not None and run_of(conn, run[0])["skip_reason"] == "concurrency"


def test_a_routine_held_by_its_own_run_explains_that_runs_job_too(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    routine = make_routine(conn, max_concurrent=1)
    conn.execute("select ceaseless.run_routine(%s)", (routine,))
    (job,) = claim_started(conn).items()
    state = finish(conn, job[1], "failed", error="executable 'claude' not found")
    assert state == "pending"  # in its retry backoff

    rows = _why_routine(conn, routine)

    assert _reasons(rows) == ["concurrency", "not_due"]
    detail, clears = _one(rows, "not_due")
    assert f"job {job[0]}: " in detail and "executable 'claude' not found" in detail
    assert clears is not None and clears > datetime.now(UTC)


def test_the_global_cap_holds_every_routine(conn: psycopg.Connection) -> None:
    make_agent(conn)
    routine = make_routine(conn)
    conn.execute("update ceaseless.settings set value = '0' where key = 'routine_max_running'")

    detail, clears = _one(_why_routine(conn, routine), "global_cap")

    assert "routine_max_running is 0" in detail and clears is None
    run = conn.execute("select ceaseless.run_routine(%s)", (routine,)).fetchone()
    assert run is not None and run_of(conn, run[0])["skip_reason"] == "global_cap"


def test_a_cron_routine_is_not_due_until_its_next_slot(conn: psycopg.Connection) -> None:
    make_agent(conn)
    routine = make_routine(conn, trigger_type="cron", trigger_config={"schedule": "0 9 * * *"})

    # Before any listener computed its slot.
    assert _reasons(_why_routine(conn, routine, T0)) == ["not_scheduled"]
    conn.execute(
        "select ceaseless.set_next_fires(array['routine'], array[%s::uuid], array['0 9 * * *'], "
        "array['UTC'], array[%s::timestamptz])",
        (routine, T0 + timedelta(hours=21)),
    )

    detail, clears = _one(_why_routine(conn, routine, T0), "not_due")

    assert clears == T0 + timedelta(hours=21) and detail == "next slot of 0 9 * * * (UTC)"
    assert _reasons(_why_routine(conn, routine, clears)) == ["ready"]


def test_a_routine_whose_lane_is_paused_says_its_jobs_wait(conn: psycopg.Connection) -> None:
    make_agent(conn)
    routine = make_routine(conn)
    pause_lane(conn, "noop", T0 + timedelta(minutes=5))

    detail, clears = _one(_why_routine(conn, routine, T0), "lane_paused")

    assert detail.startswith("its jobs wait: lane noop is paused until")
    assert clears == T0 + timedelta(minutes=5)


def test_every_reason_that_holds_a_routine_is_listed(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=1)
    routine = make_routine(conn, cooldown_secs=600, max_concurrent=1)
    conn.execute("select ceaseless.run_routine(%s)", (routine,))
    assert len(claim_started(conn)) == 1
    conn.execute(
        "update ceaseless.routines set enabled = false, last_run_at = now() where id = %s",
        (routine,),
    )
    conn.execute("update ceaseless.settings set value = '1' where key = 'routine_max_running'")

    assert _reasons(_why_routine(conn, routine)) == [
        "disabled",
        "cooldown",
        "concurrency",
        "running",  # the job of the run that holds the concurrency
        "global_cap",
        "lane_full",
    ]


def test_a_user_explains_its_own_routine_and_someone_elses_is_unknown(
    conn: psycopg.Connection, login_role: Callable[..., psycopg.Connection]
) -> None:
    make_agent(conn)
    alice = login_role("alice")
    bob = login_role("bob")
    row = alice.execute(
        "insert into ceaseless.routines (name, trigger_type, action_type, action_config, agent) "
        "values ('mine', 'manual', 'lightweight', '{\"prompt\": \"check\"}', 'noop') returning id"
    ).fetchone()
    assert row is not None

    assert _reasons(_why_routine(alice, row[0])) == ["ready"]
    with pytest.raises(psycopg.Error) as raised:
        _why_routine(bob, row[0])
    assert raised.value.sqlstate == "CE404"


# Topology runs ---------------------------------------------------------------


def test_a_run_awaiting_approval_names_the_node_and_when_the_approval_expires(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    run = start_run(conn, diamond(D={"gate": "approval", "approval_timeout_secs": 600}))
    for n in "ABC":
        run_node(conn, run, n)
    approval, expires = conn.execute(
        "select id, expires_at from ceaseless.approvals where topology_run_id = %s", (run,)
    ).fetchone() or (None, None)

    detail, clears = _one(_why_run(conn, run), "awaiting_approval")

    assert detail.startswith(f"node D awaits approval {approval}")
    assert f"decide_approval('{approval}', true" in detail
    assert clears == expires and clears is not None


def test_a_run_lists_the_reasons_of_its_queued_jobs_under_their_node(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    run = start_run(conn, graph([node("A")]))
    pause_lane(conn, "noop", datetime.now(UTC) + timedelta(hours=1))

    detail, clears = _one(_why_run(conn, run), "lane_paused")

    assert detail.startswith("node A: lane noop is paused until") and clears is not None
    conn.execute("delete from ceaseless.lane_pauses")
    assert _reasons(_why_run(conn, run)) == ["ready"]
    run_node(conn, run, "A")
    assert _reasons(_why_run(conn, run)) == ["finished"]


def test_an_approval_that_opens_at_its_expiry_says_so(conn: psycopg.Connection) -> None:
    make_agent(conn)
    run = start_run(conn, graph([node("A", gate="approval", approval_timeout_secs=60,
                                      on_expiry="approve")]))  # fmt: skip

    detail, clears = _one(_why_run(conn, run), "awaiting_approval")

    assert "; undecided, it is approved at " in detail and clears is not None


def test_an_approval_that_is_skipped_at_its_expiry_says_so(conn: psycopg.Connection) -> None:
    make_agent(conn)
    run = start_run(
        conn,
        graph(
            [node("A", gate="approval", approval_timeout_secs=60, on_expiry="skip"), node("B")],
            [("A", "B")],
        ),
    )

    detail, clears = _one(_why_run(conn, run), "awaiting_approval")

    assert "; undecided, it is skipped at " in detail and clears is not None
    assert "(the nodes after it run without its output)" in detail
