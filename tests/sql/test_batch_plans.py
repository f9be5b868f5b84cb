"""The batch functions stay linear in the batch, and each planner setting they carry still pays.

A listener draining short jobs claims and finishes them 1,000–2,000 at a time,
heartbeats thousands of leases at once, and after a crash a sweep expires all
the leases of the dead listener together — usually on tables young enough to
have no statistics, or whose statistics were taken before the burst. There the
planner cannot size the batch, and two plan shapes turn a batch quadratic
(seconds instead of milliseconds): a nested loop that rescans a CTE or a
transition table for every outer row, and a scan that tests every row of the
table against an array of ids.

Each `test_…_is_linear` runs a function as shipped and looks for either shape.
Each `test_without_…` takes one planner setting off (tests/sql/plans.py,
`setting_reset`) and asserts the shape it prevents comes back: the evidence
that keeps the setting (docs/performance.md, "Planner settings on functions").
When a `test_without_…` fails, the planner no longer needs the setting: drop it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from uuid import UUID

import psycopg
import pytest

from tests.factories import make_agent, make_jobs, make_routine
from tests.sql.plans import explained, nodes, setting_reset, statement

BATCH = 1_000
SCAN_OF_JOB = "scan of job against an array"


def _quadratic_shapes(plans: list[dict[str, Any]], batch: int = BATCH) -> list[str]:
    found = []
    for plan in plans:
        for node in nodes(plan["Plan"]):
            if node["Node Type"] == "CTE Scan" and node.get("Actual Loops", 1) > 1:
                found.append(f"CTE {node['CTE Name']} rescanned {node['Actual Loops']} times")
            if node.get("Rows Removed by Join Filter", 0) > batch:
                found.append(f"{node['Node Type']} discarded {node['Rows Removed by Join Filter']}")
            if (
                node["Node Type"] == "Seq Scan"
                and node["Relation Name"] in ("job", "agent_run", "routine_runs", "routines")
                and "ANY" in node.get("Filter", "")
            ):
                found.append(f"scan of {node['Relation Name']} against an array")
            if node["Node Type"] == "Named Tuplestore Scan" and node.get("Actual Loops", 1) > 1:
                name = node.get("Tuplestore Name", "a transition table")
                found.append(f"{name} rescanned {node['Actual Loops']} times")
    return found


def _claim_and_start(
    conn: psycopg.Connection, worker: str, batch: int = BATCH
) -> list[tuple[UUID, UUID]]:
    rows = conn.execute(
        "select id, run_id from ceaseless.claim_jobs(%s, %s, p_start => true)", (worker, batch)
    ).fetchall()
    assert len(rows) == batch
    return rows


def _claim_and_finish(conn: psycopg.Connection, batch: int) -> list[tuple[str]]:
    """Claim and start `batch` jobs as w1 and finish them as succeeded: their jobs' states."""
    runs = _claim_and_start(conn, "w1", batch)
    payload = json.dumps([{"run_id": str(run), "outcome": "succeeded"} for _, run in runs])
    return conn.execute(
        "select job_state from ceaseless.finish_runs('w1', %s::jsonb)", (payload,)
    ).fetchall()


def _buffers_per_row(plans: list[dict[str, Any]], rows: int) -> float:
    """The outermost statement's shared buffers, nested statements included, per row touched."""
    top = plans[-1]["Plan"]  # auto_explain logs the outermost statement last
    return (top["Shared Hit Blocks"] + top["Shared Read Blocks"]) / rows


def _young_table_with_running_jobs(conn: psycopg.Connection) -> list[tuple[UUID, UUID]]:
    """A batch of w1's running jobs next to another listener's, on a table never analysed."""
    make_agent(conn, max_concurrent=10 * BATCH)
    make_jobs(conn, 4 * BATCH)
    _claim_and_start(conn, "other")
    return _claim_and_start(conn, "w1")


def _finish_a_batch(conn: psycopg.Connection) -> list[str]:
    runs = _young_table_with_running_jobs(conn)
    payload = json.dumps([{"run_id": str(run), "outcome": "succeeded"} for _, run in runs])
    with explained(conn) as plans:
        states = conn.execute(
            "select job_state from ceaseless.finish_runs('w1', %s::jsonb)", (payload,)
        ).fetchall()
    assert states == [("delivered",)] * BATCH
    return _quadratic_shapes(plans)


def test_finishing_a_batch_on_a_young_table_is_linear(conn: psycopg.Connection) -> None:
    assert _finish_a_batch(conn) == []


