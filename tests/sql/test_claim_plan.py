"""The claim is O(due work): its plan walks job_claimable_idx and its buffers stay flat.

The claim runs inside a PL/pgSQL function, so the plan is read with auto_explain
(tests/sql/plans.py): the real statement as the listener runs it.

claim_jobs carries enable_seqscan = off and jit = off. Finding the work must not
depend on either, so the plan of the claim is read with enable_seqscan taken
off the function: a scan of the backlog then shows (what the setting is for is
tested in tests/sql/test_batch_plans.py). jit = off is tested here.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.factories import claim, make_agent, make_jobs
from tests.sql.plans import explained, nodes, setting_reset, statement


def _claim_plans(conn: psycopg.Connection) -> list[dict[str, Any]]:
    with explained(conn) as plans, conn.transaction(force_rollback=True):
        claimed = conn.execute("select count(*) from ceaseless.claim_jobs('w1', 10)").fetchone()
        assert claimed == (10,)
    return plans


def _claim_plan(conn: psycopg.Connection) -> dict[str, Any]:
    return statement(_claim_plans(conn), "with lane")


def _picked(plan: dict[str, Any]) -> dict[str, Any]:
    return next(n for n in nodes(plan) if n.get("Subplan Name") == "CTE picked")


def _buffers(plan: dict[str, Any]) -> int:
    return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])


def test_claim_uses_the_partial_index_and_its_buffers_do_not_grow_with_the_backlog(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, max_concurrent=100)
    make_jobs(conn, 1_000)
    conn.execute("analyze ceaseless.job")
    with setting_reset(conn, "claim_jobs", "enable_seqscan"):
        # Each measured warm: the first claim after an analyze plans the nested
        # statements of _lane_capacity again, and their catalog reads, which
        # vary with the session's caches, count in `picked`'s buffers.
        _claim_plan(conn)
        small = _claim_plan(conn)
        make_jobs(conn, 99_000)
        conn.execute("analyze ceaseless.job")
        _claim_plan(conn)
        large = _claim_plan(conn)

    for plan in (small, large):
        index_scans = [n for n in nodes(plan) if n.get("Index Name") == "job_claimable_idx"]
        assert index_scans, json.dumps(plan)[:2000]
    # With a large backlog no step may scan the job table. (With a small one
    # the planner may rightly prefer reading its few pages to ten index probes.)
    seq = [
        n for n in nodes(large) if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "job"
    ]
    assert not seq, json.dumps(large, indent=1)
    # Finding the work (the `picked` CTE) must cost the same at any backlog.
    # Updating the ten claimed rows touches every index of job once per row,
    # so a hundred times the backlog may add a btree level to each of those
    # descents (logarithmic), never a scan of the backlog (linear: thousands).
    picked_small, picked_large = _buffers(_picked(small)), _buffers(_picked(large))
    assert picked_large <= picked_small + 2, (picked_small, picked_large)
    assert _buffers(large) <= _buffers(small) * 1.5, (_buffers(small), _buffers(large))


def _claim_compiled(plans: list[dict[str, Any]]) -> bool:
    """Whether the claiming statement was JIT-compiled (the triggers it fires may be: they
    are not the claim's, and carry no setting)."""
    (claim,) = [p for p in plans if p["Query Text"].lstrip().startswith("with lane")]
    return bool(claim.get("JIT", {}).get("Functions"))


def test_a_claim_is_never_jit_compiled(conn: psycopg.Connection) -> None:
    # The claim's estimated cost grows with the backlog (about 136,000 at
    # 300,000 pending jobs, past jit_above_cost's default of 100,000), and on
    # PostgreSQL 15 compiling it took 135-220 ms of a 160-430 ms claim that
    # takes 8-30 ms without. A zero threshold stands in for that backlog.
    if conn.execute("select pg_jit_available()").fetchone() != (True,):
        pytest.skip("this server has no JIT to turn off")
    make_agent(conn, max_concurrent=100)
    make_jobs(conn, 100)
    conn.execute("set jit_above_cost = 0")

    assert not _claim_compiled(_claim_plans(conn))
    with setting_reset(conn, "claim_jobs", "jit"):
        assert _claim_compiled(_claim_plans(conn)), "without jit = off the claim is not compiled"


def _backlog(conn: psycopg.Connection, jobs: int, keys: int, spread: str) -> None:
    """`jobs` pending jobs spread evenly over `keys` owners, or over `keys` fairness keys of
    one owner: the same names at any size, so a larger backlog deepens the same keys."""
    owner = f"'owner' || (g %% {keys})" if spread == "owners" else "'ann'"
    key = f"'key' || (g %% {keys})" if spread == "keys" else owner
    conn.execute(
        sql.SQL(
            "insert into ceaseless.job (kind, agent, prompt, user_id, fairness_key) "
            "select 'task', 'noop', 'job ' || g, {}, {} from generate_series(1, %s) g"
        ).format(sql.SQL(owner), sql.SQL(key)),  # type: ignore[arg-type]
        (jobs,),
    )


def _walks(plans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The statements of _round_robin_pick that read the job table: the walk over the owners
    with due work, and one pick per round."""
    return [
        p["Plan"]
        for p in plans
        if p["Query Text"].lstrip().startswith(("with recursive", "select o.ord"))
    ]


@pytest.mark.parametrize(
    ("fairness", "spread"),
    [("fifo", "owners"), ("round_robin", "owners"), ("round_robin", "keys")],
)
def test_claim_at_a_hundred_thousand_jobs_over_a_thousand_keys_reads_only_what_it_claims(
    conn: psycopg.Connection, fairness: str, spread: str
) -> None:
    make_agent(conn, max_concurrent=100, fairness=fairness)
    _backlog(conn, 100_000, 1_000, spread)
    # A lane that has served every owner before: each has its key turn recorded.
    conn.execute(
        "insert into ceaseless.owner_turns (agent, user_id, fairness_key) "
        "select 'noop', 'owner' || g, 'owner' || g from generate_series(0, 999) g"
    )
    conn.execute("vacuum analyze ceaseless.job, ceaseless.owner_turns")
    with setting_reset(conn, "claim_jobs", "enable_seqscan"):
        _claim_plans(conn)  # the session's first claim plans its statements
        plans = _claim_plans(conn)
    claim = statement(plans, "with lane")
    walks = _walks(plans)
    if fairness == "fifo":
        assert any(n.get("Index Name") == "job_claimable_idx" for n in nodes(claim))
        assert not walks
    else:
        # One statement walks the owners and takes the first round; a further statement
        # per round: none when ten owners fill the ten slots, nine when one owner's keys
        # take turns. Each probe of job_fair_claim_idx costs a few buffers: one per owner
        # (landing on its job), at most one more per job and one for the ring's end, never
        # one per key waiting.
        assert len(walks) == (1 if spread == "owners" else 10), len(walks)
        for walk in walks:
            scans = [
                n
                for n in nodes(walk)
                if n.get("Relation Name") == "job" or str(n.get("Index Name")).startswith("job_")
            ]
            assert scans and all(n.get("Index Name") == "job_fair_claim_idx" for n in scans), (
                json.dumps(walk)[:2000]
            )
            # Each served owner's key turn is a probe of its own, not a read of every
            # owner's turn in the lane.
            turns = [
                n
                for n in nodes(walk)
                if "owner_turns" in (str(n.get("Relation Name")), str(n.get("Index Name")))
            ]
            read = sum(float(n["Actual Rows"]) * int(n["Actual Loops"]) for n in turns)
            assert read <= 10, json.dumps(turns)[:2000]
            probes = sum(int(n["Actual Loops"]) for n in scans)
            assert probes <= 3 * 10 + 1, probes
            assert _buffers(walk) <= 6 * probes, (_buffers(walk), probes)
    seq = [
        n
        for plan in [claim, *walks]
        for n in nodes(plan)
        if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "job"
    ]
    assert not seq
    # Ten jobs found with a few buffers each, and the turn written: reading the thousand
    # keys would take a thousand buffers and more, the backlog thousands.
    assert _buffers(_picked(claim)) < 300, _buffers(_picked(claim))


def _claims_on_generic_plans(conn: psycopg.Connection) -> tuple[bool, bool]:
    """Whether a claim of one slot ran its main statement and _round_robin_pick's first
    round on their generic plans, after the claims PL/pgSQL plans afresh before it may
    settle on them: a custom plan has the values in it (the claim's time, the lane's name),
    a generic plan parameters."""
    for _ in range(6):
        with conn.transaction(force_rollback=True):
            claim(conn, limit=1)
    with explained(conn) as plans, conn.transaction(force_rollback=True):
        assert len(claim(conn, limit=1)) == 1
    main = statement(plans, "with lane")
    (walk,) = [p for p in plans if p["Query Text"].lstrip().startswith("with recursive")]
    return (
        "timestamp with time zone" not in json.dumps(main),
        "'noop'" not in json.dumps(walk["Plan"]),
    )


def test_a_claim_runs_on_generic_plans_not_on_plans_made_for_each_claim(
    conn: psycopg.Connection,
) -> None:
    # Their shapes do not depend on the values, but the main statement's custom plans look
    # cheaper than its generic one, so PL/pgSQL, left to itself, plans it again on every
    # claim of one slot (0.33 ms of a 1.0 ms claim, PostgreSQL 15 and 18); claim_jobs'
    # plan_cache_mode holds for the round-robin pick it calls too, which settles on its
    # generic plan either way.
    make_agent(conn, max_concurrent=100, fairness="round_robin")
    _backlog(conn, 10_000, 100, "owners")
    conn.execute("vacuum analyze ceaseless.job")
    assert _claims_on_generic_plans(conn) == (True, True)
    with setting_reset(conn, "claim_jobs", "plan_cache_mode"):
        main_generic, _ = _claims_on_generic_plans(conn)
        assert not main_generic


def test_round_robin_probes_test_the_due_time_on_the_rows_they_take_not_in_the_index(
    conn: psycopg.Connection,
) -> None:
    # As an index condition, run_after was tested on every entry of the leaf page a probe
    # lands on before the one entry it takes (functions/10_jobs.sql, _round_robin_pick).
    make_agent(conn, max_concurrent=100, fairness="round_robin")
    _backlog(conn, 10_000, 100, "owners")
    conn.execute("vacuum analyze ceaseless.job")
    plans = _claim_plans(conn)
    scans = [
        n
        for walk in _walks(plans)
        for n in nodes(walk)
        if n.get("Index Name") == "job_fair_claim_idx" and float(n["Actual Loops"]) > 0
    ]
    assert scans
    # The one backward probe finds where the ring ends (the lane's last owner with a
    # pending job): a bound, which tests no due time.
    (bound,) = [scan for scan in scans if scan["Scan Direction"] == "Backward"]
    assert "run_after" not in json.dumps(bound)
    for scan in scans:
        if scan is bound:
            continue
        assert "run_after" not in scan.get("Index Cond", ""), json.dumps(scan)[:2000]
        assert "run_after" in scan.get("Filter", ""), json.dumps(scan)[:2000]
