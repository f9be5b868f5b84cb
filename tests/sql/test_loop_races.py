"""Races: fires of every kind and completion handlers, each on its own connection, never make
two live iterations or two iterations N + 1, never deadlock, and every refused fire is a
skipped row."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import psycopg
import pytest

from tests.factories import make_agent
from tests.sql.loops import LIVE, iterations, live, loop_row, make_loop, run_loop, runs
from tests.sql.topology import job_of, start_job
from tests.webhook_signing import sign


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=100)


def _race(db_url: str, actions: list[Callable[[psycopg.Connection], Any]]) -> list[Any]:
    """Run each action on its own connection, all released at once; their results or errors."""
    barrier = threading.Barrier(len(actions))
    results: list[Any] = [None] * len(actions)

    def go(i: int, action: Callable[[psycopg.Connection], Any]) -> None:
        with psycopg.connect(db_url, autocommit=True) as c:
            c.execute("set lock_timeout = '20s'")
            barrier.wait()
            try:
                results[i] = action(c)
            except psycopg.Error as exc:
                results[i] = exc

    threads = [threading.Thread(target=go, args=(i, a)) for i, a in enumerate(actions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def _manual(loop: UUID) -> Callable[[psycopg.Connection], Any]:
    return lambda c: run_loop(c, loop)


def _webhook(loop_row_: dict[str, Any], body: bytes) -> Callable[[psycopg.Connection], Any]:
    def fire(c: psycopg.Connection) -> Any:
        ts = int(datetime.now(UTC).timestamp())
        row = c.execute(
            "select run_id from ceaseless._receive_webhook(%s, %s, %s, %s)",
            (
                loop_row_["webhook_token"],
                body,
                sign(loop_row_["webhook_signing_key"], ts, body),
                datetime.fromtimestamp(ts, UTC),
            ),
        ).fetchone()
        assert row is not None
        return row[0]

    return fire


def _cron(c: psycopg.Connection) -> Any:
    """A listener's cron pass: lock what is due, fire it with its next slot, commit."""
    with c.transaction():
        due = c.execute("select kind, id from ceaseless.due_schedules(now(), 10)").fetchall()
        if not due:
            return None
        kinds = [r[0] for r in due]
        ids = [r[1] for r in due]
        rows = c.execute(
            "select run_id from ceaseless.fire_cron(%s, %s, %s, %s)",
            (kinds, ids, [datetime(2100, 1, 1, tzinfo=UTC)] * len(ids), [0] * len(ids)),
        ).fetchall()
    return rows[0][0] if rows else None


def _finish(agent_run: UUID) -> Callable[[psycopg.Connection], Any]:
    def go(c: psycopg.Connection) -> Any:
        c.execute(
            "select ceaseless.finish_runs('w1', jsonb_build_array(jsonb_build_object("
            "'run_id', %s::text, 'outcome', 'succeeded', 'final_message', 'round done')))",
            (agent_run,),
        )
        return "finished"

    return go


def _assert_one_chain(conn: psycopg.Connection, loop: UUID) -> None:
    chain = iterations(conn, loop)
    assert [r["iteration"] for r in chain] == list(range(1, len(chain) + 1))
    assert [r["parent_run_id"] for r in chain[1:]] == [r["id"] for r in chain[:-1]]
    assert sum(r["status"] in LIVE for r in runs(conn, loop)) <= 1


def test_concurrent_manual_fires_start_one_iteration_and_skip_the_rest(
    conn: psycopg.Connection, db_url: str
) -> None:
    loop = make_loop(conn)
    results = _race(db_url, [_manual(loop)] * 8)
    assert not [r for r in results if isinstance(r, Exception)], results
    by_id = {r["id"]: r for r in runs(conn, loop)}
    assert sorted(by_id) == sorted(results)
    assert [r["iteration"] for r in by_id.values() if r["status"] != "skipped"] == [1]
    assert (
        sorted(r["skip_reason"] for r in by_id.values() if r["status"] == "skipped")
        == ["live_iteration"] * 7
    )


