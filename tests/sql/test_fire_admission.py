"""Fire admission: fires far below the cap run side by side, and every guardrail stays exact.

While the running count is far from the cap, fires are admitted shared
(_admit_fires, functions/41_fire_admission.sql): the fire lock in shared mode,
the slots its size needs of sixteen, and a per-routine lock only for routines
whose dedup or max_concurrent could bind. Near the cap they are admitted exclusive. These
tests race producers against each guardrail and check it held exactly, and pin
the one error a second fire in a shared transaction can meet.
"""

from __future__ import annotations

import threading
from collections import Counter

import psycopg
import pytest

from tests.factories import make_agent, make_routine
from tests.sql.plans import explained, nodes

PRODUCERS = 4


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=100_000)
    # Far from every fire here, unless a test brings it near: fires are
    # admitted shared.
    _set_cap(conn, 100_000)


def _set_cap(conn: psycopg.Connection, cap: int) -> None:
    conn.execute(
        "update ceaseless.settings set value = to_jsonb(%s::integer) "
        "where key = 'routine_max_running'",
        (cap,),
    )


def _race(url: str, contents: list[list[str]]) -> Counter[str]:
    """One connection per list, inserting its contents as alice's events all at once; the
    SQLSTATEs of the inserts that failed."""
    go = threading.Barrier(len(contents))
    errors: Counter[str] = Counter()

    def produce(share: list[str]) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            go.wait()
            for content in share:
                try:
                    conn.execute(
                        "insert into ceaseless.events (user_id, content) values ('alice', %s)",
                        (content,),
                    )
                except psycopg.Error as exc:
                    errors[exc.sqlstate or type(exc).__name__] += 1

    threads = [threading.Thread(target=produce, args=(share,)) for share in contents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def _runs(conn: psycopg.Connection) -> Counter[str]:
    rows = conn.execute(
        "select coalesce(skip_reason, status), count(*) from ceaseless.routine_runs group by 1"
    ).fetchall()
    return Counter(dict(rows))


def test_racing_fires_of_a_routine_allowed_one_run_start_exactly_one(
    conn: psycopg.Connection, db_url: str
) -> None:
    make_routine(conn, "one", "event", {"pattern": "deploy"}, max_concurrent=1)
    shares = [[f"deploy {p}-{i}" for i in range(50)] for p in range(PRODUCERS)]

    assert _race(db_url, shares) == Counter()
    assert _runs(conn) == Counter({"running": 1, "concurrency": 50 * PRODUCERS - 1})


def test_racing_fires_of_the_same_content_start_it_once(
    conn: psycopg.Connection, db_url: str
) -> None:
    make_routine(
        conn,
        "dedup",
        "event",
        {"pattern": "deploy"},
        max_concurrent=100_000,
        dedup_window_secs=3600,
    )
    shares = [[f"deploy {i}" for i in range(50)] for _ in range(PRODUCERS)]

    assert _race(db_url, shares) == Counter()
    assert _runs(conn) == Counter({"running": 50, "dedup": 50 * (PRODUCERS - 1)})


def test_racing_fires_past_half_the_cap_fill_it_exactly(
    conn: psycopg.Connection, db_url: str
) -> None:
    # A cap of 320 is sixteen slots of ten: fires are admitted shared until
    # 160 runs, exclusive after, and the last place is taken exactly once.
    _set_cap(conn, 320)
    make_routine(conn, "many", "event", {"pattern": "deploy"}, max_concurrent=100_000)
    shares = [[f"deploy {p}-{i}" for i in range(120)] for p in range(PRODUCERS)]

    assert _race(db_url, shares) == Counter()
    assert _runs(conn) == Counter({"running": 320, "global_cap": 120 * PRODUCERS - 320})
    (running,) = conn.execute("select sum(running) from ceaseless.routine_run_shards").fetchone()
    assert running == 320


def test_a_second_fire_that_would_wait_out_of_order_fails_with_40001(
    conn: psycopg.Connection, db_url: str
) -> None:
    make_routine(conn, "free", "event", {"pattern": "build"}, max_concurrent=100_000)
    # A dedup window makes its fires take the routine's own lock.
    make_routine(
        conn,
        "keyed",
        "event",
        {"pattern": "deploy"},
        max_concurrent=100_000,
        dedup_window_secs=3600,
    )
    with psycopg.connect(db_url) as holder, psycopg.connect(db_url) as second:
        holder.execute(
            "insert into ceaseless.events (user_id, content) values ('alice', 'deploy a')"
        )
        # Its first fire is admitted shared; its second needs the lock the
        # holder has, and waiting for it now could deadlock.
        second.execute("insert into ceaseless.events (user_id, content) values ('alice', 'build')")
        with pytest.raises(
            psycopg.errors.SerializationFailure, match="conflict with concurrent fires"
        ):
            second.execute(
                "insert into ceaseless.events (user_id, content) values ('alice', 'deploy b')"
            )
        second.rollback()
        holder.commit()

        # Retried once the holder is done, the same transaction goes through.
        second.execute("insert into ceaseless.events (user_id, content) values ('alice', 'build')")
        second.execute(
            "insert into ceaseless.events (user_id, content) values ('alice', 'deploy b')"
        )
        second.commit()
    assert _runs(conn) == Counter({"running": 3})


def test_a_first_fire_waits_for_its_routine_rather_than_failing(
    conn: psycopg.Connection, db_url: str
) -> None:
    make_routine(
        conn,
        "keyed",
        "event",
        {"pattern": "deploy"},
        max_concurrent=100_000,
        dedup_window_secs=3600,
    )
    with psycopg.connect(db_url) as holder:
        holder.execute("insert into ceaseless.events (user_id, content) values ('alice', 'deploy')")
        waiter_errors: list[BaseException] = []

        def fire_same_content() -> None:
            try:
                with psycopg.connect(db_url, autocommit=True) as waiter:
                    waiter.execute(
                        "insert into ceaseless.events (user_id, content) values ('alice', 'deploy')"
                    )
            except BaseException as exc:
                waiter_errors.append(exc)

        thread = threading.Thread(target=fire_same_content)
        thread.start()
        thread.join(0.5)
        assert thread.is_alive(), "the second fire must wait for the first to commit"
        holder.commit()
        thread.join(10)
    assert waiter_errors == []
    # It waited, then saw the first run: a duplicate.
    assert _runs(conn) == Counter({"running": 1, "dedup": 1})


def _insert_many(conn: psycopg.Connection, rows: int, prefix: str = "cd0") -> None:
    conn.execute(
        "insert into ceaseless.events (user_id, content) "
        "select 'alice', %s || ' ' || g from generate_series(1, %s) g",
        (prefix, rows),
    )


@pytest.mark.parametrize(("cap", "rows"), [(100, 60), (1000, 1000)])
def test_a_statement_of_many_events_below_the_cap_fires_every_one(
    conn: psycopg.Connection, cap: int, rows: int
) -> None:
    # Its first row is admitted shared, with the room of one slot; the rest
    # of the statement must be admitted too, whatever its size.
    _set_cap(conn, cap)
    make_routine(conn, "cd", "event", {"pattern": "cd0"}, max_concurrent=100_000)

    _insert_many(conn, rows)

    assert _runs(conn) == Counter({"running": rows})
    fired = conn.execute("select sum(fired_count) from ceaseless.events").fetchone()
    assert fired == (rows,)


def test_a_statement_of_events_past_the_cap_records_the_rest_as_skipped(
    conn: psycopg.Connection,
) -> None:
    _set_cap(conn, 100)
    make_routine(conn, "cd", "event", {"pattern": "cd0"}, max_concurrent=100_000)

    _insert_many(conn, 150)

    assert _runs(conn) == Counter({"running": 100, "global_cap": 50})
    (running,) = conn.execute("select sum(running) from ceaseless.routine_run_shards").fetchone()
    assert running == 100


def test_concurrent_statements_of_many_events_all_commit_and_fill_the_cap_exactly(
    conn: psycopg.Connection, db_url: str
) -> None:
    # Ten producers of a hundred rows each: a conflict between two of them is
    # real (40001), and a retry clears it, so every statement commits.
    _set_cap(conn, 100)
    make_routine(conn, "cd", "event", {"pattern": "cd0"}, max_concurrent=100_000)
    go = threading.Barrier(10)
    failures: list[BaseException] = []
    retries: Counter[str] = Counter()

    def produce(p: int) -> None:
        with psycopg.connect(db_url, autocommit=True) as producer:
            go.wait()
            for _ in range(100):
                try:
                    _insert_many(producer, 100, f"cd0 p{p}")
                    return
                except psycopg.errors.SerializationFailure:
                    retries["40001"] += 1
                except BaseException as exc:
                    failures.append(exc)
                    return
            failures.append(AssertionError(f"producer {p} never committed"))

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)

    assert failures == []
    assert conn.execute("select count(*) from ceaseless.events").fetchone() == (1000,)
    assert _runs(conn) == Counter({"running": 100, "global_cap": 900})
    (running,) = conn.execute("select sum(running) from ceaseless.routine_run_shards").fetchone()
    assert running == 100


