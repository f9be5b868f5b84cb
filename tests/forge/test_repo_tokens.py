"""A repo a user tracks gets none of the listener's forge tokens until an operator allows it.

The listener's tokens are the deployment's identity on the forge. Without this
rule a user role tracks victim-org/private-repo on the very host the tokens are
bound to, and the listener polls it, reads its issues and writes its labels with
the deployment's identity: a confused deputy. Each test runs the real poller,
label and child loops against the fake forge (whose private repos answer an
anonymous request 404, as GitHub does) and real login roles.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from tests.conftest import PASSWORD
from tests.e2e.support import ROOT, run_cli
from tests.fakes.forge import FakeForge
from tests.forge.loops_support import (
    LABEL_TOKEN,
    RUNNER_TOKEN,
    add_lanes,
    children_round,
    labels_round,
    make_due,
    poll_due,
    set_tokens,
)

PLAN = "ceaseless:plan"
HINT = "ceaseless repo tokens victim-org/private-repo --allow"


@pytest.fixture(autouse=True)
def _tokens(
    monkeypatch: pytest.MonkeyPatch, conn: psycopg.Connection, fake_forge: FakeForge
) -> None:
    set_tokens(monkeypatch, conn, fake_forge)
    fake_forge.tokens[RUNNER_TOKEN] = "ceaseless-bot"
    fake_forge.tokens[LABEL_TOKEN] = "ceaseless-labels"


def track(user: psycopg.Connection, fake_forge: FakeForge, owner: str, name: str) -> str:
    """The id of a repo `user` tracks on the fake forge (the host the tokens are bound to)."""
    row = user.execute(
        "insert into ceaseless.tracked_repo (forge, owner, repo, api_url, clone_url, "
        "default_branch, interval_seconds, allowed_authors) "
        "values ('github', %s, %s, %s, '/srv/git/x.git', 'main', 60, '{boss}') "
        "returning id, tokens_allowed",
        (owner, name, fake_forge.url),
    ).fetchone()
    assert row is not None
    assert row[1] is False, "a repo a user role tracks starts without the listener's tokens"
    return str(row[0])


def allowed(conn: psycopg.Connection, repo_id: str) -> bool:
    row = conn.execute(
        "select tokens_allowed from ceaseless.repo_status where id = %s", (repo_id,)
    ).fetchone()
    assert row is not None
    return bool(row[0])


def cli(db_url: str, user: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(make_conninfo(db_url, user=user, password=PASSWORD), "repo", *args)


def test_a_user_role_cannot_allow_its_repo_the_tokens(
    db_url: str,
    conn: psycopg.Connection,
    fake_forge: FakeForge,
    login_role: Callable[..., psycopg.Connection],
) -> None:
    alice = login_role("alice")
    repo_id = track(alice, fake_forge, "victim-org", "private-repo")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.execute(
            "update ceaseless.tracked_repo set tokens_allowed = true where id = %s", (repo_id,)
        )
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.execute(
            "insert into ceaseless.tracked_repo (forge, owner, repo, clone_url, default_branch, "
            "interval_seconds, tokens_allowed) "
            "values ('github', 'victim-org', 'other', '/srv/x.git', 'main', 60, true)"
        )
    assert not allowed(conn, repo_id)
    # `repo add` tells alice what her repo runs without, and who can change it.
    added = cli(
        db_url,
        alice.info.user,
        "add",
        "alice-org/tools",
        "--clone-url",
        "/srv/x.git",
        "--branch",
        "main",
        "--interval",
        "60",
        "--author",
        "alice",
    )
    assert added.returncode == 0, added.stderr
    assert "ceaseless repo tokens alice-org/tools --allow" in added.stderr
    # The database's owner is trusted with its own rows: its repos keep the tokens.
    own = conn.execute(
        "insert into ceaseless.tracked_repo (forge, owner, repo, clone_url, default_branch, "
        "interval_seconds) values ('github', 'acme', 'widgets', '/srv/x.git', 'main', 60) "
        "returning tokens_allowed"
    ).fetchone()
    assert own == (True,)


def test_a_users_private_repo_is_polled_anonymously_until_an_operator_allows_it(
    db_url: str,
    conn: psycopg.Connection,
    fake_forge: FakeForge,
    login_role: Callable[..., psycopg.Connection],
) -> None:
    """The confused deputy: alice tracks victim-org's private repo on the host the listener's
    tokens are for. The poll goes out without a token, the forge hides the repo (404), and the
    repo's error says why and what an operator runs; once one does, the poll carries the token."""
    add_lanes(conn)
    victim = fake_forge.add_repo("victim-org", "private-repo")
    victim.private = True
    fake_forge.add_issue(victim, "Secret plans", "x", labels=[PLAN], user="boss")
    alice = login_role("alice")
    operator = login_role("ops", "ceaseless_operator").info.user
    repo_id = track(alice, fake_forge, "victim-org", "private-repo")

    report = poll_due(db_url)["victim-org/private-repo"]
    assert [r.authorization for r in fake_forge.requests] == [None] * len(fake_forge.requests)
    assert report.error is not None and "HTTP 404" in report.error and HINT in report.error
    assert conn.execute("select count(*) from ceaseless.job").fetchone() == (0,)
    (error,) = alice.execute(
        "select last_error from ceaseless.repo_status where id = %s", (repo_id,)
    ).fetchone()
    assert HINT in error  # alice sees why in her own view

    # alice cannot allow it from the CLI either; an operator can.
    refused = cli(db_url, alice.info.user, "tokens", repo_id, "--allow")
    assert refused.returncode == 1 and "permission denied" in refused.stderr
    assert not allowed(conn, repo_id)
    done = cli(db_url, operator, "tokens", "victim-org/private-repo", "--allow")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "repo victim-org/private-repo: forge tokens allowed"

    make_due(conn, repo_id)
    before = len(fake_forge.requests)
    report = poll_due(db_url)["victim-org/private-repo"]
    assert report.error is None
    sent = fake_forge.requests[before:]
    assert sent and all((r.authorization or "").endswith(RUNNER_TOKEN) for r in sent)
    assert conn.execute("select kind, user_id from ceaseless.job").fetchall() == [
        ("plan", alice.info.user)
    ]


