"""The audit log keeps its past and names who acted: a retention floor, audited prunes, and an
actor that is always the session's login role (a listener's worker id is kept beside it).

The operator's prune_audit_log(now()) once deleted every row and left no trace; a listener
role could insert rows naming alice as the actor. Operators, listeners and users are real
login roles.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests.factories import make_agent, make_job
from tests.sql.topology import graph, node, start_run

Connect = Callable[..., psycopg.Connection]


def _one(c: psycopg.Connection, query: str, params: Any = None) -> Any:
    row = c.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def _who(c: psycopg.Connection) -> str:
    return str(_one(c, "select current_user"))


def _old_rows(conn: psycopg.Connection, count: int, days: int = 40) -> None:
    conn.execute(
        "insert into ceaseless.audit_log (at, entity, entity_key, action) "
        "select now() - make_interval(days => %s), 'test', 'old ' || g, 'noted' "
        "from generate_series(1, %s) g",
        (days, count),
    )


def test_pruning_never_reaches_inside_the_retention_floor(conn: psycopg.Connection) -> None:
    make_agent(conn)
    _old_rows(conn, 2, days=20)
    before = _one(conn, "select count(*) from ceaseless.audit_log")
    for cutoff in ("now()", "now() + interval '1 day'", "now() - interval '29 days'", "null"):
        with pytest.raises(psycopg.Error) as error:
            conn.execute(f"select ceaseless.prune_audit_log({cutoff})")
        assert error.value.sqlstate == "CE422"
        assert "audit_log_min_retention_secs" in str(error.value)
    assert _one(conn, "select count(*) from ceaseless.audit_log") == before


def test_each_prune_leaves_a_row_with_its_cutoff_count_and_actor(
    conn: psycopg.Connection, login_role: Connect
) -> None:
    _old_rows(conn, 3)
    listener = login_role("listener", "ceaseless_listener")
    listener.execute("select set_config('ceaseless.actor', 'listener-7', false)")

    assert _one(listener, "select ceaseless.prune_audit_log(now() - interval '31 days', 2)") == 2
    assert _one(listener, "select ceaseless.prune_audit_log(now() - interval '31 days')") == 1
    assert _one(listener, "select ceaseless.prune_audit_log(now() - interval '31 days')") == 0

    rows = conn.execute(
        "select actor, worker, detail ->> 'deleted', detail ? 'before' from ceaseless.audit_log "
        "where entity = 'audit_log' and action = 'prune' order by id"
    ).fetchall()
    assert rows == [
        (_who(listener), "listener-7", "2", True),
        (_who(listener), "listener-7", "1", True),
    ]


def test_only_the_owner_and_listeners_may_prune(
    conn: psycopg.Connection, login_role: Connect
) -> None:
    _old_rows(conn, 1)
    for role, group in (("ops", "ceaseless_operator"), ("alice", "ceaseless_user")):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            login_role(role, group).execute(
                "select ceaseless.prune_audit_log(now() - interval '31 days')"
            )
    assert _one(conn, "select count(*) from ceaseless.audit_log where entity = 'test'") == 1
    assert _one(conn, "select ceaseless.prune_audit_log(now() - interval '31 days')") == 1


def test_a_longer_floor_keeps_more(conn: psycopg.Connection) -> None:
    _old_rows(conn, 1, days=40)
    conn.execute(
        "update ceaseless.settings set value = %s where key = 'audit_log_min_retention_secs'",
        (str(60 * 86400),),
    )
    with pytest.raises(psycopg.Error) as error:
        conn.execute("select ceaseless.prune_audit_log(now() - interval '31 days')")
    assert error.value.sqlstate == "CE422"
    assert _one(conn, "select ceaseless.prune_audit_log(now() - interval '61 days')") == 0


def test_a_listener_cannot_write_an_audit_row_in_another_roles_name(
    conn: psycopg.Connection, login_role: Connect
) -> None:
    listener = login_role("listener", "ceaseless_listener")
    alice = _who(login_role("alice"))
    with pytest.raises(psycopg.Error) as error:
        listener.execute(
            "insert into ceaseless.audit_log (actor, entity, entity_key, action) "
            "values (%s, 'job', 'x', 'cancelled it')",
            (alice,),
        )
    assert error.value.sqlstate == "CE422"
    assert error.value.diag.column_name == "actor"
    listener.execute("select set_config('ceaseless.actor', %s, false)", (alice,))
    listener.execute(
        "insert into ceaseless.audit_log (entity, entity_key, action) values ('job', 'x', 'note')"
    )
    row = conn.execute(
        "select actor, worker from ceaseless.audit_log where action = 'note'"
    ).fetchone()
    # Whatever id the listener claims, the actor is its own role; the claim sits beside it.
    assert row == (_who(listener), alice)


def test_a_listeners_worker_id_is_recorded_beside_its_role_not_instead_of_it(
    conn: psycopg.Connection, login_role: Connect
) -> None:
    make_agent(conn)
    job = make_job(conn)
    listener = login_role("listener", "ceaseless_listener")
    alice = login_role("alice")
    listener.execute("select * from ceaseless.claim_jobs(%s, 1)", (_who(alice),))
    rows = conn.execute(
        "select actor, worker from ceaseless.audit_log "
        "where entity = 'job' and entity_id = %s and action = 'state'",
        (job,),
    ).fetchall()
    assert rows == [(_who(listener), _who(alice))]
    # A user's session claims no worker id, whatever it sets.
    alice.execute("set ceaseless.actor = 'listener-1'")
    mine = alice.execute(
        "insert into ceaseless.job (kind, agent, prompt) values ('task', 'noop', 'p') returning id"
    ).fetchone()
    assert mine is not None
    assert conn.execute(
        "select actor, worker from ceaseless.audit_log where entity_id = %s", (mine[0],)
    ).fetchall() == [(_who(alice), None)]


def test_an_approval_records_the_role_that_decided_it_beside_the_name_given(
    conn: psycopg.Connection, login_role: Connect
) -> None:
    make_agent(conn)
    alice = login_role("alice")
    run = start_run(alice, graph([node("A", gate="approval")]))
    approval = _one(conn, "select id from ceaseless.approvals where topology_run_id = %s", (run,))
    alice.execute("select ceaseless.decide_approval(%s, true, 'the CEO', 'go')", (approval,))
    row = conn.execute(
        "select decided_by, decided_by_role from ceaseless.approvals where id = %s", (approval,)
    ).fetchone()
    assert row == ("the CEO", _who(alice))
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.execute(
            "update ceaseless.approvals set decided_by_role = 'the CEO' where id = %s",
            (approval,),
        )


def test_expired_approvals_record_the_sweeping_role(conn: psycopg.Connection) -> None:
    make_agent(conn)
    run = start_run(conn, graph([node("A", gate="approval", approval_timeout_secs=1)]))
    conn.execute("select ceaseless.expire_approvals(now() + interval '1 minute')")
    row = conn.execute(
        "select decision, decided_by, decided_by_role from ceaseless.approvals "
        "where topology_run_id = %s",
        (run,),
    ).fetchone()
    assert row == ("expired", "ceaseless", _who(conn))
