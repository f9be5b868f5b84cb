"""`ceaseless job reply` and `ceaseless job raise-budget`: a person answers a blocked job or raises
its spend ceiling from the shell; the database's refusals are shown in its words."""

from __future__ import annotations

import json

import psycopg

from tests.e2e.support import run_cli
from tests.factories import claim_started, finish, make_agent, make_job

SESSION = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
ASKING = 'Stuck.\n\n```ceaseless\n{"needs_human": "Staging or production?"}\n```'


def _asking(conn: psycopg.Connection, **job: object) -> str:
    job_id = make_job(conn, prompt="migrate", **job)
    run = claim_started(conn)[job_id]
    assert finish(conn, run, "succeeded", final_message=ASKING, session_id=SESSION, cost_usd=0.3)
    conn.commit()
    return str(job_id)


def test_job_reply_sends_the_reply_and_shows_it_on_the_job(
    db_url: str, conn: psycopg.Connection
) -> None:
    make_agent(conn)
    job = _asking(conn)
    done = run_cli(db_url, "job", "reply", job[:8], "-", stdin="Staging.\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        f"job {job} is pending again: its next run resumes the session with your reply"
    )
    shown = run_cli(db_url, "job", "show", job, "-o", "json")
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert document["job"]["state"] == "pending"
    assert document["job"]["reply"] == "Staging."

    again = run_cli(db_url, "job", "reply", job, "And production?")
    assert again.returncode == 1
    assert f"reply_job: job {job} is pending; only a blocked job" in again.stderr
    assert "Traceback" not in again.stderr


def test_job_reply_refuses_a_blank_reply(db_url: str, conn: psycopg.Connection) -> None:
    make_agent(conn)
    job = _asking(conn)
    refused = run_cli(db_url, "job", "reply", job, "   ")
    assert refused.returncode == 1
    assert "reply_job.text: a reply needs text that is not blank" in refused.stderr


def test_job_raise_budget_refuses_below_the_spend_and_resumes_above_it(
    db_url: str, conn: psycopg.Connection
) -> None:
    make_agent(conn)
    job_id = make_job(conn, prompt="work", max_cost_usd=0.25)
    run = claim_started(conn)[job_id]
    assert finish(conn, run, "succeeded", final_message="x", cost_usd=0.3, session_id=SESSION) == (
        "blocked"
    )
    conn.commit()
    job = str(job_id)
    low = run_cli(db_url, "job", "raise-budget", job, "0.2")
    assert low.returncode == 1
    assert f"raise_job_budget.usd: must be above what job {job} has spent" in low.stderr
    none = run_cli(db_url, "job", "raise-budget", job)
    assert none.returncode == 1 and "--tokens" in none.stderr
    done = run_cli(db_url, "job", "raise-budget", job, "2.5")
    assert done.returncode == 0, done.stderr
    row = conn.execute(
        "select state, max_cost_usd::text, resume_session_id from ceaseless.job where id = %s",
        (job_id,),
    ).fetchone()
    assert row == ("pending", "2.500000", SESSION)


def test_job_add_sets_a_spend_ceiling(db_url: str, conn: psycopg.Connection) -> None:
    make_agent(conn)
    conn.commit()
    added = run_cli(
        db_url, "job", "add", "noop", "work", "--max-cost-usd", "1.5", "--max-tokens", "9000"
    )
    assert added.returncode == 0, added.stderr
    row = conn.execute(
        "select max_cost_usd::text, max_tokens from ceaseless.job where id = %s",
        (added.stdout.strip(),),
    ).fetchone()
    assert row == ("1.500000", 9000)