def test_a_statement_that_outgrows_its_slot_waits_for_shared_fires_then_judges_exactly(
    conn: psycopg.Connection, db_url: str
) -> None:
    _set_cap(conn, 100)
    make_routine(conn, "cd", "event", {"pattern": "cd0"}, max_concurrent=100_000)
    errors: list[BaseException] = []

    def many() -> None:
        try:
            with psycopg.connect(db_url, autocommit=True) as producer:
                _insert_many(producer, 120)
        except BaseException as exc:
            errors.append(exc)

    with psycopg.connect(db_url) as holder:
        # Admitted shared, in flight: its run is not yet in any count.
        _insert_many(holder, 1)
        thread = threading.Thread(target=many)
        thread.start()
        thread.join(1.0)
        assert thread.is_alive(), "the statement must wait for the shared fire to end"
        holder.commit()
        thread.join(30)
    assert errors == []
    # Judged after the holder committed: exactly the cap runs.
    assert _runs(conn) == Counter({"running": 100, "global_cap": 21})


def test_a_second_statement_outgrowing_its_slot_meanwhile_fails_with_40001_and_a_retry_clears_it(
    conn: psycopg.Connection, db_url: str
) -> None:
    _set_cap(conn, 100)
    make_routine(conn, "cd", "event", {"pattern": "cd0"}, max_concurrent=100_000)
    errors: list[BaseException] = []

    def many() -> None:
        try:
            with psycopg.connect(db_url, autocommit=True) as producer:
                _insert_many(producer, 30)
        except BaseException as exc:
            errors.append(exc)

    with psycopg.connect(db_url) as holder, psycopg.connect(db_url) as second:
        _insert_many(holder, 1)
        _insert_many(second, 1)
        waiting = threading.Thread(target=many)
        waiting.start()
        waiting.join(1.0)
        assert waiting.is_alive()
        # It waits for both: one of them outgrowing its slot too would wait
        # for the other, which waits for it. A real conflict, not a wait.
        with pytest.raises(
            psycopg.errors.SerializationFailure, match="conflict with concurrent fires"
        ):
            _insert_many(second, 30)
        second.rollback()
        holder.commit()
        waiting.join(30)
        assert errors == []

        # Retried, the same transaction goes through.
        _insert_many(second, 1)
        _insert_many(second, 30)
        second.commit()
    assert _runs(conn) == Counter({"running": 62})


