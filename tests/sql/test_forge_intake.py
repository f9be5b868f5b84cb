"""Forge jobs come from the forge intake alone, never from a role's INSERT.

As alice, the review inserted an implement job naming a victim's repository and a payload whose
api_url pointed at alice's own server; the listener then sent its forge token there. A forge
job (kinds discover, plan and implement, and the columns forge, owner, repo and number) is now
created only by ingest_issues and the child-issue path, which build it from a tracked repo.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import psycopg
import pytest

from tests.factories import make_agent
from tests.sql.test_forge_jobs import ingest, issue
from tests.sql.test_tracked_repo import make_repo

Connect = Callable[..., psycopg.Connection]

STOLEN = json.dumps(
    {
        "forge": {
            "api_url": "http://127.0.0.1:9/",
            "clone_url": "http://127.0.0.1:9/victim-org/private-repo.git",
            "default_branch": "main",
        }
    }
)


@pytest.fixture(autouse=True)
def lanes(conn: psycopg.Connection) -> None:
    make_agent(conn, "claude_code", "noop")
    make_agent(conn, "opencode", "noop")
    make_agent(conn, "a", "noop")


@pytest.mark.parametrize(
    "statement",
    [
        "insert into ceaseless.job (kind, agent, prompt, forge, owner, repo, number, payload) "
        "values ('implement', 'a', 'x', 'github', 'victim-org', 'private-repo', 1, %s)",
        "insert into ceaseless.job (kind, agent, prompt, forge, owner, repo, number, payload) "
        "values ('task', 'a', 'x', 'github', 'victim-org', 'private-repo', 1, %s)",
    ],
    ids=["implement", "task-with-an-issue"],
)
def test_a_user_cannot_insert_a_forge_job(
    conn: psycopg.Connection, login_role: Connect, statement: str
) -> None:
    alice = login_role("alice")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.execute(statement, (STOLEN,))
    assert conn.execute("select count(*) from ceaseless.job").fetchone() == (0,)


@pytest.mark.parametrize("kind", ["discover", "plan", "implement"])
def test_a_user_cannot_insert_a_job_of_a_forge_kind(
    conn: psycopg.Connection, login_role: Connect, kind: str
) -> None:
    alice = login_role("alice")
    with pytest.raises(psycopg.errors.CheckViolation) as error:
        alice.execute(
            "insert into ceaseless.job (kind, agent, prompt, payload) values (%s, 'a', 'x', %s)",
            (kind, STOLEN),
        )
    assert error.value.diag.constraint_name == "issue_ref_required_for_forge_kinds"


def test_an_operator_cannot_insert_a_forge_job(login_role: Connect) -> None:
    ops = login_role("ops", "ceaseless_operator")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        ops.execute(
            "insert into ceaseless.job (kind, agent, prompt, forge, owner, repo, number, payload) "
            "values ('implement', 'a', 'x', 'github', 'victim-org', 'private-repo', 1, %s)",
            (STOLEN,),
        )


def test_the_intake_makes_the_forge_jobs_of_a_users_repo_from_the_repo(
    conn: psycopg.Connection, login_role: Connect
) -> None:
    alice = login_role("alice")
    listener = login_role("listener", "ceaseless_listener")
    (owner,) = alice.execute("select current_user").fetchone()  # type: ignore[misc]
    repo = make_repo(alice, as_user=True, owner="o", repo="r", allowed_authors=["alice"])

    decided = ingest(listener, repo, [issue(4, "ceaseless:implement")])

    kind, decision, job_id = decided[4]
    assert (kind, decision) == ("implement", "created")
    row = alice.execute(
        "select user_id, forge, owner, repo, number, payload -> 'forge' ->> 'clone_url' "
        "from ceaseless.job where id = %s",
        (job_id,),
    ).fetchone()
    assert row == (owner, "github", "o", "r", 4, "https://github.com/octo-org/hello.git")
