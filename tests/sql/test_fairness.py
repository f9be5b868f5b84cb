"""Fairness and priority within a lane: claim_jobs in fifo and round_robin lanes.

A fifo lane takes the highest priority first, then the job due first. A round_robin lane
takes one job per owner in turn, and within an owner one per fairness key in turn
(_round_robin_pick), so a deep backlog of one key cannot hold back another's one job.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from uuid import UUID

import psycopg
import pytest

from tests.factories import claim, claim_started, finish, make_agent, make_job, make_routine
from tests.sql.loops import make_loop

Connect = Callable[..., psycopg.Connection]

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def _jobs(
    conn: psycopg.Connection,
    count: int,
    *,
    user_id: str,
    key: str | None = None,
    agent: str = "noop",
    due: datetime = NOW - timedelta(hours=1),
    priority: int = 0,
) -> None:
    """`count` pending jobs of one owner and key, due one second apart from `due` on."""
    conn.execute(
        "insert into ceaseless.job (kind, agent, prompt, user_id, fairness_key, run_after, "
        "priority) "
        "select 'task', %s, 'job ' || g, %s, %s, %s + g * interval '1 second', %s "
        "from generate_series(1, %s) g",
        (agent, user_id, key or user_id, due, priority, count),
    )


def _owners(conn: psycopg.Connection, ids: list[UUID]) -> list[tuple[str, str]]:
    rows = conn.execute(
        "select user_id, fairness_key from ceaseless.job j "
        "join unnest(%s::uuid[]) with ordinality as x(id, n) on x.id = j.id order by x.n",
        (ids,),
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def _claim_order(conn: psycopg.Connection, claims: int, limit: int = 1) -> list[tuple[str, str]]:
    served: list[tuple[str, str]] = []
    for _ in range(claims):
        served += _owners(conn, claim(conn, limit=limit, p_now=NOW))
    return served


def _claimed_one_by_one(conn: psycopg.Connection, claims: int) -> list[UUID]:
    """The order of a lane's claims (a claim returns its batch in no particular order)."""
    return [job for _ in range(claims) for job in claim(conn, limit=1, p_now=NOW)]


@pytest.mark.parametrize("apart", ["owners", "keys of one owner"])
def test_round_robin_claims_the_one_job_of_another_key_in_the_first_batch_behind_ten_thousand(
    conn: psycopg.Connection, apart: str
) -> None:
    make_agent(conn, max_concurrent=2, fairness="round_robin")
    _jobs(conn, 10_000, user_id="ann", key="a")
    # B's one job is the newest of all: in due order it would be the 10,001st.
    lone = make_job(
        conn,
        user_id="ann" if apart == "keys of one owner" else "ben",
        fairness_key="b",
        run_after=NOW,
    )
    batch = claim(conn, limit=10, p_now=NOW)
    assert len(batch) == 2
    assert lone in batch


def test_fifo_lane_claims_the_backlog_first_where_round_robin_would_not(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, max_concurrent=2)
    _jobs(conn, 100, user_id="ann", key="a")
    lone = make_job(conn, user_id="ben", fairness_key="b", run_after=NOW)
    assert lone not in claim(conn, limit=10, p_now=NOW)


def test_round_robin_serves_every_owner_once_before_any_owner_twice_across_claims(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, max_concurrent=100, fairness="round_robin")
    for owner, count in (("ann", 5), ("ben", 1), ("cat", 3)):
        _jobs(conn, count, user_id=owner)
    owners = [o for o, _ in _claim_order(conn, 9)]
    assert owners == ["ann", "ben", "cat", "ann", "cat", "ann", "cat", "ann", "ann"]


def test_round_robin_takes_rounds_within_one_claim(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=100, fairness="round_robin")
    for owner, count in (("ann", 5), ("ben", 1), ("cat", 3)):
        _jobs(conn, count, user_id=owner)
    owners = [o for o, _ in _owners(conn, claim(conn, limit=7, p_now=NOW))]
    assert sorted(owners) == ["ann", "ann", "ann", "ben", "cat", "cat", "cat"]
    # The turn moved to cat, the last served: the next claim starts with ann.
    assert [o for o, _ in _claim_order(conn, 1)] == ["ann"]