def _release_a_batch(conn: psycopg.Connection) -> list[str]:
    held = [job for job, _ in _young_table_with_running_jobs(conn)]
    with explained(conn) as plans:
        released = conn.execute("select ceaseless.release_jobs('w1', %s)", (held,)).fetchone()
    assert released == (BATCH,)
    return _quadratic_shapes(plans)


def test_releasing_a_batch_on_a_young_table_is_linear(conn: psycopg.Connection) -> None:
    assert _release_a_batch(conn) == []


def _expire_a_batch(conn: psycopg.Connection) -> list[str]:
    _young_table_with_running_jobs(conn)
    with explained(conn) as plans:
        expired = conn.execute(
            "select ceaseless.expire_leases(now() + interval '1 day')"
        ).fetchone()
    assert expired == (2 * BATCH,)
    return _quadratic_shapes(plans)


def test_expiring_a_batch_on_a_young_table_never_scans_job_against_it(
    conn: psycopg.Connection,
) -> None:
    assert SCAN_OF_JOB not in _expire_a_batch(conn)


def test_expiring_a_batch_on_a_young_table_is_linear(conn: psycopg.Connection) -> None:
    assert _expire_a_batch(conn) == []


def test_expiring_a_batch_on_a_generic_plan_is_linear(conn: psycopg.Connection) -> None:
    # The plan PL/pgSQL keeps once custom plans stop paying: it knows no
    # count of ids, and sizes every batch alike.
    conn.execute("set plan_cache_mode = force_generic_plan")
    assert _expire_a_batch(conn) == []


def _sweep(conn: psycopg.Connection, leases: int) -> list[dict[str, Any]]:
    """`leases` running jobs of a vanished listener, beside as many pending, expired at once;
    the jobs come back due in a day, out of the next sweep's way."""
    make_jobs(conn, 2 * leases)
    _claim_and_start(conn, "gone", leases)
    with explained(conn) as plans:
        expired = conn.execute(
            "select ceaseless.expire_leases(now() + interval '1 day')"
        ).fetchone()
    assert expired == (leases,)
    return plans


@pytest.mark.slow
def test_a_sweep_of_twenty_thousand_leases_reads_as_much_per_lease_as_one_of_a_thousand(
    conn: psycopg.Connection,
) -> None:
    # Young throughout: no ANALYZE between the two sweeps.
    _plans_kept(conn)
    make_agent(conn, max_concurrent=100 * BATCH)
    small = _sweep(conn, BATCH)
    large = _sweep(conn, 20 * BATCH)

    assert _quadratic_shapes(large, 20 * BATCH) == []
    per_lease = (_buffers_per_row(small, BATCH), _buffers_per_row(large, 20 * BATCH))
    assert per_lease[1] <= 1.5 * per_lease[0], per_lease


def test_a_heartbeat_of_thousands_of_leases_is_linear(conn: psycopg.Connection) -> None:
    # extend_leases carries no planner setting: this is its plan on its own.
    held = [job for job, _ in _young_table_with_running_jobs(conn)]

    with explained(conn) as plans:
        answers = conn.execute(
            "select held, renewed from ceaseless.extend_leases("
            "'w1', %s, now() + interval '50 seconds', 60)",
            (held,),
        ).fetchall()

    assert answers == [(True, True)] * BATCH
    assert _quadratic_shapes(plans) == []
    renewed = conn.execute(
        "select count(*) from ceaseless.job "
        "where claimed_by = 'w1' and claim_expires_at > now() + interval '100 seconds'"
    ).fetchone()
    assert renewed == (BATCH,)


def _one_lease_heartbeats(conn: psycopg.Connection) -> None:
    """A listener's first heartbeats, one lease each: PL/pgSQL plans extend_leases for one id
    then, and keeps the plan."""
    for _ in range(10):
        ((job,),) = conn.execute("select id from ceaseless.claim_jobs('w1', 1)").fetchall()
        conn.execute(
            "select * from ceaseless.extend_leases('w1', %s, now() + interval '50 seconds', 60)",
            ([job],),
        )


def _heartbeat(conn: psycopg.Connection, held: list[UUID]) -> list[dict[str, Any]]:
    """One heartbeat of `held`, every lease past half its life and renewed."""
    with explained(conn) as plans:
        renewed = conn.execute(
            "select count(*) filter (where renewed) from ceaseless.extend_leases("
            "'w1', %s, now() + interval '50 seconds', 60)",
            (held,),
        ).fetchone()
    assert renewed == (len(held),)
    return plans


