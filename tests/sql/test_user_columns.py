"""A user role writes only the columns a user chooses; the engine's and the listener's are theirs.

As alice and bob (login roles in ceaseless_user): a job inserted running with a claim that
never expires shut its lane for everyone; a delivered job naming bob's routine run, then
retry_job, fired bob's routine with alice's prompt. Each attack is made as it was, and must
now be refused, while everything the documentation shows a user doing still works.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from uuid import UUID

import psycopg
import pytest

from tests.factories import claim, make_agent
from tests.sql.topology import graph, node

Connect = Callable[..., psycopg.Connection]

ROUTINE_COLUMNS = {
    "name", "description", "enabled", "trigger_type", "trigger_config", "action_type",
    "action_config", "agent", "cooldown_secs", "max_concurrent", "dedup_window_secs",
    "notify_channel", "notify_user", "notify_on_success", "notify_on_failure",
    "notify_on_attention", "max_cost_usd", "max_tokens", "overlap_policy", "debounce_secs",
    "debounce_max_secs", "job_priority", "job_fairness_key",
}  # fmt: skip
LOOP_COLUMNS = {
    "workspace_id", "title", "description", "graph", "task_template", "triggers",
    "repeat_policy", "enabled", "overlap_policy", "debounce_secs", "debounce_max_secs",
    "job_priority", "job_fairness_key", "min_interval_secs",
}  # fmt: skip
REPO_COLUMNS = {
    "forge", "owner", "repo", "clone_url", "api_url", "default_branch", "interval_seconds",
    "quiet_from", "quiet_until", "quiet_timezone", "enabled", "tracking_issue",
    "discover_cooldown_secs", "discover_label", "plan_label", "implement_label",
    "allowed_authors",
}  # fmt: skip
JOB_COLUMNS = {
    "kind", "agent", "prompt", "payload", "max_turns", "max_attempts", "run_after", "dedup_key",
    "max_cost_usd", "max_tokens", "priority", "fairness_key",
}  # fmt: skip
OWNED = {"id", "user_id"}

# What a user role may write, table by table (docs/routines.md, "What a user writes").
WRITABLE: dict[tuple[str, str], set[str]] = {
    ("routines", "INSERT"): ROUTINE_COLUMNS | OWNED,
    ("routines", "UPDATE"): ROUTINE_COLUMNS,
    ("job", "INSERT"): JOB_COLUMNS | OWNED,
    ("events", "INSERT"): {"channel", "content", "payload"} | OWNED,
    ("loops", "INSERT"): LOOP_COLUMNS | OWNED,
    ("loops", "UPDATE"): LOOP_COLUMNS,
    ("topology_runs", "INSERT"): {"workspace_id", "graph", "task"} | OWNED,
    ("tracked_repo", "INSERT"): REPO_COLUMNS | OWNED,
    ("tracked_repo", "UPDATE"): REPO_COLUMNS,
}


def _who(c: psycopg.Connection) -> str:
    row = c.execute("select current_user").fetchone()
    assert row is not None
    return str(row[0])


def _one(c: psycopg.Connection, query: str, params: Any = None) -> Any:
    row = c.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def _routine(c: psycopg.Connection, name: str = "mine", **columns: Any) -> UUID:
    values: dict[str, Any] = {
        "name": name,
        "trigger_type": "manual",
        "action_type": "lightweight",
        "action_config": json.dumps({"prompt": f"{name} prompt"}),
        "agent": "noop",
        "cooldown_secs": 0,
        **columns,
    }
    names = ", ".join(values)
    marks = ", ".join(["%s"] * len(values))
    return _one(
        c,
        f"insert into ceaseless.routines ({names}) values ({marks}) returning id",
        list(values.values()),
    )


def _shards_match(conn: psycopg.Connection) -> tuple[int, int]:
    row = conn.execute(
        "select (select coalesce(sum(running), 0) from ceaseless.routine_run_shards), "
        "(select count(*) from ceaseless.routine_runs where status = 'running')"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_a_user_role_may_write_exactly_the_columns_a_user_chooses(
    conn: psycopg.Connection,
) -> None:
    rows = conn.execute(
        "select table_name, privilege_type, column_name "
        "from information_schema.column_privileges "
        "where grantee = 'ceaseless_user' and table_schema = 'ceaseless' "
        "  and privilege_type in ('INSERT', 'UPDATE')"
    ).fetchall()
    granted: dict[tuple[str, str], set[str]] = {}
    for table, privilege, column in rows:
        granted.setdefault((table, privilege), set()).add(column)
    assert granted == WRITABLE


def test_a_user_cannot_insert_a_running_job_that_holds_its_lane(
    conn: psycopg.Connection, login_role: Connect
) -> None:
    make_agent(conn, max_concurrent=1)
    alice, bob = login_role("alice"), login_role("bob")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.execute(
            "insert into ceaseless.job (kind, agent, prompt, state, claimed_by, claim_expires_at, "
            "claimed_at) values ('task', 'noop', 'x', 'running', 'x', "
            "now() + interval '100 years', now())"
        )
    for column, value in [
        ("state", "'claimed'"),
        ("attempts", "99"),
        ("finished_at", "now()"),
        ("last_error", "'x'"),
        ("created_at", "now() - interval '1 year'"),
    ]:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            alice.execute(
                f"insert into ceaseless.job (kind, agent, prompt, {column}) "
                f"values ('task', 'noop', 'x', {value})"
            )
    bobs = _one(
        bob,
        "insert into ceaseless.job (kind, agent, prompt) values ('task', 'noop', 'b') returning id",
    )
    assert claim(conn, limit=5) == [bobs]
    assert _one(conn, "select ceaseless.expire_leases(now() + interval '1 day')") == 1


def test_a_user_cannot_point_a_job_at_runs_jobs_or_sessions(
    conn: psycopg.Connection, login_role: Connect
) -> None:
    make_agent(conn)
    alice, bob = login_role("alice"), login_role("bob")
    bobs_run = _one(bob, "select ceaseless.run_routine(%s)", (_routine(bob),))
    bobs_job = _one(conn, "select job_id from ceaseless.routine_runs where id = %s", (bobs_run,))
    bobs_topology = _one(
        bob,
        "insert into ceaseless.topology_runs (graph, task) values (%s, 't') returning id",
        (json.dumps(graph([node("A")])),),
    )
    for column, value in [
        ("routine_run_id", bobs_run),
        ("topology_run_id", bobs_topology),
        ("parent_job_id", bobs_job),
        ("resume_session_id", "7b3f1c9e-1d2a-4c5b-8e6f-0a1b2c3d4e5f"),
        ("expects_reply", True),
    ]:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            alice.execute(
                "insert into ceaseless.job (kind, agent, prompt, state, finished_at, "
                f"{column}) values ('task', 'noop', 'alice''s prompt', 'delivered', now(), %s)",
                (value,),
            )


@pytest.fixture
def planted(
    conn: psycopg.Connection, login_role: Connect
) -> tuple[psycopg.Connection, UUID, UUID, UUID]:
    """Bob's routine with a running run, and a job of alice's naming that run, as a row an
    earlier version let a user write (planted here by the owner)."""
    make_agent(conn, max_concurrent=10)
    alice, bob = login_role("alice"), login_role("bob")
    routine = _routine(bob, max_concurrent=5)
    run = _one(bob, "select ceaseless.run_routine(%s)", (routine,))
    job = _one(
        conn,
        "insert into ceaseless.job (kind, agent, prompt, routine_run_id, user_id) "
        "values ('routine', 'noop', 'alice''s prompt', %s, %s) returning id",
        (run, _who(alice)),
    )
    return alice, routine, run, job


def test_retry_job_refuses_a_job_naming_another_owners_routine_run(
    conn: psycopg.Connection, planted: tuple[psycopg.Connection, UUID, UUID, UUID]
) -> None:
    alice, routine, _, job = planted
    conn.execute("select ceaseless.cancel_job(%s)", (job,))
    runs_before = _one(
        conn, "select count(*) from ceaseless.routine_runs where routine_id = %s", (routine,)
    )
    with pytest.raises(psycopg.Error) as error:
        alice.execute("select ceaseless.retry_job(%s)", (job,))
    assert error.value.sqlstate == "CE404"
    assert (
        _one(conn, "select count(*) from ceaseless.routine_runs where routine_id = %s", (routine,))
        == runs_before
    )
    assert _one(conn, "select state from ceaseless.job where id = %s", (job,)) == "cancelled"


def test_cancel_job_refuses_a_job_naming_another_owners_routine_run(
    conn: psycopg.Connection, planted: tuple[psycopg.Connection, UUID, UUID, UUID]
) -> None:
    alice, _, run, job = planted
    with pytest.raises(psycopg.Error) as error:
        alice.execute("select ceaseless.cancel_job(%s)", (job,))
    assert error.value.sqlstate == "CE404"
    assert _one(conn, "select status from ceaseless.routine_runs where id = %s", (run,)) == (
        "running"
    )
    assert _one(conn, "select state from ceaseless.job where id = %s", (job,)) == "pending"


def test_a_users_job_dated_back_does_not_jump_the_queue(
    conn: psycopg.Connection, login_role: Connect
) -> None:
    make_agent(conn, max_concurrent=1)
    alice, bob = login_role("alice"), login_role("bob")
    bobs = _one(
        bob,
        "insert into ceaseless.job (kind, agent, prompt) values ('task', 'noop', 'b') returning id",
    )
    alices = _one(
        alice,
        "insert into ceaseless.job (kind, agent, prompt, run_after) "
        "values ('task', 'noop', 'a', now() - interval '1 year') returning id",
    )
    assert _one(
        conn,
        "select run_after >= now() - interval '1 minute' from ceaseless.job where id = %s",
        (alices,),
    )
    assert claim(conn, limit=1) == [bobs]
    # Later is a user's to choose.
    later = _one(
        alice,
        "insert into ceaseless.job (kind, agent, prompt, run_after) "
        "values ('task', 'noop', 'a', now() + interval '1 day') returning run_after - now()",
    )
    assert later.days == 1


@pytest.mark.parametrize(
    "statement",
    [
        "update ceaseless.routines set next_fire_at = now()",
        "update ceaseless.routines set run_count = 0, consecutive_failures = 0",
        "update ceaseless.routines set last_run_at = null",
        "update ceaseless.routines set last_error = null",
        'update ceaseless.routines set state = \'{"last_status": "ok"}\'',
        "update ceaseless.loops set next_fire_at = now()",
        "update ceaseless.loops set stopped_reason = null, stopped_at = null",
        "update ceaseless.loops set policy_from_iteration = 0",
        "update ceaseless.loops set last_run_id = null",
        "update ceaseless.loops set created_by = null",
        "update ceaseless.loops set last_error = null",
        "update ceaseless.loops set webhook_token = 'loop_mine'",
        "update ceaseless.tracked_repo set next_poll_at = now()",
        "update ceaseless.tracked_repo set last_etag = null, last_polled_at = null",
        "update ceaseless.tracked_repo set last_error = null",
        "update ceaseless.topology_runs set status = 'succeeded'",
        "update ceaseless.events set fired_count = 0",
        "insert into ceaseless.events (content, created_at) values ('deploy', now() + "
        "interval '100 years')",
        "insert into ceaseless.events (content, fired_count) values ('deploy', 5)",
        "insert into ceaseless.topology_runs (graph, task, status) "
        "select graph, 't', 'skipped' from ceaseless.loops",
        "insert into ceaseless.topology_runs (graph, task, final_message) "
        "select graph, 't', 'made up' from ceaseless.loops",
        "insert into ceaseless.routines (name, trigger_type, action_type, action_config, agent, "
        "next_fire_at) values ('x', 'manual', 'lightweight', '{\"prompt\": \"p\"}', 'noop', now())",
    ],
)
def test_a_user_cannot_write_what_the_engine_and_the_listener_keep(
    conn: psycopg.Connection, login_role: Connect, statement: str
) -> None:
    make_agent(conn)
    alice = login_role("alice")
    _routine(alice)
    alice.execute(
        "insert into ceaseless.loops (title, description, graph, task_template) "
        "values ('l', '', %s, 'do it')",
        (json.dumps(graph([node("A")])),),
    )
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.execute(statement)


def test_a_user_still_does_what_the_documentation_shows(
    conn: psycopg.Connection, login_role: Connect
) -> None:
    make_agent(conn)
    alice = login_role("alice")
    me = _who(alice)
    job = _one(
        alice,
        "insert into ceaseless.job (kind, agent, prompt, payload, max_turns, max_attempts, "
        "dedup_key, run_after, user_id) values ('task', 'noop', 'p', '{\"k\": 1}', 5, 2, "
        "'daily', now() + interval '1 hour', current_user) returning id",
    )
    row = conn.execute(
        "select state, claimed_by, attempts, user_id from ceaseless.job where id = %s", (job,)
    ).fetchone()
    assert row == ("pending", None, 0, me)
    routine = _routine(alice, notify_on_success=True, dedup_window_secs=60)
    alice.execute(
        "update ceaseless.routines set enabled = false, cooldown_secs = 5, "
        'action_config = \'{"prompt": "new"}\' where id = %s',
        (routine,),
    )
    alice.execute("insert into ceaseless.events (channel, content) values ('ci', 'deploy')")
    loop = _one(
        alice,
        "insert into ceaseless.loops (title, description, graph, task_template, triggers) "
        "values ('l', '', %s, 'do it', '{\"webhook_enabled\": true}') returning id",
        (json.dumps(graph([node("A")])),),
    )
    alice.execute(
        "update ceaseless.loops set title = 'renamed', triggers = '{}' where id = %s", (loop,)
    )
    alice.execute(
        "insert into ceaseless.topology_runs (graph, task) values (%s, 'go')",
        (json.dumps(graph([node("A")])),),
    )
    alice.execute("delete from ceaseless.loops where id = %s and false", (loop,))
    repo = _one(
        alice,
        "insert into ceaseless.tracked_repo (forge, owner, repo, clone_url, default_branch, "
        "interval_seconds) values ('github', 'o', 'r', 'https://github.com/o/r.git', 'main', "
        "300) returning id",
    )
    alice.execute(
        "update ceaseless.tracked_repo set interval_seconds = 600, enabled = false where id = %s",
        (repo,),
    )
    alice.execute("delete from ceaseless.tracked_repo where id = %s", (repo,))


def test_a_user_deletes_its_own_routine_with_its_running_runs(
    conn: psycopg.Connection, login_role: Connect
) -> None:
    make_agent(conn, max_concurrent=10)
    alice = login_role("alice")
    routine = _routine(alice, max_concurrent=3)
    for _ in range(2):
        alice.execute("select ceaseless.run_routine(%s)", (routine,))
    assert _shards_match(conn) == (2, 2)

    assert alice.execute("delete from ceaseless.routines where id = %s", (routine,)).rowcount == 1

    assert _shards_match(conn) == (0, 0)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.execute("select ceaseless._count_running(-5)")
