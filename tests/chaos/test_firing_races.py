"""Every pair of operations that fire or end routine runs, raced against each other.

The stated guarantee of the one firing path (functions/42_routine_firing.sql):
no deadlock between any two of event inserts, webhook fires, manual runs, cron
batches, finish batches, lease expiry, release, cancel and retry_job. Each runs
here in a thread of its own, on its own connection, as fast as it can, over the
same few routines, with the global cap low enough to bind. The operations play
a listener's part in SQL (claim, finish in batches, expire), so the races are
between the statements themselves, with nothing in between to space them out.

A refusal the API documents (a retry at the cap, a cancel of a finished job) is
an answer, not a failure; a deadlock, a serialization failure or any other
error is a failure. The cap is sampled throughout, and at the end the running
count kept in shards must equal the running runs.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from tests.factories import make_agent, make_routine
from tests.webhook_signing import sign

pytestmark = pytest.mark.slow

SECONDS = 12
CAP = 12
SECRET = "a-signing-secret-of-some-length"
# What the API answers when an operation does not apply right now.
DOCUMENTED_REFUSALS = {"CE409", "CE410", "CE411", "CE412", "CE414", "CE415"}

Operation = Callable[[psycopg.Connection, random.Random], None]


def _event(conn: psycopg.Connection, rng: random.Random) -> None:
    # Each event matches a different subset of the event routines.
    words = " ".join(w for w in ("alpha", "beta", "gamma", "delta") if rng.random() < 0.7)
    conn.execute(
        "insert into ceaseless.events (user_id, content) values ('ops', %s)",
        (f"{words} {rng.random()}",),
    )


def _webhook(conn: psycopg.Connection, rng: random.Random) -> None:
    body = json.dumps({"n": rng.random()}).encode()
    sent = datetime.now(UTC).replace(microsecond=0)
    conn.execute(
        "select ceaseless.receive_webhook('race', %s, %s, %s)",
        (body, sign(SECRET, int(sent.timestamp()), body), sent),
    )


def _manual(conn: psycopg.Connection, rng: random.Random) -> None:
    conn.execute(
        "select ceaseless.run_routine(id) from ceaseless.routines "
        "where trigger_type <> 'cron' order by random() limit 2"
    )


def _cron(conn: psycopg.Connection, rng: random.Random) -> None:
    # Make everything due (as an operator would: locking the routines in id
    # order, the order every other operation takes them in), then what the
    # listener's scheduler does in one transaction: lock what is due (SKIP
    # LOCKED), fire it with the next slots.
    now = datetime.now(UTC)
    with conn.transaction():
        conn.execute(
            "update ceaseless.routines r set next_fire_at = %s from ("
            "  select id from ceaseless.routines where trigger_type = 'cron' and enabled"
            "  order by id for no key update) due where r.id = due.id",
            (now - timedelta(seconds=1),),
        )
    with conn.transaction():
        due = conn.execute(
            "select kind, id from ceaseless.due_schedules(%s, 10)", (now,)
        ).fetchall()
        conn.execute(
            "select * from ceaseless.fire_cron(%s, %s, %s, %s, %s)",
            (
                [kind for kind, _ in due],
                [id_ for _, id_ in due],
                [now + timedelta(minutes=1)] * len(due),
                [rng.randint(0, 2)] * len(due),
                now,
            ),
        )


def _finisher(worker: str) -> Operation:
    def finish(conn: psycopg.Connection, rng: random.Random) -> None:
        runs = conn.execute(
            "select run_id from ceaseless.claim_jobs(%s, 20, p_start => true)", (worker,)
        ).fetchall()
        if not runs:
            return
        # Finished in an order of their own: a batch meets its routines in
        # any order, and two batches meet them in opposite ones.
        rng.shuffle(runs)
        results = [
            {
                "run_id": str(r[0]),
                "outcome": rng.choice(["succeeded", "failed"]),
                "final_message": rng.choice(["ROUTINE_OK", "look at this"]),
            }
            for r in runs
        ]
        conn.execute(
            "select * from ceaseless.finish_runs(%s, %s::jsonb)", (worker, json.dumps(results))
        )

    return finish


def _expiry(conn: psycopg.Connection, rng: random.Random) -> None:
    # Everything held looks expired from far enough in the future.
    conn.execute("select ceaseless.expire_leases(now() + interval '1 hour')")


def _release(conn: psycopg.Connection, rng: random.Random) -> None:
    held = conn.execute(
        "select id from ceaseless.claim_jobs('releaser', 10, p_start => true)"
    ).fetchall()
    conn.execute("select ceaseless.release_jobs('releaser', %s)", ([h[0] for h in reversed(held)],))


def _cancel(conn: psycopg.Connection, rng: random.Random) -> None:
    row = conn.execute(
        "select id from ceaseless.job where state in ('pending', 'claimed', 'running') "
        "order by random() limit 1"
    ).fetchone()
    if row:
        conn.execute("select ceaseless.cancel_job(%s)", (row[0],))


def _retry(conn: psycopg.Connection, rng: random.Random) -> None:
    row = conn.execute(
        "select id from ceaseless.job where finished_at is not null order by random() limit 1"
    ).fetchone()
    if row:
        conn.execute("select ceaseless.retry_job(%s)", (row[0],))


OPERATIONS: dict[str, Operation] = {
    "event": _event,
    "event 2": _event,
    "webhook": _webhook,
    "manual": _manual,
    "cron": _cron,
    "finish w1": _finisher("w1"),
    "finish w2": _finisher("w2"),
    "expiry": _expiry,
    "release": _release,
    "cancel": _cancel,
    "retry": _retry,
}


def _setup(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=1000)
    conn.execute(
        "update ceaseless.settings set value = to_jsonb(%s::integer) "
        "where key = 'routine_max_running'",
        (CAP,),
    )
    for word in ("alpha", "beta", "gamma", "delta"):
        make_routine(conn, word, "event", {"pattern": word}, user_id="ops", max_concurrent=4)
    make_routine(conn, "hook", "webhook", {"path": "race", "secret": SECRET}, max_concurrent=3)
    for n in range(3):
        make_routine(conn, f"cron-{n}", "cron", {"schedule": "* * * * *"}, max_concurrent=2)
    make_routine(conn, "by-hand", max_concurrent=3)


def test_no_two_operations_on_routine_runs_deadlock(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        _setup(conn)

    stop = threading.Event()
    failures: Counter[str] = Counter()
    refusals: Counter[str] = Counter()
    done: Counter[str] = Counter()
    most_running = 0
    lock = threading.Lock()

    def work(name: str, operation: Operation, seed: int) -> None:
        rng = random.Random(seed)
        with psycopg.connect(db_url, autocommit=True) as conn:
            # A lost fight must be an error soon, never a wait forever.
            conn.execute("set lock_timeout = '20s'")
            while not stop.is_set():
                try:
                    operation(conn, rng)
                    with lock:
                        done[name] += 1
                except psycopg.Error as error:
                    state = error.sqlstate or "?"
                    with lock:
                        if state in DOCUMENTED_REFUSALS:
                            refusals[f"{name}: {state}"] += 1
                        else:
                            failures[f"{name}: {state} {str(error).splitlines()[0][:120]}"] += 1

    def sample() -> None:
        nonlocal most_running
        with psycopg.connect(db_url, autocommit=True) as conn:
            while not stop.is_set():
                row = conn.execute(
                    "select count(*) from ceaseless.routine_runs where status = 'running'"
                ).fetchone()
                assert row is not None
                most_running = max(most_running, int(row[0]))

    threads = [
        threading.Thread(target=work, args=(name, op, seed), daemon=True)
        for seed, (name, op) in enumerate(OPERATIONS.items())
    ]
    threads.append(threading.Thread(target=sample, daemon=True))
    for thread in threads:
        thread.start()
    time.sleep(SECONDS)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)

    with psycopg.connect(db_url, autocommit=True) as conn:
        counts = conn.execute(
            "select (select sum(running) from ceaseless.routine_run_shards), "
            "(select count(*) from ceaseless.routine_runs where status = 'running')"
        ).fetchone()
        statuses = dict(
            conn.execute(
                "select coalesce(skip_reason, status), count(*) from ceaseless.routine_runs "
                "group by 1"
            ).fetchall()
        )

    summary = f"done {dict(done)}; refused {dict(refusals)}; runs {statuses}"
    assert not any(t.is_alive() for t in threads), "a thread is stuck: " + summary
    assert failures == Counter(), f"{dict(failures)}; {summary}"
    assert most_running <= CAP, f"{most_running} running with the cap at {CAP}; {summary}"
    assert counts is not None and int(counts[0]) == int(counts[1]), (counts, summary)
    # Every operation got through many times: a race that never happened proves nothing.
    assert all(done[name] >= 5 for name in OPERATIONS), summary
    assert statuses.get("global_cap", 0) > 0, "the cap never bound: " + summary
