"""Every CLI list, show and why command works for a plain `ceaseless_user` login role, and
shows that user only their own rows: the views behind them are granted to user roles and
read with the caller's row-level security."""

from __future__ import annotations

import json
from collections.abc import Callable

import psycopg
from psycopg.conninfo import make_conninfo

from tests.conftest import PASSWORD
from tests.e2e.support import run_cli

GRAPH = json.dumps({"nodes": [{"id": "a", "agent": "noop", "prompt": "p"}], "edges": []})


def _as(db_url: str, role: psycopg.Connection) -> str:
    return make_conninfo(db_url, user=role.info.user, password=PASSWORD)


def _populate(url: str, tag: str) -> dict[str, str]:
    """What a user makes with the CLI: a job, a routine, a loop run, a tracked repo."""
    job = run_cli(url, "job", "add", "noop", f"{tag} job")
    assert job.returncode == 0, job.stderr
    routine = run_cli(url, "routine", "add", f"{tag}-routine", "--agent", "noop", "--prompt", "p")
    assert routine.returncode == 0, routine.stderr
    loop = run_cli(
        url, "loop", "add", "--title", f"{tag}-loop", "--task", "t", "--graph", "-", stdin=GRAPH
    )
    assert loop.returncode == 0, loop.stderr
    loop_id = loop.stdout.split()[0]
    ran = run_cli(url, "loop", "run", loop_id)
    assert ran.returncode == 0, ran.stderr
    repo = run_cli(
        url, "repo", "add", f"{tag}-org/hello", "--clone-url",
        f"https://github.com/{tag}-org/hello.git", "--branch", "main", "--interval", "300",
    )  # fmt: skip
    assert repo.returncode == 0, repo.stderr
    return {
        "job": job.stdout.strip(),
        "routine": f"{tag}-routine",
        "loop": loop_id,
        "run": ran.stdout.split()[0],
        "repo": f"{tag}-org/hello",
    }


def test_every_list_show_and_why_command_runs_as_a_user_and_shows_only_theirs(
    db_url: str, conn: psycopg.Connection, login_role: Callable[..., psycopg.Connection]
) -> None:
    assert run_cli(db_url, "agent", "add", "noop", "--adapter", "noop").returncode == 0
    alice_role = login_role("alice")
    alice = _as(db_url, alice_role)
    bob = _as(db_url, login_role("bob"))
    mine = _populate(alice, "alice")
    _populate(bob, "bob")

    commands = [
        ["status"],
        ["status", "-o", "json"],
        ["agent", "list"],
        ["agent", "show", "noop"],
        ["job", "list"],
        ["job", "show", mine["job"]],
        ["job", "list", "--all"],
        ["job", "why", mine["job"]],
        ["routine", "list"],
        ["routine", "show", mine["routine"]],
        ["routine", "why", mine["routine"]],
        ["loop", "list"],
        ["loop", "show", mine["loop"]],
        ["loop", "why", mine["loop"]],
        ["repo", "list"],
        ["repo", "show", mine["repo"]],
        ["run", "show", mine["run"]],
    ]
    for command in commands:
        result = run_cli(alice, *command)
        shown = " ".join(command)
        assert result.returncode == 0, f"`ceaseless {shown}` as a user: {result.stderr}"
        assert "permission denied" not in result.stderr, shown
        assert "bob" not in result.stdout, f"`ceaseless {shown}` showed bob's rows"

    listed = run_cli(alice, "job", "list", "-o", "json")
    hers = conn.execute(
        "select id::text from ceaseless.job where user_id = %s and state = 'pending'",
        (alice_role.info.user,),
    ).fetchall()
    assert mine["job"] in {row[0] for row in hers}
    assert sorted(row["id"] for row in json.loads(listed.stdout)) == sorted(r[0] for r in hers)
    routines = run_cli(alice, "routine", "list", "-o", "json")
    assert [row["name"] for row in json.loads(routines.stdout)] == ["alice-routine"]