def test_round_robin_goes_round_the_ring_within_one_claim_and_serves_the_turns_owner_last(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, max_concurrent=100, fairness="round_robin")
    for owner in ("ann", "ben", "cat", "dan"):
        _jobs(conn, 3, user_id=owner)
    assert sorted(o for o, _ in _owners(conn, claim(conn, limit=2, p_now=NOW))) == ["ann", "ben"]
    # After ben: cat and dan, then round from the first owner to ben himself, served last.
    served = [o for o, _ in _owners(conn, claim(conn, limit=4, p_now=NOW))]
    assert sorted(served) == ["ann", "ben", "cat", "dan"]
    assert [o for o, _ in _claim_order(conn, 1)] == ["cat"]
    # A claim of three after cat: dan, then ann and ben round the ring; the turn stops at ben.
    assert sorted(o for o, _ in _owners(conn, claim(conn, limit=3, p_now=NOW))) == [
        "ann", "ben", "dan",
    ]  # fmt: skip
    assert [o for o, _ in _claim_order(conn, 1)] == ["cat"]


def test_round_robin_takes_turns_across_an_owners_keys_inside_its_own_turn(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, max_concurrent=100, fairness="round_robin")
    _jobs(conn, 3, user_id="ann", key="k1")
    _jobs(conn, 3, user_id="ann", key="k2")
    _jobs(conn, 3, user_id="ben")
    assert _claim_order(conn, 6) == [
        ("ann", "k1"), ("ben", "ben"), ("ann", "k2"), ("ben", "ben"), ("ann", "k1"),
        ("ben", "ben"),
    ]  # fmt: skip


def test_round_robin_orders_a_keys_jobs_by_priority_then_due_time(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, max_concurrent=100, fairness="round_robin")
    old_low = make_job(conn, user_id="ann", run_after=NOW - timedelta(hours=2), priority=-5)
    late_high = make_job(conn, user_id="ann", run_after=NOW - timedelta(minutes=1), priority=10)
    early_high = make_job(conn, user_id="ann", run_after=NOW - timedelta(minutes=5), priority=10)
    assert _claimed_one_by_one(conn, 3) == [early_high, late_high, old_low]


def test_fifo_lane_claims_higher_priority_first_then_the_job_due_first(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, max_concurrent=100)
    old_low = make_job(conn, run_after=NOW - timedelta(hours=2))
    late_high = make_job(conn, run_after=NOW - timedelta(minutes=1), priority=10)
    early_high = make_job(conn, run_after=NOW - timedelta(minutes=5), priority=10)
    urgent = make_job(conn, run_after=NOW - timedelta(seconds=1), priority=1000)
    assert _claimed_one_by_one(conn, 4) == [urgent, early_high, late_high, old_low]


@pytest.mark.parametrize("fairness", ["fifo", "round_robin"])
def test_a_high_priority_job_not_yet_due_waits_and_holds_back_nothing(
    conn: psycopg.Connection, fairness: str
) -> None:
    make_agent(conn, max_concurrent=100, fairness=fairness)
    later = make_job(conn, user_id="ann", run_after=NOW + timedelta(hours=1), priority=1000)
    due = make_job(conn, user_id="ann", run_after=NOW - timedelta(minutes=1))
    assert claim(conn, limit=10, p_now=NOW) == [due]
    assert claim(conn, limit=10, p_now=NOW + timedelta(hours=2)) == [later]


def test_round_robin_passes_the_turn_of_an_owner_over_its_spend_budget(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, max_concurrent=100, fairness="round_robin")
    _jobs(conn, 3, user_id="ann")
    _jobs(conn, 1, user_id="ben")
    conn.execute(
        "insert into ceaseless.owner_budgets (user_id, window_cost_usd) values ('ann', 0.01)"
    )
    spent = make_job(conn, user_id="ann", run_after=NOW - timedelta(days=1))
    runs = claim_started(conn, limit=1, p_now=NOW - timedelta(hours=2))
    finish(conn, runs[spent], "succeeded", cost_usd=1)
    assert [o for o, _ in _owners(conn, claim(conn, limit=10, p_now=NOW))] == ["ben"]


def test_round_robin_filters_by_kind(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=100, fairness="round_robin")
    make_job(conn, user_id="ann", run_after=NOW - timedelta(minutes=2))
    routine_kind = make_job(conn, user_id="ann", kind="routine", run_after=NOW)
    assert claim(conn, limit=10, p_now=NOW, p_kinds=["routine"]) == [routine_kind]