def test_a_user_who_points_an_allowed_repo_elsewhere_loses_the_tokens(
    db_url: str,
    conn: psycopg.Connection,
    fake_forge: FakeForge,
    login_role: Callable[..., psycopg.Connection],
) -> None:
    """The allowance is for the repository the operator saw: alice changing its owner, name, API
    or clone URL takes it away; changing its schedule keeps it."""
    alice = login_role("alice")
    repo_id = track(alice, fake_forge, "alice-org", "tools")
    conn.execute(
        "update ceaseless.tracked_repo set tokens_allowed = true where id = %s", (repo_id,)
    )

    alice.execute(
        "update ceaseless.tracked_repo set interval_seconds = 600, allowed_authors = '{alice}' "
        "where id = %s",
        (repo_id,),
    )
    assert allowed(conn, repo_id)
    for change in (
        "owner = 'victim-org', repo = 'private-repo'",
        "clone_url = 'https://github.com/victim-org/private-repo.git'",
        "api_url = 'https://ghe.example.com/api/v3'",
    ):
        alice.execute(
            f"update ceaseless.tracked_repo set {change} where id = %s",  # type: ignore[arg-type]
            (repo_id,),
        )
        assert not allowed(conn, repo_id), change
        conn.execute(
            "update ceaseless.tracked_repo set tokens_allowed = true where id = %s", (repo_id,)
        )


def test_labels_and_child_issues_of_a_repo_not_allowed_are_not_written(
    db_url: str,
    conn: psycopg.Connection,
    fake_forge: FakeForge,
    login_role: Callable[..., psycopg.Connection],
) -> None:
    """The writes too: a plan job of alice's public repo (polled anonymously) gets its label and
    its child issues only after an operator allows the tokens; until then each waits with the
    reason, and the forge sees no write and no token."""
    add_lanes(conn)
    public = fake_forge.add_repo("alice-org", "tools")
    issue = fake_forge.add_issue(public, "Plan it", "x", labels=[PLAN], user="boss")
    alice = login_role("alice")
    repo_id = track(alice, fake_forge, "alice-org", "tools")
    assert poll_due(db_url)["alice-org/tools"].error is None
    (job_id,) = conn.execute("select id from ceaseless.job").fetchone()
    conn.execute(
        "insert into ceaseless.forge_child_issue (plan_job_id, repo_id, parent_number, key, "
        "position, title, body, marker, user_id) "
        "values (%s, %s, %s, 'a', 1, 'Child', 'b', 'm', %s)",
        (job_id, repo_id, issue.number, alice.info.user),
    )

    assert labels_round(db_url) == 0
    assert children_round(db_url) == 0
    assert [r for r in fake_forge.requests if r.method != "GET"] == []
    assert [r.authorization for r in fake_forge.requests] == [None] * len(fake_forge.requests)
    (labels_error,) = conn.execute(
        "select labels_error from ceaseless.job where id = %s", (job_id,)
    ).fetchone()
    (child_error,) = conn.execute("select last_error from ceaseless.forge_child_issue").fetchone()
    hint = "ceaseless repo tokens alice-org/tools --allow"
    assert hint in labels_error and hint in child_error


def test_the_docs_example_lists_the_repos_without_tokens_and_allows_one(
    conn: psycopg.Connection,
    fake_forge: FakeForge,
    login_role: Callable[..., psycopg.Connection],
) -> None:
    """docs/forge.md, "Which repos may use the tokens", run as an operator."""
    text = (ROOT / "docs" / "forge.md").read_text()
    section = text.split("### Which repos may use the tokens", 1)[1]
    example = section.split("```sql\n", 1)[1].split("```", 1)[0]
    listing, allowing = example.split("-- Allow one", 1)
    alice = login_role("alice")
    operator = login_role("ops", "ceaseless_operator")
    repo_id = track(alice, fake_forge, "octo-org", "hello")

    rows = operator.execute(listing).fetchall()  # type: ignore[call-overload]
    assert [(str(r[0]), r[1], r[3]) for r in rows] == [(repo_id, alice.info.user, "octo-org/hello")]
    operator.execute("-- Allow one" + allowing)  # type: ignore[call-overload]
    assert allowed(conn, repo_id)
