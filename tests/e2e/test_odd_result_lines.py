"""What an agent prints is kept even when PostgreSQL could not store it as printed.

A result line longer than the line limit (1 MiB) is kept with its long text cut and
marked, as other output is; a NUL or a lone surrogate (both legal in a JSON string,
neither storable in PostgreSQL text or jsonb) becomes U+FFFD. Either used to fail the
run as "exited without a result line", or worse, the finish of every run in its batch.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from uuid import UUID

import psycopg
import pytest

from tests.e2e.support import FAKES, ListenerProcess, wait_until
from tests.factories import make_agent, make_job


def _finished(conn: psycopg.Connection, jobs: list[UUID], timeout: float = 30) -> None:
    def done() -> bool:
        row = conn.execute(
            "select count(*) from ceaseless.job where id = any(%s) and finished_at is not null",
            (jobs,),
        ).fetchone()
        return row == (len(jobs),)

    def state() -> str:
        rows = conn.execute(
            "select j.state, j.attempts, left(r.error, 300), r.outcome from ceaseless.job j "
            "left join ceaseless.agent_run r on r.job_id = j.id where j.id = any(%s)",
            (jobs,),
        ).fetchall()
        return f"the jobs never finished: {rows}"

    wait_until(done, timeout, state)


def _run(conn: psycopg.Connection, job: UUID) -> dict[str, object]:
    cur = conn.execute(
        "select j.state, r.outcome, r.final_message, r.error from ceaseless.job j "
        "join ceaseless.agent_run r on r.job_id = j.id where j.id = %s",
        (job,),
    )
    row = cur.fetchone()
    assert row is not None and cur.description is not None
    return {col.name: value for col, value in zip(cur.description, row, strict=True)}


def _claude(conn: psycopg.Connection, name: str, **env: str) -> str:
    return make_agent(conn, name, "claude_code", [str(FAKES / "fake_claude")], env=env)


def test_a_result_line_over_the_line_limit_is_kept_cut_and_marked(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    # 3 MiB of result text: its line is three times the limit.
    agent = _claude(
        conn, "big", FAKE_CLAUDE_RESULT="All good. ", FAKE_CLAUDE_RESULT_REPEAT="300000"
    )
    job = make_job(conn, agent=agent, prompt="the big one")
    start_listener()
    _finished(conn, [job])
    run = _run(conn, job)
    assert (run["state"], run["outcome"]) == ("delivered", "succeeded"), run
    message = str(run["final_message"])
    # The answer's end is kept, its start marked as cut, as every long message is.
    assert message.startswith("…") and message.endswith("Prompt received: the big one")
    assert "All good. All good." in message


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("a NUL \u0000 here", "a NUL \ufffd here"),
        ("a lone surrogate \ud800 here", "a lone surrogate \ufffd here"),
        ("a lone low \udc01 and a pair 😀", "a lone low \ufffd and a pair 😀"),
    ],
)
def test_text_postgresql_cannot_store_is_replaced_not_lost(
    conn: psycopg.Connection,
    start_listener: Callable[..., ListenerProcess],
    text: str,
    kept: str,
) -> None:
    odd = _claude(conn, "odd", FAKE_CLAUDE_RESULT_JSON=json.dumps(text))
    make_agent(conn, "plain", "command", [str(FAKES / "fake_agent")])
    # Beside ordinary runs, so that they may share a finish batch with the odd one.
    plain = [make_job(conn, agent="plain", prompt=f"plain {i}") for i in range(5)]
    job = make_job(conn, agent=odd, prompt="odd")
    start_listener()
    _finished(conn, [*plain, job])
    run = _run(conn, job)
    assert (run["state"], run["outcome"]) == ("delivered", "succeeded"), run
    assert str(run["final_message"]).startswith(kept)
    assert {_run(conn, p)["state"] for p in plain} == {"delivered"}


def test_a_command_report_with_odd_text_is_kept(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess], tmp_path: Path
) -> None:
    report = tmp_path / "report.json"
    report.write_text(
        json.dumps({"summary": "done \u0000 " + "x" * (2 << 20), "error": "e \ud800"})
    )
    make_agent(
        conn,
        "script",
        "command",
        [str(FAKES / "fake_agent")],
        env={"FAKE_AGENT_MODE": "json", "FAKE_AGENT_JSON_FILE": str(report)},
    )
    job = make_job(conn, agent="script")
    start_listener()
    _finished(conn, [job])
    run = _run(conn, job)
    assert run["state"] == "delivered", run
    message = str(run["final_message"])
    # The report's summary, not the raw line the report was printed on.
    assert message.startswith("…") and message.endswith("xxxx")
    assert '"summary"' not in message


def test_a_count_no_column_can_hold_is_dropped_not_fatal(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    report = {"summary": "ok", "tokens_in": 10**30, "tokens_out": 2**40}
    make_agent(
        conn,
        "script",
        "command",
        [str(FAKES / "fake_agent")],
        env={"FAKE_AGENT_MODE": "json", "FAKE_AGENT_JSON": json.dumps(report)},
    )
    jobs = [make_job(conn, agent="script", prompt=f"job {i}") for i in range(4)]
    listener = start_listener()
    _finished(conn, jobs)
    assert {_run(conn, job)["state"] for job in jobs} == {"delivered"}
    tokens = conn.execute(
        "select distinct tokens_in, tokens_out from ceaseless.agent_run where job_id = any(%s)",
        (jobs,),
    ).fetchall()
    assert tokens == [(None, None)]
    assert listener.proc.poll() is None


def test_a_result_the_database_refuses_fails_its_run_alone(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    # Whatever the reason a result cannot be stored (here the database is made to
    # refuse one), it must not hold back the others of its batch, nor stop the listener.
    conn.execute(
        "create function public.refuse_poison() returns trigger language plpgsql as $$ "
        "begin if new.final_message like '%poison%' then "
        "raise exception 'refusing this result' using errcode = '22023'; end if; "
        "return new; end $$"
    )
    conn.execute(
        "create trigger refuse_poison before update on ceaseless.agent_run for each row "
        "execute function public.refuse_poison()"
    )
    make_agent(conn, "plain", "command", [str(FAKES / "fake_agent")], max_attempts=1)
    jobs = [make_job(conn, agent="plain", prompt=f"job {i}") for i in range(6)]
    poison = make_job(conn, agent="plain", prompt="poison")
    listener = start_listener()
    _finished(conn, [*jobs, poison])
    assert {_run(conn, job)["state"] for job in jobs} == {"delivered"}
    run = _run(conn, poison)
    assert run["outcome"] == "failed"
    assert "could not be stored (22023: refusing this result)" in str(run["error"])
    assert listener.proc.poll() is None
    assert listener.events("run.result_unstorable")
