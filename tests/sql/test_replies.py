"""reply_job: a blocked job goes back to pending and its next run resumes the agent's session
with the reply as the whole prompt; who replied is on the job, on the run and in audit_log.

Any job kind's agent may ask for a human with a ```ceaseless {"needs_human": "…"} block (the one
rule of 72_forge_verdict.sql), and the notification says how to reply.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
import pytest

from tests.factories import claim_started, finish, make_agent, make_job

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
SESSION = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
ASKING = 'I need to know.\n\n```ceaseless\n{"needs_human": "Which database?"}\n```'


def _blocked_on_a_question(conn: psycopg.Connection, **job: Any) -> tuple[UUID, UUID]:
    """A plain job whose agent asked for a human: blocked, its run holding the session."""
    job_id = make_job(conn, run_after=T0, **job)
    run = claim_started(conn, p_now=T0)[job_id]
    state = finish(conn, run, "succeeded", final_message=ASKING, session_id=SESSION, cost_usd=0.5)
    assert state == "blocked"
    return job_id, run


def _claimed(conn: psycopg.Connection, when: datetime) -> dict[str, Any]:
    cur = conn.execute(
        "select id, prompt, resume_session_id, reply, run_id, budget_usd, budget_tokens "
        "from ceaseless.claim_jobs('w1', 10, p_now => %s, p_start => true)",
        (when,),
    )
    names = [d.name for d in cur.description or ()]
    rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    assert len(rows) == 1
    return rows[0]


def test_a_plain_job_s_agent_asking_for_a_human_blocks_it_with_a_notification_saying_how_to_reply(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    job, run = _blocked_on_a_question(conn)
    outcome, error = conn.execute(
        "select outcome, error from ceaseless.agent_run where id = %s", (run,)
    ).fetchone()  # type: ignore[misc]
    assert (outcome, error) == ("needs_human", "needs a human: Which database?")
    subject, body = conn.execute(
        "select subject, body from ceaseless.notifications where source_id = %s", (job,)
    ).fetchone()  # type: ignore[misc]
    assert subject == f"job {job} blocked: the agent asks for a human"
    assert f'ceaseless job reply {job} "your answer"' in body
    assert f"select ceaseless.reply_job('{job}', 'your answer');" in body


def test_a_plain_job_s_reply_without_a_block_is_delivered_as_before(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    job = make_job(conn, run_after=T0)
    run = claim_started(conn, p_now=T0)[job]
    assert finish(conn, run, "succeeded", final_message="All done, no ceaseless block.") == (
        "delivered"
    )


def test_a_reply_resumes_the_session_with_the_reply_as_the_whole_prompt(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    job, _ = _blocked_on_a_question(conn, prompt="migrate the database")
    conn.execute("select ceaseless.reply_job(%s, 'The staging one.', %s)", (job, T0))
    state, reply, replied_by, attempts, session = conn.execute(
        "select state, reply, replied_by, attempts, resume_session_id from ceaseless.job "
        "where id = %s",
        (job,),
    ).fetchone()  # type: ignore[misc]
    me = conn.execute("select session_user").fetchone()[0]  # type: ignore[index]
    assert (state, reply, replied_by, attempts, session) == (
        "pending",
        "The staging one.",
        me,
        0,
        SESSION,
    )

    claimed = _claimed(conn, T0 + timedelta(seconds=1))
    assert claimed["resume_session_id"] == SESSION
    assert claimed["reply"] == "The staging one."
    # The job's own prompt stays what it was.
    assert claimed["prompt"] == "migrate the database"
    run = conn.execute(
        "select reply, replied_by from ceaseless.agent_run where id = %s", (claimed["run_id"],)
    ).fetchone()
    assert run == ("The staging one.", me)

    # Spent once the run ends with a verdict.
    assert finish(conn, claimed["run_id"], "succeeded", final_message="migrated") == "delivered"
    row = conn.execute(
        "select reply, replied_by, replied_at from ceaseless.job where id = %s", (job,)
    ).fetchone()
    assert row == (None, None, None)


def test_a_reply_is_audited_naming_who_sent_it(conn: psycopg.Connection) -> None:
    make_agent(conn)
    job, _ = _blocked_on_a_question(conn)
    conn.execute("select ceaseless.reply_job(%s, 'The staging one.', %s)", (job, T0))
    actor, old, new, detail = conn.execute(
        "select actor, old_state, new_state, detail from ceaseless.audit_log "
        "where entity_id = %s and action = 'reply'",
        (job,),
    ).fetchone()  # type: ignore[misc]
    me = conn.execute("select session_user").fetchone()[0]  # type: ignore[index]
    assert (actor, old, new) == (me, "blocked", "pending")
    assert detail == {
        "replied_by": me,
        "resumes_session": SESSION,
        "reply": "The staging one.",
    }


def test_a_reply_survives_a_run_cut_short_and_is_carried_again(conn: psycopg.Connection) -> None:
    make_agent(conn)
    job, _ = _blocked_on_a_question(conn)
    conn.execute("select ceaseless.reply_job(%s, 'The staging one.', %s)", (job, T0))
    first = _claimed(conn, T0 + timedelta(seconds=1))
    assert finish(conn, first["run_id"], "lease_expired") == "pending"
    again = _claimed(conn, datetime.now(UTC) + timedelta(minutes=1))
    assert again["reply"] == "The staging one."
    assert again["resume_session_id"] == SESSION


def test_a_reply_to_a_job_without_a_session_starts_over_with_the_reply_after_its_prompt(
    conn: psycopg.Connection,
) -> None:
    # A CLI that could not log in reported no session: nothing to resume.
    make_agent(conn)
    job = make_job(conn, run_after=T0, prompt="migrate the database")
    run = claim_started(conn, p_now=T0)[job]
    assert finish(conn, run, "auth_failed", error="not logged in") == "blocked"
    conn.execute("select ceaseless.reply_job(%s, 'Logged in now, go on.', %s)", (job, T0))
    claimed = _claimed(conn, T0 + timedelta(seconds=1))
    me = conn.execute("select session_user").fetchone()[0]  # type: ignore[index]
    assert claimed["resume_session_id"] is None
    assert claimed["reply"] is None
    assert claimed["prompt"] == (
        f"migrate the database\n\n## Reply from {me}\n\nLogged in now, go on."
    )


@pytest.mark.parametrize(
    ("state_sql", "state"),
    [
        ("", "pending"),
        ("delivered", "delivered"),
    ],
)
def test_a_reply_to_a_job_that_is_not_blocked_is_refused_naming_its_state(
    conn: psycopg.Connection, state_sql: str, state: str
) -> None:
    make_agent(conn)
    job = make_job(conn, run_after=T0)
    if state_sql:
        run = claim_started(conn, p_now=T0)[job]
        finish(conn, run, "succeeded", final_message="done")
    with pytest.raises(psycopg.Error) as caught:
        conn.execute("select ceaseless.reply_job(%s, 'hello')", (job,))
    assert caught.value.sqlstate == "CE409"
    assert caught.value.diag.message_primary == (
        f"reply_job: job {job} is {state}; only a blocked job (waiting for a person) can be resumed"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", 'reply_job.text: a reply needs text that is not blank; got ""'),
        ("  \n ", 'reply_job.text: a reply needs text that is not blank; got "  \\n "'),
        (None, "reply_job.text: a reply needs text that is not blank; got nothing"),
        (
            "x" * 16001,
            "reply_job.text: must be at most 16000 characters, this one has 16001; got "
            '"' + "x" * 40 + '…"',
        ),
    ],
)
def test_a_blank_or_oversized_reply_is_refused_naming_the_rule(
    conn: psycopg.Connection, text: str | None, message: str
) -> None:
    make_agent(conn)
    job, _ = _blocked_on_a_question(conn)
    with pytest.raises(psycopg.Error) as caught:
        conn.execute("select ceaseless.reply_job(%s, %s)", (job, text))
    assert caught.value.sqlstate == "CE422"
    assert caught.value.diag.message_primary == message


def test_a_reply_to_an_unknown_job_is_refused(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error) as caught:
        conn.execute("select ceaseless.reply_job('00000000-0000-0000-0000-000000000000', 'hello')")
    assert caught.value.sqlstate == "CE404"


def test_a_user_cannot_reply_to_or_raise_another_user_s_job_nor_read_its_reply(
    conn: psycopg.Connection, login_role: Callable[..., psycopg.Connection]
) -> None:
    make_agent(conn)
    conn.commit()
    alice, bob = login_role("alice"), login_role("bob")
    bobs = bob.execute(
        "insert into ceaseless.job (kind, agent, prompt) values ('task', 'noop', 'work') "
        "returning id"
    ).fetchone()[0]  # type: ignore[index]
    run = claim_started(conn)[bobs]
    finish(conn, run, "succeeded", final_message=ASKING, session_id=SESSION)
    conn.commit()
    for call in (
        "select ceaseless.reply_job(%s, 'from alice')",
        "select ceaseless.raise_job_budget(%s, 10)",
    ):
        with pytest.raises(psycopg.Error) as caught:
            alice.execute(call, (bobs,))
        assert caught.value.sqlstate == "CE404"
    # Alice cannot write a reply herself either.
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.execute("update ceaseless.job set reply = 'x' where id = %s", (bobs,))

    bob.execute("select ceaseless.reply_job(%s, 'bob''s secret answer')", (bobs,))
    bob_name = bob.execute("select session_user").fetchone()[0]  # type: ignore[index]
    assert bob.execute(
        "select reply, replied_by from ceaseless.job where id = %s", (bobs,)
    ).fetchone() == (
        "bob's secret answer",
        bob_name,
    )
    assert alice.execute("select reply from ceaseless.job where id = %s", (bobs,)).fetchall() == []
    assert alice.execute(
        "select count(*) from ceaseless.agent_run where job_id = %s", (bobs,)
    ).fetchone() == (0,)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.execute("select detail from ceaseless.audit_log where entity_id = %s", (bobs,))
    # The audit row names bob as who replied.
    detail = conn.execute(
        "select actor, detail ->> 'replied_by' from ceaseless.audit_log "
        "where entity_id = %s and action = 'reply'",
        (bobs,),
    ).fetchone()
    assert detail == (bob_name, bob_name)


def test_a_listener_s_reply_names_the_dashboard_user_it_acts_for(
    conn: psycopg.Connection, login_role: Callable[..., psycopg.Connection]
) -> None:
    make_agent(conn)
    job, _ = _blocked_on_a_question(conn)
    conn.commit()
    listener = login_role("lst", "ceaseless_listener")
    with listener.transaction():
        listener.execute("select set_config('ceaseless.actor', 'w1 dashboard:carol', true)")
        listener.execute("select ceaseless.reply_job(%s, 'go on')", (job,))
    role = listener.execute("select session_user").fetchone()[0]  # type: ignore[index]
    assert conn.execute(
        "select replied_by from ceaseless.job where id = %s", (job,)
    ).fetchone() == (f"{role} w1 dashboard:carol",)
    assert conn.execute(
        "select worker from ceaseless.audit_log where entity_id = %s and action = 'reply'", (job,)
    ).fetchone() == ("w1 dashboard:carol",)


def test_a_user_s_reply_cannot_claim_another_name(
    conn: psycopg.Connection, login_role: Callable[..., psycopg.Connection]
) -> None:
    make_agent(conn)
    conn.commit()
    alice = login_role("alice")
    job = alice.execute(
        "insert into ceaseless.job (kind, agent, prompt) values ('task', 'noop', 'work') "
        "returning id"
    ).fetchone()[0]  # type: ignore[index]
    run = claim_started(conn)[job]
    finish(conn, run, "succeeded", final_message=ASKING, session_id=SESSION)
    conn.commit()
    with alice.transaction():
        alice.execute("select set_config('ceaseless.actor', 'dashboard:mallory', true)")
        alice.execute("select ceaseless.reply_job(%s, 'go on')", (job,))
    name = alice.execute("select session_user").fetchone()[0]  # type: ignore[index]
    assert conn.execute(
        "select replied_by from ceaseless.job where id = %s", (job,)
    ).fetchone() == (name,)


def test_a_job_cannot_be_inserted_with_a_reply_nobody_sent(conn: psycopg.Connection) -> None:
    make_agent(conn)
    with pytest.raises(psycopg.errors.CheckViolation) as caught:
        make_job(conn, reply="hello")
    assert caught.value.diag.constraint_name == "reply_complete"


def test_notify_payload_of_a_reply_is_the_job_state_change(conn: psycopg.Connection) -> None:
    make_agent(conn)
    job, _ = _blocked_on_a_question(conn)
    conn.commit()
    conn.execute("listen ceaseless_job")
    conn.commit()
    conn.execute("select ceaseless.reply_job(%s, 'go on')", (job,))
    conn.commit()
    payloads = [json.loads(n.payload) for n in conn.notifies(timeout=1, stop_after=1)]
    assert payloads and payloads[0]["state"] == "pending" and payloads[0]["old_state"] == "blocked"


def test_explain_job_of_a_blocked_job_names_the_reply_that_resumes_it(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    job, _ = _blocked_on_a_question(conn)
    reason, detail = conn.execute(
        "select reason, detail from ceaseless.explain_job(%s)", (job,)
    ).fetchone()  # type: ignore[misc]
    assert reason == "finished"
    assert f"reply_job('{job}', '…')" in detail
    assert f"raise_job_budget('{job}', <usd>)" in detail