def test_two_fires_larger_than_a_slot_are_admitted_side_by_side(
    conn: psycopg.Connection, db_url: str
) -> None:
    # Slots of 3 runs: each event fires 10 routines, as a listener's cron batch fires many,
    # and takes the 4 slots it needs; neither waits for the other to commit.
    _set_cap(conn, 100)
    for group in ("a", "b"):
        for i in range(10):
            make_routine(conn, f"{group}{i}", "event", {"pattern": f"^{group} "})
    with psycopg.connect(db_url) as first, psycopg.connect(db_url) as second:
        first.execute("insert into ceaseless.events (user_id, content) values ('alice', 'a 1')")
        second.execute("set lock_timeout = '5s'")
        second.execute("insert into ceaseless.events (user_id, content) values ('alice', 'b 1')")
        states = {
            c.execute(
                "select fire_mode from ceaseless.transaction_state "
                "where backend_pid = pg_backend_pid()"
            ).fetchone()
            for c in (first, second)
        }
        first.commit()
        second.commit()
    assert states == {("shared",)}
    assert _runs(conn) == Counter({"running": 20})


def test_a_fire_probes_its_routines_for_their_locks_by_key(
    conn: psycopg.Connection,
) -> None:
    # On its generic plan, `id = any (the ids)` built a bitmap scan for every fire: 72 µs a
    # call for one routine on PostgreSQL 15, against 11 probing by key.
    make_routine(conn, "lk", "event", {"pattern": "^lk "}, max_concurrent=1_000_000)
    conn.execute(
        "insert into ceaseless.routines (name, user_id, agent, trigger_type, trigger_config, "
        "action_type, action_config, max_concurrent) "
        "select 'other' || g, 'alice', 'noop', 'event', "
        """jsonb_build_object('pattern', '^other' || g), 'lightweight', '{"prompt": "p"}', """
        "1000000 from generate_series(1, 1000) g"
    )
    conn.execute("analyze ceaseless.routines")
    for i in range(6):
        conn.execute(
            "insert into ceaseless.events (user_id, content) values ('alice', %s)", (f"lk {i}",)
        )
    with explained(conn) as plans:
        conn.execute("insert into ceaseless.events (user_id, content) values ('alice', 'lk 9')")
    (probe,) = [p for p in plans if "hashtext(r.id::text)" in p["Query Text"]]
    scans = [n for n in nodes(probe["Plan"]) if n.get("Relation Name") == "routines"]
    assert scans and all(n["Node Type"] == "Index Scan" for n in scans), scans
