"""The child-issue loop against the fake forge: a plan's children become issues and implement jobs.

A plan job is created by a poll and finished through the SQL API with a
children block, as a listener would finish it; the children rounds then run
as the listener's loop does (tests/forge/loops_support.py).
"""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest

from tests.factories import claim_started, finish
from tests.fakes.forge import FakeForge
from tests.forge.loops_support import (
    RUNNER_TOKEN,
    add_repo,
    children_round,
    poll_due,
    set_tokens,
)

CHILDREN = [
    {"key": "parser", "title": "Parse the config", "body": "Use tomllib."},
    {"key": "docs", "title": "Document the config", "body": "In docs/config.md."},
]


@pytest.fixture(autouse=True)
def _tokens(
    monkeypatch: pytest.MonkeyPatch, conn: psycopg.Connection, fake_forge: FakeForge
) -> None:
    set_tokens(monkeypatch, conn, fake_forge)


def delivered_plan(
    db_url: str, conn: psycopg.Connection, fake_forge: FakeForge, children: list[dict[str, str]]
) -> uuid.UUID:
    """Issue #1 labelled for a plan, polled into a job, run, and finished with `children`."""
    add_repo(conn, fake_forge)
    fake_forge.add_issue(
        fake_forge.repo("acme", "widgets"), "Plan it", labels=["ceaseless:plan"], user="alice"
    )
    (decision,) = poll_due(db_url)["acme/widgets"].decisions
    assert decision.decision == "created" and decision.job_id is not None
    runs = claim_started(conn)
    message = f"Planned.\n\n```ceaseless\n{json.dumps({'children': children})}\n```\n"
    assert finish(conn, runs[decision.job_id], "succeeded", final_message=message) == "delivered"
    return decision.job_id


def test_a_plans_children_become_issues_and_implement_jobs(
    db_url: str, conn: psycopg.Connection, fake_forge: FakeForge
) -> None:
    plan = delivered_plan(db_url, conn, fake_forge, CHILDREN)

    assert children_round(db_url) == 2
    issues = fake_forge.repo("acme", "widgets").issues
    assert [(i.number, i.title) for i in issues.values()] == [
        (1, "Plan it"),
        (2, "Parse the config"),
        (3, "Document the config"),
    ]
    markers = conn.execute(
        "select key, marker from ceaseless.forge_child_issue order by position"
    ).fetchall()
    assert issues[2].body == f"Use tomllib.\n\n{markers[0][1]}"
    assert issues[3].body == f"In docs/config.md.\n\n{markers[1][1]}"
    created = fake_forge.requests_to("POST", "/repos/acme/widgets/issues")
    assert {r.authorization for r in created} == {f"Bearer {RUNNER_TOKEN}"}

    jobs = conn.execute(
        "select number, kind, agent, parent_job_id, state from ceaseless.job "
        "where parent_job_id is not null order by number"
    ).fetchall()
    assert jobs == [
        (2, "implement", "opencode", plan, "pending"),
        (3, "implement", "opencode", plan, "pending"),
    ]
    recorded = conn.execute(
        "select number, html_url is not null, implement_job_id is not null, last_error "
        "from ceaseless.forge_child_issue order by position"
    ).fetchall()
    assert recorded == [(2, True, True, None), (3, True, True, None)]

    # Nothing is due any more: no second issue, however often the loop runs.
    conn.execute("update ceaseless.forge_child_issue set next_attempt_at = now()")
    assert children_round(db_url) == 0
    assert len(fake_forge.requests_to("POST", "/repos/acme/widgets/issues")) == 2


def test_a_crash_after_creating_the_issue_does_not_duplicate_it(
    db_url: str, conn: psycopg.Connection, fake_forge: FakeForge
) -> None:
    plan = delivered_plan(db_url, conn, fake_forge, CHILDREN[:1])
    # The first attempt: handed out, the issue created on the forge, and the
    # listener gone before it could record it.
    (child_id, body, child_marker, attempts) = conn.execute(
        "select id, body, marker, attempts from ceaseless.child_issues_due(1, now())"
    ).fetchone()  # type: ignore[misc]
    assert attempts == 1
    lost = fake_forge.add_issue(
        fake_forge.repo("acme", "widgets"),
        "Parse the config",
        f"{body}\n\n{child_marker}",
        user=fake_forge.user,
    )
    conn.execute(
        "update ceaseless.forge_child_issue set next_attempt_at = now() where id = %s",
        (child_id,),
    )

    assert children_round(db_url) == 1
    assert len(fake_forge.repo("acme", "widgets").issues) == 2  # the plan's and the lost one
    assert fake_forge.requests_to("POST", "/repos/acme/widgets/issues") == []
    row = conn.execute(
        "select c.number, c.attempts, j.number, j.parent_job_id from ceaseless.forge_child_issue c "
        "join ceaseless.job j on j.id = c.implement_job_id where c.id = %s",
        (child_id,),
    ).fetchone()
    assert row == (lost.number, 2, lost.number, plan)


def test_a_failed_creation_is_recorded_and_retried(
    db_url: str, conn: psycopg.Connection, fake_forge: FakeForge
) -> None:
    delivered_plan(db_url, conn, fake_forge, CHILDREN[:1])
    fake_forge.repo("acme", "widgets").fail = True

    assert children_round(db_url) == 0
    row = conn.execute(
        "select number, last_error, next_attempt_at > now() from ceaseless.forge_child_issue"
    ).fetchone()
    assert row is not None and row[0] is None and "HTTP 500" in row[1] and row[2]
    assert children_round(db_url) == 0  # not before its next attempt

    fake_forge.repo("acme", "widgets").fail = False
    conn.execute("update ceaseless.forge_child_issue set next_attempt_at = now()")
    fake_forge.requests.clear()
    assert children_round(db_url) == 1
    # The second attempt looked for the marker first, found nothing, then created it.
    calls = [(r.method, r.path) for r in fake_forge.requests]
    assert calls[0] == ("GET", "/repos/acme/widgets/issues")
    assert calls[-1] == ("POST", "/repos/acme/widgets/issues")
    assert calls.count(("POST", "/repos/acme/widgets/issues")) == 1
    assert conn.execute("select number from ceaseless.forge_child_issue").fetchone() == (2,)