def test_two_claimers_of_a_round_robin_lane_never_claim_one_job(
    conn: psycopg.Connection, db_url: str
) -> None:
    make_agent(conn, max_concurrent=100, fairness="round_robin")
    for owner in ("ann", "ben", "cat"):
        _jobs(conn, 4, user_id=owner)
    got: dict[str, list[UUID]] = {}
    with psycopg.connect(db_url) as first:
        # The first claim holds the lane's lock until it commits; the second
        # waits for it, then sees its claims and takes the rest.
        got["first"] = claim(first, worker="w1", limit=6, p_now=NOW)

        def second() -> None:
            with psycopg.connect(db_url, autocommit=True) as other:
                got["second"] = claim(other, worker="w2", limit=100, p_now=NOW)

        thread = threading.Thread(target=second)
        thread.start()
        thread.join(timeout=1)
        assert thread.is_alive(), "the second claimer must wait for the lane lock"
        first.commit()
        thread.join()
    assert len(got["first"]) == 6 and len(got["second"]) == 6
    assert not set(got["first"]) & set(got["second"])


@pytest.mark.parametrize(
    ("sql", "constraint", "value"),
    [
        ("insert into ceaseless.job (kind, agent, prompt, priority) "
         "values ('task', 'noop', 'p', 5000)", "priority_bounded", "5000"),
        ("insert into ceaseless.job (kind, agent, prompt, priority) "
         "values ('task', 'noop', 'p', -1001)", "priority_bounded", "-1001"),
        ("insert into ceaseless.job (kind, agent, prompt, fairness_key) "
         "values ('task', 'noop', 'p', '')", "fairness_key_bounded", "task"),
        ("insert into ceaseless.job (kind, agent, prompt, fairness_key) "
         "values ('task', 'noop', 'p', repeat('k', 201))", "fairness_key_bounded", "kkkk"),
        ("insert into ceaseless.agents (name, adapter, fairness) "
         "values ('lotto', 'noop', 'lottery')", "fairness_known", "lottery"),
        ("insert into ceaseless.routines (name, user_id, trigger_type, action_type, "
         "action_config, agent, job_priority) values ('r', 'ann', 'manual', 'lightweight', "
         "'{\"prompt\": \"p\"}', 'noop', 1001)", "job_priority_bounded", "1001"),
        ("insert into ceaseless.routines (name, user_id, trigger_type, action_type, "
         "action_config, agent, job_fairness_key) values ('r', 'ann', 'manual', 'lightweight', "
         "'{\"prompt\": \"p\"}', 'noop', '')", "job_fairness_key_bounded", "lightweight"),
    ],
)  # fmt: skip
def test_bad_priority_fairness_key_or_fairness_is_refused_at_insert_naming_rule_and_value(
    conn: psycopg.Connection, sql: str, constraint: str, value: str
) -> None:
    make_agent(conn)
    with pytest.raises(psycopg.errors.CheckViolation) as error:
        conn.execute(sql)
    assert error.value.diag.constraint_name == constraint
    assert value in (error.value.diag.message_detail or "")


def test_a_job_keyed_by_default_waits_for_its_owners_turn(conn: psycopg.Connection) -> None:
    make_agent(conn)
    job = make_job(conn, user_id="ann")
    row = conn.execute(
        "select user_id, fairness_key, priority from ceaseless.job where id = %s", (job,)
    ).fetchone()
    # Inserted by this test's role on ann's behalf: a key left out is the inserting
    # role's, as user_id's default is; routines, loops and the forge name the owner.
    assert row is not None and row[2] == 0
    inserted_by_user = conn.execute(
        "select fairness_key = current_user from ceaseless.job where id = %s", (job,)
    ).fetchone()
    assert inserted_by_user == (True,)