@pytest.mark.parametrize("rounds", [12])
def test_completion_cron_webhook_and_manual_fires_race_without_two_live_iterations(
    conn: psycopg.Connection, db_url: str, rounds: int
) -> None:
    loop = make_loop(
        conn, triggers={"on_completion": True, "cron": "* * * * *", "webhook_enabled": True}
    )
    hook = loop_row(conn, loop)
    run_loop(conn, loop)
    for n in range(rounds):
        run = live(conn, loop)
        agent_run = start_job(conn, job_of(conn, run, "A"))
        conn.execute(
            "update ceaseless.loops set next_fire_at = now() - interval '1 second' where id = %s",
            (loop,),
        )
        before = {r["id"] for r in runs(conn, loop)}
        results = _race(
            db_url,
            [
                _finish(agent_run),
                _manual(loop),
                _manual(loop),
                _webhook(hook, f"round {n}".encode()),
                _cron,
            ],
        )
        assert not [r for r in results if isinstance(r, Exception)], results
        fired = [r for r in results[1:] if r is not None]
        new = [r for r in runs(conn, loop) if r["id"] not in before]
        # Every fire left exactly its own row; the finish chained at most one.
        assert {r["id"] for r in new} >= set(fired)
        chained = [r for r in new if r["trigger_type"] == "on_completion"]
        assert len(new) == len(fired) + len(chained) and len(chained) <= 1
        # Exactly one iteration N + 1, always the chain's: a fire sees N live
        # until the finish commits, and N + 1 live after.
        assert [r["trigger_type"] for r in new if r["status"] != "skipped"] == ["on_completion"]
        assert all(r["skip_reason"] for r in new if r["status"] == "skipped")
        _assert_one_chain(conn, loop)
    assert len(iterations(conn, loop)) == rounds + 1


def test_racing_completion_handlers_chain_once(conn: psycopg.Connection, db_url: str) -> None:
    loop = make_loop(conn, triggers={"on_completion": True})
    run_loop(conn, loop)
    for _ in range(10):
        run = live(conn, loop)

        def end(c: psycopg.Connection, run: UUID = run) -> Any:
            # What the engine's transaction does when the run's last job ends.
            return c.execute(
                "update ceaseless.topology_runs set status = 'succeeded', finished_at = now(), "
                "final_message = 'handled' where id = %s and status = any(%s)",
                (run, list(LIVE)),
            ).rowcount

        def fire(c: psycopg.Connection) -> Any:
            return run_loop(c, loop)

        results = _race(db_url, [end, end, end, fire, fire])
        assert not [r for r in results if isinstance(r, Exception)], results
        assert sorted(results[:3]) == [0, 0, 1]
        _assert_one_chain(conn, loop)
        assert live(conn, loop)
    chain = iterations(conn, loop)
    assert len(chain) == 11
    assert conn.execute(
        "select count(*) from ceaseless.topology_runs where loop_id = %s and iteration = 2",
        (loop,),
    ).fetchone() == (1,)


def test_a_cron_batch_holding_many_loops_and_their_completions_do_not_deadlock(
    conn: psycopg.Connection, db_url: str
) -> None:
    # The cron batch locks every due loop first (SKIP LOCKED) and then fires
    # each; each finish holds its job and run and then wants its loop. The
    # batch must never wait for a finish, or the two would deadlock.
    loops = [
        make_loop(conn, triggers={"on_completion": True, "cron": "* * * * *"}) for _ in range(6)
    ]
    agent_runs = []
    for loop in loops:
        run = run_loop(conn, loop)
        agent_runs.append(start_job(conn, job_of(conn, run, "A")))
    conn.execute(
        "update ceaseless.loops set next_fire_at = now() - interval '1 second' where id = any(%s)",
        (loops,),
    )
    results = _race(db_url, [_cron, _cron, *[_finish(a) for a in agent_runs]])
    assert not [r for r in results if isinstance(r, Exception)], results
    for loop in loops:
        _assert_one_chain(conn, loop)
        # The chain always makes iteration 2: a cron fire sees iteration 1
        # live until the finish commits, and iteration 2 live after.
        assert len(iterations(conn, loop)) == 2
        # At most one cron fire (a loop a finish held was skipped by both
        # passes), and it found an iteration live.
        cron = [r for r in runs(conn, loop) if r["trigger_type"] == "cron"]
        assert [(r["status"], r["skip_reason"]) for r in cron] in (
            [],
            [("skipped", "live_iteration")],
        )