def test_a_heartbeat_after_one_lease_heartbeats_is_linear(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=10 * BATCH)
    make_jobs(conn, 4 * BATCH)
    _one_lease_heartbeats(conn)
    _claim_and_start(conn, "other")
    held = [job for job, _ in _claim_and_start(conn, "w1")]

    assert _quadratic_shapes(_heartbeat(conn, held)) == []


def test_a_heartbeat_on_a_generic_plan_is_linear(conn: psycopg.Connection) -> None:
    conn.execute("set plan_cache_mode = force_generic_plan")
    held = [job for job, _ in _young_table_with_running_jobs(conn)]

    assert _quadratic_shapes(_heartbeat(conn, held)) == []


@pytest.mark.slow
def test_a_heartbeat_of_twenty_thousand_leases_reads_as_much_per_lease_as_one_of_a_thousand(
    conn: psycopg.Connection,
) -> None:
    _plans_kept(conn)
    make_agent(conn, max_concurrent=100 * BATCH)
    make_jobs(conn, 42 * BATCH)
    _one_lease_heartbeats(conn)
    _claim_and_start(conn, "other", 20 * BATCH)
    large = [job for job, _ in _claim_and_start(conn, "w1", 20 * BATCH)]
    small = [job for job, _ in _claim_and_start(conn, "w1")]

    # The large heartbeat first, on the plans kept from the one-lease ones.
    large_plans = _heartbeat(conn, large)
    small_plans = _heartbeat(conn, small)

    assert _quadratic_shapes(large_plans, 20 * BATCH) == []
    per_lease = (_buffers_per_row(small_plans, BATCH), _buffers_per_row(large_plans, 20 * BATCH))
    assert per_lease[1] <= 1.5 * per_lease[0], per_lease


def test_a_heartbeat_leaves_fresh_leases_alone(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=BATCH)
    make_jobs(conn, 10)
    held = [job for (job,) in conn.execute("select id from ceaseless.claim_jobs('w1', 10)")]
    before = conn.execute("select sum(xmin::text::bigint) from ceaseless.job").fetchone()

    answers = conn.execute(
        "select held, renewed from ceaseless.extend_leases('w1', %s, now(), 60)", (held,)
    ).fetchall()

    # Nothing lost, and nothing rewritten: every lease still has more than
    # half its life, so it outlives the next heartbeat as it is.
    assert answers == [(True, False)] * 10
    assert conn.execute("select sum(xmin::text::bigint) from ceaseless.job").fetchone() == before


def _claim_and_finish_after_one_job_statements(conn: psycopg.Connection) -> list[str]:
    make_agent(conn, max_concurrent=10 * BATCH)
    make_jobs(conn, 2 * BATCH)
    # A listener's connection often starts with one-job claims and finishes;
    # PL/pgSQL plans the functions' and triggers' statements then and keeps
    # those plans.
    for _ in range(10):
        ((_, run),) = conn.execute(
            "select id, run_id from ceaseless.claim_jobs('w1', 1, p_start => true)"
        ).fetchall()
        payload = json.dumps([{"run_id": str(run), "outcome": "succeeded"}])
        conn.execute("select ceaseless.finish_runs('w1', %s::jsonb)", (payload,))

    with explained(conn) as plans:
        runs = _claim_and_start(conn, "w1")
        payload = json.dumps([{"run_id": str(run), "outcome": "succeeded"} for _, run in runs])
        conn.execute("select ceaseless.finish_runs('w1', %s::jsonb)", (payload,))
    return _quadratic_shapes(plans)


def test_claims_finishes_and_triggers_stay_linear_after_a_session_of_one_job_statements(
    conn: psycopg.Connection,
) -> None:
    assert _claim_and_finish_after_one_job_statements(conn) == []


# A `test_without_…` claims that a shape can come back, so one appearance proves it. What
# it needs is a session that keeps the plans its one-row statements made; the server
# throws a backend's cached plans away whenever that backend falls behind on the catalog
# changes of other databases (another test's migration, say) and has its caches reset,
# and the statement planned again for the whole batch no longer shows the shape. So each
# try is a new database and a new session, and there are several.
TRIES = 8


def _kept_plans_shapes(
    fresh_db_url: Callable[[], str],
    function: str,
    setting: str,
    statements: Callable[[psycopg.Connection], list[str]],
    wanted: str,
) -> list[str]:
    """The shapes `statements` shows with `setting` taken off `function`, in the first of
    TRIES sessions where one of them reads `wanted`; else every try's shapes."""
    tried: list[str] = []
    for _ in range(TRIES):
        with psycopg.connect(fresh_db_url(), autocommit=True) as conn:
            _plans_kept(conn)
            with setting_reset(conn, function, setting):
                shapes = statements(conn)
        if any(wanted in shape for shape in shapes):
            return shapes
        tried.extend(shapes)
    return tried