def test_routine_jobs_carry_the_routines_priority_and_fairness_key(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    keyed = make_routine(conn, name="keyed", job_priority=7, job_fairness_key="nightly")
    plain = make_routine(conn, name="plain")
    jobs = {}
    for name, routine in (("keyed", keyed), ("plain", plain)):
        conn.execute("select ceaseless.run_routine(%s)", (routine,))
        jobs[name] = conn.execute(
            "select j.priority, j.fairness_key from ceaseless.job j "
            "join ceaseless.routine_runs r on r.job_id = j.id where r.routine_id = %s",
            (routine,),
        ).fetchone()
    assert jobs == {"keyed": (7, "nightly"), "plain": (0, "alice")}


def test_loop_node_jobs_carry_the_loops_priority_and_fairness_key(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    loop = make_loop(conn, user_id="ann", job_priority=-3, job_fairness_key="research")
    conn.execute("select ceaseless.run_loop(%s)", (loop,))
    row = conn.execute(
        "select j.priority, j.fairness_key, j.user_id from ceaseless.job j "
        "join ceaseless.topology_runs r on r.id = j.topology_run_id where r.loop_id = %s",
        (loop,),
    ).fetchone()
    assert row == (-3, "research", "ann")


def test_alice_sets_priority_and_keys_on_her_jobs_but_wins_none_of_bobs_turns(
    conn: psycopg.Connection, login_role: Connect
) -> None:
    make_agent(conn, max_concurrent=2, fairness="round_robin")
    alice, bob = login_role("alice"), login_role("bob")
    bob_name = str(bob.execute("select current_user").fetchone()[0])  # type: ignore[index]
    bobs = make_job(bob, run_after=NOW + timedelta(seconds=1))
    # Alice names bob's key, and a hundred keys of her own, all at top priority.
    alice.execute(
        "insert into ceaseless.job (kind, agent, prompt, priority, fairness_key) "
        "select 'task', 'noop', 'mine', 1000, case when g %% 2 = 0 then %s else 'k' || g end "
        "from generate_series(1, 100) g",
        (bob_name,),
    )
    assert alice.execute(
        "select count(*) from ceaseless.job where priority = 1000 and fairness_key = %s",
        (bob_name,),
    ).fetchone() == (50,)
    # Two slots: one turn per owner, whatever keys alice chose.
    batch = claim(conn, limit=10, p_now=datetime.now(UTC) + timedelta(minutes=1))
    assert bobs in batch and len(batch) == 2
    # Her grants let her choose these columns at insert only: bob's job (or her own)
    # cannot be reprioritised afterwards.
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.execute("update ceaseless.job set priority = -1000 where id = %s", (bobs,))
    seen = alice.execute("select count(*) from ceaseless.job where id = %s", (bobs,)).fetchone()
    assert seen == (0,)


def _why(conn: psycopg.Connection, job: UUID) -> list[tuple[str, str]]:
    rows = conn.execute(
        "select reason, detail from ceaseless.explain_job(%s, %s)", (job, NOW)
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def test_explain_job_says_a_round_robin_job_waits_for_other_turns(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, max_concurrent=2, fairness="round_robin")
    _jobs(conn, 5, user_id="ann")
    _jobs(conn, 5, user_id="ben")
    cat = make_job(conn, user_id="cat", run_after=NOW)
    (reason, detail), *_ = _why(conn, cat)
    assert reason == "behind_other_turns"
    assert "at least 2 other owners" in detail and "2 free slots" in detail
    conn.execute("update ceaseless.agents set max_concurrent = 10")
    assert _why(conn, cat)[0][0] == "ready"


def test_explain_job_says_a_fifo_job_waits_behind_higher_priority(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, max_concurrent=1)
    old = make_job(conn, run_after=NOW - timedelta(hours=1))
    urgent = make_job(conn, run_after=NOW, priority=10)
    assert _why(conn, urgent)[0][0] == "ready"
    assert _why(conn, old)[0][0] == "behind_older_jobs"


def test_round_robin_asked_for_some_kinds_skips_owners_without_them(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, max_concurrent=100, fairness="round_robin")
    for owner in ("ann", "ben", "cat"):
        _jobs(conn, 2, user_id=owner)
    wanted = make_job(conn, user_id="dan", kind="routine", run_after=NOW)
    assert claim(conn, limit=2, p_now=NOW, p_kinds=["routine"]) == [wanted]


def test_job_queue_and_governor_usage_show_priority_key_and_fairness(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, fairness="round_robin")
    job = make_job(conn, user_id="ann", priority=3, fairness_key="acme")
    row = conn.execute(
        "select priority, fairness_key from ceaseless.job_queue where id = %s", (job,)
    ).fetchone()
    assert row == (3, "acme")
    stuck = conn.execute("select count(*) from ceaseless.stuck_jobs").fetchone()
    assert stuck == (0,)
    lane = conn.execute("select fairness from ceaseless.governor_usage").fetchone()
    assert lane == ("round_robin",)
