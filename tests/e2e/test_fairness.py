"""A round_robin lane with a real listener: one owner's deep backlog does not hold back another's
one job, which runs among the first."""

from __future__ import annotations

from collections.abc import Callable

import psycopg

from tests.e2e.support import FAKES, ListenerProcess, wait_until
from tests.factories import make_agent, make_job


def test_one_job_of_a_second_owner_runs_among_the_first_behind_ten_thousand(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(
        conn,
        "shared",
        "command",
        [str(FAKES / "fake_agent")],
        env={"FAKE_AGENT_MODE": "json"},
        max_concurrent=2,
        fairness="round_robin",
    )
    conn.execute(
        "insert into ceaseless.job (kind, agent, prompt, user_id, run_after) "
        "select 'task', 'shared', 'backlog ' || g, 'ann', now() - interval '1 hour' "
        "from generate_series(1, 10000) g"
    )
    # The newest job of all: in due order it would run 10,001st.
    lone = make_job(conn, agent="shared", prompt="the lone job", user_id="ben")
    start_listener("--poll-interval", "60")

    def delivered() -> bool:
        row = conn.execute("select state from ceaseless.job where id = %s", (lone,)).fetchone()
        return row == ("delivered",)

    wait_until(delivered, 30, "ben's job was not delivered")
    # Runs the listener opened before ben's: ann's first turn at most (two slots, one
    # turn per owner).
    before = conn.execute(
        "select count(*) from ceaseless.agent_run r "
        "where r.started_at < (select started_at from ceaseless.agent_run where job_id = %s)",
        (lone,),
    ).fetchone()
    assert before is not None and before[0] <= 1, before
    started = conn.execute("select count(*) from ceaseless.agent_run").fetchone()
    assert started is not None and started[0] < 10_000


def test_two_listeners_drain_a_round_robin_lane_running_every_job_once(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(conn, "shared", "noop", max_concurrent=6, fairness="round_robin")
    start_listener("--poll-interval", "1")
    start_listener("--poll-interval", "1")
    conn.execute(
        "insert into ceaseless.job (kind, agent, prompt, user_id, fairness_key) "
        "select 'task', 'shared', 'job ' || g, 'owner' || (g % 30), 'key' || (g % 7) "
        "from generate_series(1, 600) g"
    )

    def drained() -> bool:
        row = conn.execute(
            "select count(*) from ceaseless.job where state <> 'delivered'"
        ).fetchone()
        return row == (0,)

    wait_until(drained, 60, "the lane was not drained")
    runs = conn.execute(
        "select count(*), count(distinct job_id), count(distinct worker) from ceaseless.agent_run"
    ).fetchone()
    assert runs is not None and runs[0] == runs[1] == 600, runs
    assert runs[2] == 2, "both listeners claimed from the lane"