def _plans_kept(conn: psycopg.Connection) -> None:
    """No autovacuum in this database: its VACUUM and ANALYZE (frequent on job and agent_run,
    db/0091, and due on any table a burst of jobs writes) rewrite a table's statistics, which
    invalidates the plans PL/pgSQL cached from the one-row statements; the shape a
    setting-reset test looks for would then not come back by chance, not because the planner
    no longer needs the setting."""
    tables = conn.execute(
        "select c.oid::regclass::text from pg_class c "
        "where c.relnamespace = 'ceaseless'::regnamespace and c.relkind = 'r'"
    ).fetchall()
    for (table,) in tables:
        conn.execute(f"alter table {table} set (autovacuum_enabled = false)")


@pytest.mark.parametrize(
    "trigger", ["_tg_job_update", "_tg_agent_run_update", "_tg_agent_run_metrics"]
)
def test_without_enable_nestloop_an_update_trigger_rescans_its_transition_table(
    fresh_db_url: Callable[[], str], trigger: str
) -> None:
    shapes = _kept_plans_shapes(
        fresh_db_url, trigger, "enable_nestloop", _claim_and_finish_after_one_job_statements,
        "rescanned",
    )  # fmt: skip
    assert any("rescanned" in shape for shape in shapes), shapes


def _fire_routine_jobs(conn: psycopg.Connection, events: int) -> None:
    """Ten event routines, and `events` events that each fire all ten: routine jobs whose
    finish closes their runs (_close_routine_runs) and updates the ten routines."""
    conn.execute(
        "update ceaseless.settings set value = to_jsonb(%s::integer) "
        "where key = 'routine_max_running'",
        (10 * BATCH,),
    )
    for i in range(10):
        make_routine(conn, f"r{i}", "event", {"pattern": "deploy"}, max_concurrent=10 * BATCH)
    conn.execute(
        "insert into ceaseless.events (user_id, content) "
        "select 'alice', 'deploy ' || g from generate_series(1, %s) g",
        (events,),
    )


def _finish_one_routine_run(conn: psycopg.Connection) -> UUID:
    """Claim and finish one routine job; its routine run's id."""
    ((job, run),) = conn.execute(
        "select id, run_id from ceaseless.claim_jobs('w1', 1, p_start => true)"
    ).fetchall()
    payload = json.dumps(
        [{"run_id": str(run), "outcome": "succeeded", "final_message": "ROUTINE_OK"}]
    )
    conn.execute("select ceaseless.finish_runs('w1', %s::jsonb)", (payload,))
    row = conn.execute("select routine_run_id from ceaseless.job where id = %s", (job,)).fetchone()
    assert row is not None and row[0] is not None
    return UUID(str(row[0]))


