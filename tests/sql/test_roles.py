"""Roles and row-level security: a user role sees and changes only its own rows.

Login roles alice and bob (members of ceaseless_user) connect for real, with
passwords, as a deployment's users would.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests.factories import complete_job, make_agent


def _whoami(c: psycopg.Connection) -> str:
    row = c.execute("select current_user").fetchone()
    assert row is not None
    return str(row[0])


def _routine(c: psycopg.Connection, name: str, **config: Any) -> uuid.UUID:
    row = c.execute(
        "insert into ceaseless.routines (name, trigger_type, trigger_config, action_type, "
        "action_config, agent) values (%s, %s, %s, 'lightweight', %s, 'noop') returning id",
        (
            name,
            config.get("trigger_type", "manual"),
            json.dumps(config.get("trigger_config", {})),
            json.dumps({"prompt": f"{name} prompt"}),
        ),
    ).fetchone()
    assert row is not None
    return row[0]


def _count(c: psycopg.Connection, table: str) -> int:
    row = c.execute(f"select count(*) from ceaseless.{table}").fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def two_users(
    conn: psycopg.Connection, login_role: Callable[..., psycopg.Connection]
) -> tuple[psycopg.Connection, psycopg.Connection, dict[str, Any]]:
    make_agent(conn, max_concurrent=10, env={"ANTHROPIC_API_KEY": "sk-secret"})
    conn.commit()
    alice, bob = login_role("alice"), login_role("bob")
    rows: dict[str, Any] = {}
    for user in (alice, bob):
        who = _whoami(user)
        rows[f"{who}:routine"] = _routine(user, "mine")
        rows[f"{who}:event_routine"] = _routine(
            user, "on-deploy", trigger_type="event", trigger_config={"pattern": "deploy"}
        )
        rows[f"{who}:run"] = user.execute(
            "select ceaseless.run_routine(%s)", (rows[f"{who}:routine"],)
        ).fetchone()[0]  # type: ignore[index]
        user.execute("insert into ceaseless.events (content) values ('deploy done')")
        rows[f"{who}:job"] = user.execute(
            "insert into ceaseless.job (kind, agent, prompt) values ('task', 'noop', 'hi') "
            "returning id"
        ).fetchone()[0]  # type: ignore[index]
    # The listener's part, as superuser: claim and run the due jobs.
    complete_job(conn, rows[f"{_whoami(bob)}:job"], "succeeded", "done")
    conn.commit()
    return alice, bob, rows


def test_a_user_sees_only_its_own_routines_jobs_runs_and_events(
    conn: psycopg.Connection,
    two_users: tuple[psycopg.Connection, psycopg.Connection, dict[str, Any]],
) -> None:
    alice, bob, _ = two_users
    everyone = {t: _count(conn, t) for t in ("routines", "job", "routine_runs", "events")}
    assert everyone == {"routines": 4, "job": 6, "routine_runs": 4, "events": 2}
    assert _count(conn, "agent_run") >= 2
    for user in (alice, bob):
        me = _whoami(user)
        owners = user.execute(
            "select distinct user_id from ceaseless.routines "
            "union select distinct user_id from ceaseless.job "
            "union select distinct user_id from ceaseless.events"
        ).fetchall()
        assert owners == [(me,)]
        assert _count(user, "routine_runs") == 2 and _count(user, "job") == 3
        runs = conn.execute(
            "select count(*) from ceaseless.agent_run r join ceaseless.job j on j.id = r.job_id "
            "where j.user_id = %s",
            (me,),
        ).fetchone()
        assert runs is not None and runs[0] >= 1
        assert _count(user, "agent_run") == runs[0]


def test_a_user_cannot_change_or_fire_another_users_rows(
    two_users: tuple[psycopg.Connection, psycopg.Connection, dict[str, Any]],
) -> None:
    alice, bob, rows = two_users
    bobs_routine = rows[f"{_whoami(bob)}:routine"]
    updated = alice.execute(
        "update ceaseless.routines set enabled = false where id = %s", (bobs_routine,)
    )
    assert updated.rowcount == 0
    assert (
        alice.execute("delete from ceaseless.routines where id = %s", (bobs_routine,)).rowcount == 0
    )
    with pytest.raises(psycopg.Error) as error:
        alice.execute("select ceaseless.run_routine(%s)", (bobs_routine,))
    assert error.value.sqlstate == "CE404"
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.execute(
            "insert into ceaseless.routines (name, user_id, trigger_type, action_type, "
            "action_config, agent) values ('planted', %s, 'manual', 'lightweight', "
            "'{\"prompt\": \"x\"}', 'noop')",
            (_whoami(bob),),
        )
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.execute(
            "insert into ceaseless.events (user_id, content) values (%s, 'deploy')", (_whoami(bob),)
        )
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.execute("update ceaseless.job set state = 'cancelled'")
    for verb in ("cancel_job", "retry_job"):
        with pytest.raises(psycopg.Error) as error:
            alice.execute(f"select ceaseless.{verb}(%s)", (rows[f"{_whoami(bob)}:job"],))
        assert error.value.sqlstate == "CE404"
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.execute("select * from ceaseless.claim_jobs('alice', 10)")


def test_a_user_cancels_and_retries_its_own_jobs(
    conn: psycopg.Connection,
    two_users: tuple[psycopg.Connection, psycopg.Connection, dict[str, Any]],
) -> None:
    alice, _, rows = two_users
    mine = rows[f"{_whoami(alice)}:job"]
    alice.execute("select ceaseless.cancel_job(%s)", (mine,))
    assert alice.execute("select state from ceaseless.job where id = %s", (mine,)).fetchone() == (
        "cancelled",
    )
    alice.execute("select ceaseless.retry_job(%s)", (mine,))
    assert alice.execute("select state from ceaseless.job where id = %s", (mine,)).fetchone() == (
        "pending",
    )
    actors = conn.execute(
        "select actor from ceaseless.audit_log where entity = 'job' and entity_id = %s "
        "and action = 'state' order by id",
        (mine,),
    ).fetchall()
    assert actors[-2:] == [(_whoami(alice),), (_whoami(alice),)]


def test_a_user_cannot_touch_agents_settings_or_the_audit_log(
    two_users: tuple[psycopg.Connection, psycopg.Connection, dict[str, Any]],
) -> None:
    alice, _, _ = two_users
    for statement in [
        "update ceaseless.agents set argv = '{sh,-c,evil}'",
        "insert into ceaseless.agents (name, adapter) values ('evil', 'noop')",
        "select env from ceaseless.agents",
        "update ceaseless.settings set value = '0' where key = 'lease_secs'",
        "select * from ceaseless.settings",
        "update ceaseless.audit_log set actor = 'someone else'",
        "delete from ceaseless.audit_log",
        "insert into ceaseless.audit_log (entity, entity_key, action) values ('x', 'y', 'z')",
        "truncate ceaseless.audit_log",
        "create table ceaseless.shadow (id int)",
        "create function ceaseless.now() returns timestamptz language sql as 'select null'",
    ]:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            alice.execute(statement)
    assert alice.execute("select name from ceaseless.agents").fetchall() == [("noop",)]


def test_the_audit_actor_is_the_login_role_whatever_the_session_says(
    conn: psycopg.Connection, login_role: Callable[..., psycopg.Connection]
) -> None:
    make_agent(conn)
    conn.commit()
    alice = login_role("alice")
    alice.execute("set ceaseless.actor = 'listener-1'")
    routine = _routine(alice, "forged")
    row = conn.execute(
        "select actor from ceaseless.audit_log where entity = 'routine' and entity_id = %s",
        (routine,),
    ).fetchone()
    assert row == (_whoami(alice),)


def test_the_audit_log_is_append_only_except_for_retention(conn: psycopg.Connection) -> None:
    make_agent(conn)
    assert _count(conn, "audit_log") == 1
    for statement in [
        "update ceaseless.audit_log set actor = 'someone else'",
        "delete from ceaseless.audit_log",
        "truncate ceaseless.audit_log",
    ]:
        with pytest.raises(psycopg.Error) as error, conn.transaction():
            conn.execute(statement)
        assert error.value.sqlstate == "CE409" and "append-only" in str(error.value)
    # Retention removes only rows past the floor (audit_log_min_retention_secs, 30 days), and
    # leaves a row saying it did.
    conn.execute(
        "insert into ceaseless.audit_log (at, entity, entity_key, action) "
        "values (now() - interval '40 days', 'x', 'old', 'z')"
    )
    row = conn.execute("select ceaseless.prune_audit_log(now() - interval '31 days')").fetchone()
    assert row == (1,)
    assert conn.execute(
        "select entity, action from ceaseless.audit_log order by id"
    ).fetchall() == [("agents", "insert"), ("audit_log", "prune")]


def test_an_operator_sees_everything_and_manages_agents_but_not_the_audit_log(
    two_users: tuple[psycopg.Connection, psycopg.Connection, dict[str, Any]],
    login_role: Callable[..., psycopg.Connection],
) -> None:
    _, bob, rows = two_users
    ops = login_role("ops", "ceaseless_operator")
    assert _count(ops, "routines") == 4 and _count(ops, "job") == 6
    ops.execute("update ceaseless.agents set max_concurrent = 3")
    ops.execute("select ceaseless.run_routine(%s)", (rows[f"{_whoami(bob)}:routine"],))
    ops.execute(
        "select ceaseless.cancel_job(job_id) from ceaseless.routine_runs where id = %s",
        (rows[f"{_whoami(bob)}:run"],),
    )
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        ops.execute("delete from ceaseless.audit_log")


def test_every_function_searches_pg_catalog_first(conn: psycopg.Connection) -> None:
    # With the schema first, a role allowed to CREATE in it could shadow a
    # built-in (now(), lower(), =) inside every function.
    rows = conn.execute(
        "select p.oid::regprocedure::text, c.setting from pg_proc p "
        "cross join lateral unnest(coalesce(p.proconfig, '{}')) c (setting) "
        "where p.pronamespace = 'ceaseless'::regnamespace and c.setting like 'search_path=%'"
    ).fetchall()
    assert rows
    assert [r for r in rows if not r[1].startswith("search_path=pg_catalog")] == []
