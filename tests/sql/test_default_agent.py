"""settings.default_agent: filled into routines, jobs and graph nodes that name no agent."""

from __future__ import annotations

import json
from collections.abc import Callable

import psycopg
import pytest

from tests.factories import claim, make_agent
from tests.sql.loops import loop_row, make_loop
from tests.sql.topology import graph, start_run

# The seed's routine insert (seed 000): every column it has, and no agent.
SEED_ROUTINE = (
    "insert into ceaseless.routines (name, description, user_id, enabled, trigger_type, "
    "trigger_config, action_type, action_config, cooldown_secs, max_concurrent, "
    "dedup_window_secs, notify_channel, notify_user, notify_on_success, notify_on_failure, "
    "notify_on_attention) values ('morning check', 'looks at the inbox', 'alice', true, 'cron', "
    """'{"schedule": "0 9 * * *"}', 'lightweight', '{"prompt": "anything new?"}', 300, 1, """
    "null, null, null, false, true, true) returning id, agent"
)


def _set_default(conn: psycopg.Connection, agent: str | None) -> None:
    conn.execute(
        "update ceaseless.settings set value = %s::jsonb where key = 'default_agent'",
        (json.dumps(agent),),
    )


def _refused(conn: psycopg.Connection, statement: str, *params: object) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as raised:
        conn.execute(statement, params)
    assert raised.value.sqlstate == "CE422"
    return raised.value


def test_a_fresh_install_has_no_default_agent(conn: psycopg.Connection) -> None:
    row = conn.execute(
        "select value from ceaseless.settings where key = 'default_agent'"
    ).fetchone()
    assert row == (None,)


def test_without_a_default_a_seed_shaped_routine_is_refused_naming_the_field(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)

    error = _refused(conn, SEED_ROUTINE)

    message = str(error)
    assert message.startswith("routines.agent: must name a registered agent")
    assert "no default agent is set" in message and "key = 'default_agent'" in message
    assert error.diag.table_name == "routines" and error.diag.column_name == "agent"


def test_with_a_default_a_seed_shaped_routine_is_stored_with_that_agent(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    _set_default(conn, "noop")

    row = conn.execute(SEED_ROUTINE).fetchone()

    assert row is not None and row[1] == "noop"
    fired = conn.execute("select ceaseless.run_routine(%s)", (row[0],)).fetchone()
    assert fired is not None
    job = conn.execute(
        "select agent from ceaseless.job where routine_run_id = %s", (fired[0],)
    ).fetchone()
    assert job == ("noop",)


def test_a_job_without_an_agent_takes_the_default_and_is_claimed_in_its_lane(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    _refused(conn, "insert into ceaseless.job (kind, prompt) values ('task', 'hi')")
    _set_default(conn, "noop")

    row = conn.execute(
        "insert into ceaseless.job (kind, prompt) values ('task', 'hi') returning id, agent"
    ).fetchone()

    assert row is not None and row[1] == "noop"
    assert claim(conn) == [row[0]]


def test_the_error_for_a_job_names_job_agent(conn: psycopg.Connection) -> None:
    make_agent(conn)

    error = _refused(conn, "insert into ceaseless.job (kind, prompt) values ('task', 'hi')")

    assert str(error).startswith("job.agent: must name a registered agent")


def test_a_row_naming_its_agent_keeps_it(conn: psycopg.Connection) -> None:
    make_agent(conn)
    make_agent(conn, "other")
    _set_default(conn, "noop")

    row = conn.execute(
        "insert into ceaseless.job (kind, agent, prompt) values ('task', 'other', 'hi') "
        "returning agent"
    ).fetchone()

    assert row == ("other",)


def test_loop_nodes_without_an_agent_get_the_default_written_into_the_graph(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    make_agent(conn, "other")
    nodes = [{"id": "A", "prompt": "plan"}, {"id": "B", "agent": "other", "prompt": "do"}]
    with pytest.raises(psycopg.Error) as raised:
        make_loop(conn, g=graph(nodes, [("A", "B")]))
    assert raised.value.sqlstate == "CE422"
    assert str(raised.value).startswith("loops.graph.nodes.agent: must name a registered agent")
    _set_default(conn, "noop")

    loop = make_loop(conn, g=graph(nodes, [("A", "B")]))

    stored = loop_row(conn, loop)["graph"]["nodes"]
    assert [(n["id"], n["agent"]) for n in stored] == [("A", "noop"), ("B", "other")]


def test_a_topology_run_inserted_directly_gets_the_default_for_its_nodes(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    _set_default(conn, "noop")

    run = start_run(conn, graph([{"id": "A", "agent": None, "prompt": "go"}]))

    row = conn.execute(
        "select n.agent, j.agent from ceaseless.topology_nodes n "
        "join ceaseless.job j on j.id = n.job_id where n.topology_run_id = %s",
        (run,),
    ).fetchone()
    assert row == ("noop", "noop")


def test_changing_the_default_moves_no_existing_row(conn: psycopg.Connection) -> None:
    make_agent(conn)
    make_agent(conn, "other")
    _set_default(conn, "noop")
    row = conn.execute(SEED_ROUTINE).fetchone()
    assert row is not None

    _set_default(conn, "other")

    stored = conn.execute(
        "select agent from ceaseless.routines where id = %s", (row[0],)
    ).fetchone()
    assert stored == ("noop",)


def test_the_setting_must_name_a_registered_agent(conn: psycopg.Connection) -> None:
    make_agent(conn)

    error = _refused(
        conn,
        "update ceaseless.settings set value = '\"nope\"' where key = 'default_agent'",
    )

    assert str(error).startswith("settings.default_agent: must be the name of a registered agent")
    assert (error.diag.message_primary or "").endswith('got "nope"')
    _refused(conn, "update ceaseless.settings set value = '7' where key = 'default_agent'")
    _set_default(conn, None)


def test_a_default_whose_agent_was_renamed_is_named_in_the_error(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    _set_default(conn, "noop")
    conn.execute("update ceaseless.agents set name = 'renamed' where name = 'noop'")

    error = _refused(conn, "insert into ceaseless.job (kind, prompt) values ('task', 'hi')")

    assert "settings.default_agent names one that is not registered" in str(error)
    assert (error.diag.message_primary or "").endswith('got "noop"')


def test_a_user_role_inserts_a_routine_without_an_agent(
    conn: psycopg.Connection, login_role: Callable[..., psycopg.Connection]
) -> None:
    make_agent(conn)
    _set_default(conn, "noop")
    alice = login_role("alice")

    row = alice.execute(
        "insert into ceaseless.routines (name, trigger_type, action_type, action_config) "
        """values ('mine', 'manual', 'lightweight', '{"prompt": "check"}') returning agent"""
    ).fetchone()

    assert row == ("noop",)