def _finish_routine_runs_after_one_run_statements(conn: psycopg.Connection) -> list[str]:
    make_agent(conn, max_concurrent=10 * BATCH)
    _fire_routine_jobs(conn, BATCH // 10 + 1)
    # As a listener's session often starts: one run claimed and finished at a
    # time, so PL/pgSQL plans the close of runs for one, and keeps the plan.
    for _ in range(10):
        _finish_one_routine_run(conn)

    runs = _claim_and_start(conn, "w1")
    payload = json.dumps(
        [
            {"run_id": str(run), "outcome": "succeeded", "final_message": "ROUTINE_OK"}
            for _, run in runs
        ]
    )
    with explained(conn) as plans:
        conn.execute("select ceaseless.finish_runs('w1', %s::jsonb)", (payload,))
    closed = conn.execute(
        "select count(*) from ceaseless.routine_runs where status = 'ok'"
    ).fetchone()
    # Ten closed one at a time, a thousand together.
    assert closed == (BATCH + 10,)
    return _quadratic_shapes(plans)


def test_finishing_routine_runs_after_one_run_statements_stays_linear(
    conn: psycopg.Connection,
) -> None:
    assert _finish_routine_runs_after_one_run_statements(conn) == []


def test_without_enable_nestloop_closing_routine_runs_rescans_a_transition_table(
    fresh_db_url: Callable[[], str],
) -> None:
    shapes = _kept_plans_shapes(
        fresh_db_url, "_tg_routine_runs_update", "enable_nestloop",
        _finish_routine_runs_after_one_run_statements,
        "rescanned",
    )  # fmt: skip
    assert any("rescanned" in shape for shape in shapes), shapes


def test_without_enable_seqscan_a_claim_after_one_job_claims_scans_job_against_it(
    fresh_db_url: Callable[[], str], conn: psycopg.Connection
) -> None:
    if conn.info.server_version >= 180000:
        # PostgreSQL 18 probes the primary key on its own; the setting is
        # kept for 15 (and 16, 17: not measured).
        _plans_kept(conn)
        with setting_reset(conn, "claim_jobs", "enable_seqscan"):
            assert _claim_and_finish_after_one_job_statements(conn) == []
        return
    # The claimed ids come from a subquery, a parameter the executor
    # cannot hash: every row of job is compared with every id.
    shapes = _kept_plans_shapes(
        fresh_db_url, "claim_jobs", "enable_seqscan", _claim_and_finish_after_one_job_statements,
        SCAN_OF_JOB,
    )  # fmt: skip
    assert SCAN_OF_JOB in shapes


def test_a_fire_reads_its_routine_by_key_among_a_thousand(conn: psycopg.Connection) -> None:
    # The firing statement runs on its generic plan (plan_cache_mode), which
    # cannot size the fires: joined to routines, it hashed them against a
    # read of every routine the user has.
    make_agent(conn, max_concurrent=10 * BATCH)
    conn.execute(
        "insert into ceaseless.routines (name, user_id, agent, trigger_type, trigger_config, "
        "action_type, action_config, cooldown_secs, max_concurrent) "
        "select 'e' || g, 'alice', 'noop', 'event', "
        "jsonb_build_object('pattern', 'alert-' || g || ' '), 'lightweight', "
        '\'{"prompt": "p"}\', 0, 1000 from generate_series(1, %s) g',
        (BATCH,),
    )
    conn.execute("analyze ceaseless.routines")
    with explained(conn) as plans:
        conn.execute(
            "insert into ceaseless.events (user_id, content) values ('alice', 'alert-7 on x')"
        )
    # (Choosing the candidates may read a few routines: that read stops at
    # its LIMIT.)
    firing = statement(plans, "with input")
    scans = [
        node
        for node in nodes(firing)
        if node["Node Type"] == "Seq Scan" and node.get("Relation Name") == "routines"
    ]
    assert scans == []
    assert conn.execute("select count(*) from ceaseless.routine_runs").fetchone() == (1,)


def _block_a_batch(conn: psycopg.Connection, singles: int) -> list[str]:
    """Finish a batch of runs as auth_failed (every job blocked, each announced by
    _tg_job_ended), after `singles` one-run finishes that plan the trigger for one job."""
    runs = _young_table_with_running_jobs(conn)
    for _, run in runs[:singles]:
        payload = json.dumps([{"run_id": str(run), "outcome": "auth_failed"}])
        conn.execute("select ceaseless.finish_runs('w1', %s::jsonb)", (payload,))
    payload = json.dumps(
        [
            {"run_id": str(run), "outcome": "auth_failed", "error": "Not logged in"}
            for _, run in runs[singles:]
        ]
    )
    with explained(conn) as plans:
        states = conn.execute(
            "select job_state from ceaseless.finish_runs('w1', %s::jsonb)", (payload,)
        ).fetchall()
    assert states == [("blocked",)] * (BATCH - singles)
    assert conn.execute("select count(*) from ceaseless.notifications").fetchone() == (BATCH,)
    return _quadratic_shapes(plans)


def test_blocking_a_batch_on_a_young_table_is_linear(conn: psycopg.Connection) -> None:
    assert _block_a_batch(conn, 0) == []


def test_blocking_a_batch_after_one_job_blocks_stays_linear(conn: psycopg.Connection) -> None:
    assert _block_a_batch(conn, 10) == []


def _close_of_one_run(conn: psycopg.Connection) -> dict[str, Any]:
    """The plan of the statement that closes one routine run, with 600 running on a young
    table, after the six one-run finishes a listener's session often starts with."""
    make_agent(conn, max_concurrent=10 * BATCH)
    _fire_routine_jobs(conn, 60)
    for _ in range(6):
        _finish_one_routine_run(conn)
    with explained(conn) as plans:
        _finish_one_routine_run(conn)
    return statement(plans, "with ended")


def test_closing_one_routine_run_reads_it_by_key_however_many_are_running(
    conn: psycopg.Connection,
) -> None:
    # Given the status beside the key, the planner walked idx_routine_runs_running (every
    # running run) for the run, twice over: 39,000 buffers, 20 ms to close one run of 600.
    close = _close_of_one_run(conn)
    walks = [n for n in nodes(close) if n.get("Index Name") == "idx_routine_runs_running"]
    assert not walks, json.dumps(walks)[:2000]
    buffers = close["Shared Hit Blocks"] + close["Shared Read Blocks"]
    assert buffers < 100, buffers


def _sized_for_the_runs_given(close: dict[str, Any]) -> bool:
    """Whether the plan was made for the ids it was given (a custom plan sizes the array:
    one run), not for any (a generic plan's guess: ten)."""
    (runs,) = [n for n in nodes(close) if n.get("Function Name") == "unnest"]
    return bool(runs["Plan Rows"] == 1)


def test_routine_runs_are_closed_on_a_generic_plan_not_on_one_made_for_each_finish(
    conn: psycopg.Connection,
) -> None:
    # Left to itself, PL/pgSQL judges every custom plan of the close cheaper than the generic
    # one and plans it again at every finish: 0.5 ms of a 0.8 ms close of one run (PG 15).
    assert not _sized_for_the_runs_given(_close_of_one_run(conn))
    with setting_reset(conn, "_close_routine_runs", "plan_cache_mode"):
        for _ in range(6):
            _finish_one_routine_run(conn)
        with explained(conn) as plans:
            _finish_one_routine_run(conn)
        assert _sized_for_the_runs_given(statement(plans, "with ended"))


def _note_sessions(conn: psycopg.Connection, runs: list[UUID], session: str = "session") -> int:
    row = conn.execute(
        "select ceaseless.note_sessions('w1', %s, %s)",
        (runs, [f"{session}-{i}" for i in range(len(runs))]),
    ).fetchone()
    assert row is not None
    return int(row[0])


def _note_a_batch_of_sessions(conn: psycopg.Connection, before: str) -> list[str]:
    """The sessions of a batch of w1's open runs, beside another listener's, on a young table:
    as the first call, after ten one-run calls (as a listener's first agents report theirs),
    or on the generic plan PL/pgSQL keeps once custom plans stop paying."""
    runs = [run for _, run in _young_table_with_running_jobs(conn)]
    if before == "generic plan":
        conn.execute("set plan_cache_mode = force_generic_plan")
    if before == "single runs":
        for run in runs[:10]:
            assert _note_sessions(conn, [run], "first") == 1
    with explained(conn) as plans:
        assert _note_sessions(conn, runs) == BATCH
    return _quadratic_shapes(plans)


@pytest.mark.parametrize("before", ["nothing", "single runs", "generic plan"])
def test_noting_a_batch_of_sessions_on_a_young_table_is_linear(
    conn: psycopg.Connection, before: str
) -> None:
    # Planned for one run by the first calls, the update looped over the batch for each open
    # run: 999,000 rows discarded, 14 s for a thousand runs.
    assert _note_a_batch_of_sessions(conn, before) == []


def test_finishing_one_run_reads_it_by_key_however_many_are_open(
    conn: psycopg.Connection,
) -> None:
    # Rechecked with `finished_at is null`, the run's update read every open run through
    # agent_run_one_open_idx and hashed them against the batch: 550 buffers to finish one
    # run of 600 open, growing with the listeners' concurrency.
    make_agent(conn, max_concurrent=10 * BATCH)
    make_jobs(conn, 600)
    runs = _claim_and_start(conn, "w1", 600)

    def finish(run: UUID) -> None:
        payload = json.dumps([{"run_id": str(run), "outcome": "succeeded"}])
        conn.execute("select ceaseless.finish_runs('w1', %s::jsonb)", (payload,))

    for _, run in runs[:20]:
        finish(run)
    with explained(conn) as plans:
        finish(runs[20][1])
    main = statement(plans, "with reported")
    walks = [n for n in nodes(main) if n.get("Index Name") == "agent_run_one_open_idx"]
    assert not walks, json.dumps(walks)[:2000]
    assert main["Shared Hit Blocks"] + main["Shared Read Blocks"] < 100


def _analyzed_young(conn: psycopg.Connection) -> None:
    """Notifications analyzed young, as autovacuum does, while nothing was delivered yet."""
    conn.execute(
        "insert into ceaseless.notifications "
        "(source_table, source_id, kind, recipient, subject, body, next_attempt_at) "
        "select 'routine_runs', gen_random_uuid(), 'failure', 'ops', 'later', 'b', "
        "now() + interval '1 day' from generate_series(1, 100)"
    )
    conn.execute("analyze ceaseless.notifications")


def test_claiming_notifications_reads_them_by_key_however_many_were_delivered(
    conn: psycopg.Connection,
) -> None:
    # With the status beside the key, the NOTIFY of the rows a claim delivered read every
    # delivered row through notifications_delivered_idx and filtered them by id: 10 ms a
    # claim after 8,000 deliveries in the event load, growing until retention prunes.
    conn.execute(
        "update ceaseless.settings set value = %s where key = 'notification_sinks'",
        (json.dumps({"default": {"type": "pg", "channel": "ops"}}),),
    )

    def deliver(count: int) -> None:
        conn.execute(
            "insert into ceaseless.notifications "
            "(source_table, source_id, kind, recipient, subject, body) "
            "select 'routine_runs', gen_random_uuid(), 'failure', 'ops', 's' || g, 'b' "
            "from generate_series(1, %s) g",
            (count,),
        )
        conn.execute("select count(*) from ceaseless.claim_notifications('w1', %s)", (count,))

    _analyzed_young(conn)
    deliver(3000)
    for _ in range(5):
        deliver(1)
    with explained(conn) as plans:
        deliver(1)
    notify = statement(plans, "SELECT _announce(v_sinks")
    walks = [n for n in nodes(notify) if n.get("Index Name") == "notifications_delivered_idx"]
    assert not walks, json.dumps(walks)[:2000]
    assert notify["Shared Hit Blocks"] + notify["Shared Read Blocks"] < 20
    delivered = conn.execute(
        "select count(*) from ceaseless.notifications where status = 'delivered'"
    ).fetchone()
    assert delivered == (3006,)


def test_closing_routine_runs_trims_each_reply_once(conn: psycopg.Connection) -> None:
    # The reply's trim, written once in a lateral subquery, was pulled up into every
    # mention of it: eight calls of _trim_blank for each run closed.
    make_agent(conn, max_concurrent=10 * BATCH)
    _fire_routine_jobs(conn, 3)
    runs = _claim_and_start(conn, "w1", 30)
    payload = json.dumps(
        [
            {"run_id": str(run), "outcome": "succeeded", "final_message": reply}
            for (_, run), reply in zip(runs, ["ROUTINE_OK\n", "disk full"] * 15, strict=True)
        ]
    )
    with conn.transaction():
        conn.execute("set local track_functions = 'all'")
        conn.execute("select ceaseless.finish_runs('w1', %s::jsonb)", (payload,))
        row = conn.execute(
            "select calls from pg_stat_xact_user_functions "
            "where schemaname = 'ceaseless' and funcname = '_trim_blank'"
        ).fetchone()
    # At most once a run (equal replies may share one call).
    assert row is not None and 1 <= row[0] <= 30, row
    statuses = conn.execute(
        "select status, count(*) from ceaseless.routine_runs group by status order by status"
    ).fetchall()
    assert statuses == [("attention", 15), ("ok", 15)]


def test_finishing_a_few_runs_reads_them_by_key_among_thousands_finished(
    conn: psycopg.Connection,
) -> None:
    # Planned for a batch of a hundred (the planner's guess for any set-returning function),
    # the run's update hashed the batch against a read of every run until the table held
    # ten thousand runs or so: each finish of a young database's first runs read all the
    # runs before it (0.9 ms of a 1.5 ms finish of ten, at 3,200 runs).
    make_agent(conn, max_concurrent=10 * BATCH)
    make_jobs(conn, 3 * BATCH + 10)
    _claim_and_finish(conn, 3 * BATCH)
    with explained(conn) as plans:
        assert _claim_and_finish(conn, 10) == [("delivered",)] * 10
    main = statement(plans, "with reported")
    reads = [
        n
        for n in nodes(main)
        if n.get("Relation Name") == "agent_run" and n["Node Type"] != "ModifyTable"
    ]
    assert reads and all(n["Node Type"] == "Index Scan" for n in reads), json.dumps(reads)[:2000]
    # Three buffers a run by key; the read of every run was 90 here.
    assert all(n["Shared Hit Blocks"] + n["Shared Read Blocks"] <= 4 * 10 for n in reads)


READ_OF_EVERY_RUN = "read of every run"

# Two hundred runs fill six pages of agent_run: under the ten pages the planner counts a
# table never analyzed as, whatever it holds.
YOUNG_RUNS = 200


def _reads_of_every_run(plans: list[dict[str, Any]]) -> list[str]:
    """Each read of agent_run in a finish of ten that reached more than a hundred runs."""
    reads = [
        (
            n["Node Type"],
            int(n["Actual Rows"] * n["Actual Loops"] + n.get("Rows Removed by Filter", 0)),
        )
        for n in nodes(statement(plans, "with reported"))
        if n.get("Relation Name") == "agent_run" and n["Node Type"] != "ModifyTable"
    ]
    return [f"{READ_OF_EVERY_RUN}: {kind}, {rows} rows" for kind, rows in reads if rows > 100]


def _finish_ten_among_thousands_after_one_run_finishes(conn: psycopg.Connection) -> list[str]:
    """Ten runs finished among three thousand, in a session whose first finishes (one run
    each) planned finish_runs on a new database: each read of agent_run past the ten."""
    make_agent(conn, max_concurrent=10 * BATCH)
    make_jobs(conn, 3 * BATCH + 20)
    for _ in range(10):
        _claim_and_finish(conn, 1)
    _claim_and_finish(conn, 3 * BATCH)
    with explained(conn) as plans:
        assert _claim_and_finish(conn, 10) == [("delivered",)] * 10
    return _reads_of_every_run(plans)


def test_finishing_a_few_runs_after_a_new_databases_first_finishes_reads_them_by_key(
    conn: psycopg.Connection,
) -> None:
    # A listener's first finishes on a new database plan finish_runs while agent_run is
    # under ten pages, which the planner counts as ten; the session keeps that plan as
    # the table grows (autovacuum, whose ANALYZE would have it planned again, is off here,
    # as it is in effect for a listener faster than its naptime).
    _plans_kept(conn)
    assert _finish_ten_among_thousands_after_one_run_finishes(conn) == []


def test_without_enable_seqscan_a_finish_on_a_new_database_reads_every_run(
    conn: psycopg.Connection,
) -> None:
    # The plan the test above keeps, made here for the finish itself: while agent_run is
    # under ten pages, the runs' update hashes the batch against a read of every run. The
    # kept plan is not something this test can count on: catalog changes in any database
    # of the server (another test's DDL) can reset a session's cached plans, and the
    # finish is then planned for the table as it is by then.
    make_agent(conn, max_concurrent=10 * BATCH)
    make_jobs(conn, YOUNG_RUNS + 10)
    with setting_reset(conn, "finish_runs", "enable_seqscan"):
        _claim_and_finish(conn, YOUNG_RUNS)
        with explained(conn) as plans:
            assert _claim_and_finish(conn, 10) == [("delivered",)] * 10
    assert _reads_of_every_run(plans) == [f"{READ_OF_EVERY_RUN}: Seq Scan, {YOUNG_RUNS + 10} rows"]


def test_finishing_notifications_reads_them_by_key_however_many_were_delivered(
    conn: psycopg.Connection,
) -> None:
    # A listener reports a handful of deliveries at a time. Read as a JSON array, the
    # report was guessed at a hundred rows, and against that many the planner hashed it
    # against a read of every notification: each report read all the notifications
    # kept, until retention pruned them.
    conn.execute(
        "update ceaseless.settings set value = %s where key = 'notification_sinks'",
        (json.dumps({"default": {"type": "webhook", "url": "http://127.0.0.1:9/hook"}}),),
    )

    def deliver(count: int) -> list[tuple[Any, ...]]:
        conn.execute(
            "insert into ceaseless.notifications "
            "(source_table, source_id, kind, recipient, subject, body) "
            "select 'routine_runs', gen_random_uuid(), 'failure', 'ops', 's' || g, 'b' "
            "from generate_series(1, %s) g",
            (count,),
        )
        claimed = conn.execute(
            "select id, attempts from ceaseless.claim_notifications('w1', %s)", (count,)
        ).fetchall()
        report = [{"id": str(id_), "ok": True, "attempt": attempts} for id_, attempts in claimed]
        return conn.execute(
            "select id, status from ceaseless.finish_notifications('w1', %s::jsonb)",
            (json.dumps(report),),
        ).fetchall()

    _analyzed_young(conn)
    assert len(deliver(3000)) == 3000
    for _ in range(5):
        deliver(2)
    with explained(conn) as plans:
        finished = deliver(2)
    assert [status for _, status in finished] == ["delivered", "delivered"]
    # Neither the claim nor the report reads the notifications kept.
    scans = [
        plan["Query Text"][:200]
        for plan in plans
        for n in nodes(plan["Plan"])
        if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "notifications"
    ]
    assert not scans, scans
    # Two rows locked and updated by key: a few buffers each, not the 3,100 rows' pages.
    report = statement(plans, "select id, status from ceaseless.finish_notifications")
    assert report["Shared Hit Blocks"] + report["Shared Read Blocks"] < 40
