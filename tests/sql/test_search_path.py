"""Temporary tables shadow nothing inside the functions: pg_temp is searched last everywhere.

PostgreSQL searches the session's temporary schema first for tables and types unless the
search_path names it, so a function whose path was `pg_catalog, ceaseless` read a temporary
table its caller had made in place of the real one. Alice and bob are login roles; the
database is a clone whose TEMPORARY privilege is PostgreSQL's default (PUBLIC has it), as on
a server shared with other applications.
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from listener.database.migrate import function_files, migrate
from tests.factories import make_agent
from tests.sql.topology import graph, node, start_run, states


def _search_path(setting: str) -> list[str]:
    return [part.strip() for part in setting.removeprefix("search_path=").split(",")]


def _paths(conn: psycopg.Connection) -> dict[str, str | None]:
    """Each function of the schema with its search_path setting (None: it has none)."""
    rows = conn.execute(
        "select p.oid::regprocedure::text, "
        "       (select c from unnest(p.proconfig) c where c like 'search_path=%') "
        "from pg_proc p where p.pronamespace = 'ceaseless'::regnamespace"
    ).fetchall()
    return dict(rows)


def _without_pg_temp_last(paths: dict[str, str | None]) -> list[tuple[str, str | None]]:
    return [
        (function, setting)
        for function, setting in paths.items()
        if setting is None
        or _search_path(setting)[0] != "pg_catalog"
        or _search_path(setting)[-1] != "pg_temp"
    ]


def test_every_function_searches_pg_catalog_first_and_pg_temp_last(
    conn: psycopg.Connection,
) -> None:
    paths = _paths(conn)
    assert len(paths) > 100
    assert _without_pg_temp_last(paths) == []


def test_functions_applied_again_keep_their_search_paths(
    conn: psycopg.Connection, db_url: str
) -> None:
    # The function files set no search_path; 99_access.sql sets it for the schema after
    # every CREATE OR REPLACE (which clears it), in the same transaction.
    before = _paths(conn)
    migrate(db_url, reapply_functions=True)
    after = _paths(conn)
    assert after == before
    assert _without_pg_temp_last(after) == []
    # A function that sets a shorter path of its own keeps it.
    assert after["ceaseless._webhook_schemes()"] == "search_path=pg_catalog, pg_temp"


def test_every_trigger_of_the_schema_runs_a_function_of_the_schema(
    conn: psycopg.Connection,
) -> None:
    # The generated quiet-check triggers once ran functions created in pg_catalog, which no
    # check of schema ceaseless sees.
    rows = conn.execute(
        "select t.tgrelid::regclass::text, t.tgname, p.oid::regprocedure::text "
        "from pg_trigger t join pg_proc p on p.oid = t.tgfoid "
        "join pg_class c on c.oid = t.tgrelid "
        "where c.relnamespace = 'ceaseless'::regnamespace and not t.tgisinternal "
        "  and p.pronamespace <> 'ceaseless'::regnamespace"
    ).fetchall()
    assert rows == []
    outside = conn.execute(
        "select oid::regprocedure::text from pg_proc "
        "where oid >= 16384 and pronamespace <> 'ceaseless'::regnamespace"
    ).fetchall()
    assert outside == []


def test_the_function_files_set_no_search_path_of_their_own() -> None:
    # The runner sets one for the whole set (the next test); a file that set another would
    # create its objects, and bind its views, by that path instead.
    for path in function_files():
        assert "search_path =" not in path.read_text().replace("search_path = pg_catalog", ""), (
            path.name
        )


def test_functions_are_created_by_a_path_of_their_own_whatever_the_session_searches(
    conn: psycopg.Connection, db_url: str
) -> None:
    # A migrating session whose path searches public (anyone may create there), where tables
    # are named as tables of the schema: what the files create still goes to the schema and
    # names the real tables.
    conn.execute("create table public.routines (id uuid)")
    conn.execute("create table public.job (id uuid)")
    try:
        migrate(make_conninfo(db_url, options="-c search_path=public"), reapply_functions=True)
        tables = conn.execute(
            "select distinct c.relnamespace::regnamespace::text "
            "from pg_depend d join pg_rewrite w on w.oid = d.objid "
            "join pg_class c on c.oid = d.refobjid "
            "where w.ev_class = 'ceaseless.routine_status'::regclass and c.relkind = 'r'"
        ).fetchall()
        assert tables == [("ceaseless",)]
        in_public = conn.execute(
            "select (select count(*) from pg_trigger where tgrelid = 'public.job'::regclass), "
            "       (select count(*) from pg_proc where pronamespace = 'public'::regnamespace)"
        ).fetchone()
        assert in_public == (0, 0)
    finally:
        conn.execute("drop table public.routines, public.job")


@pytest.fixture
def bobs_gate(
    conn: psycopg.Connection, login_role: Callable[..., psycopg.Connection]
) -> tuple[psycopg.Connection, psycopg.Connection, object, object]:
    """Bob's run waiting at a gate, and alice, who holds a copy of topology_runs that says
    the run is hers."""
    make_agent(conn)
    alice, bob = login_role("alice"), login_role("bob")
    run = start_run(bob, graph([node("A", gate="approval"), node("B")], [("A", "B")]))
    approval = conn.execute(
        "select id from ceaseless.approvals where topology_run_id = %s", (run,)
    ).fetchone()
    assert approval is not None
    alice.execute(
        "create temp table topology_runs (like ceaseless.topology_runs including defaults)"
    )
    alice.execute(
        "insert into topology_runs (id, workspace_id, graph, task, status, user_id) "
        "values (%s, gen_random_uuid(), '{}', 'alice''s text, run as bob''s node', "
        "'awaiting_approval', current_user)",
        (run,),
    )
    return alice, bob, run, approval[0]


def test_a_temporary_table_cannot_decide_another_users_approval(
    conn: psycopg.Connection,
    bobs_gate: tuple[psycopg.Connection, psycopg.Connection, object, object],
) -> None:
    alice, _, run, approval = bobs_gate
    with pytest.raises(psycopg.Error) as error:
        alice.execute(
            "select ceaseless.decide_approval(%s, true, 'alice', 'mine now')", (approval,)
        )
    assert error.value.sqlstate == "CE404"
    assert states(conn, run) == {"A": "awaiting_approval", "B": "waiting"}
    decided = conn.execute(
        "select decision from ceaseless.approvals where id = %s", (approval,)
    ).fetchone()
    assert decided == (None,)
    assert conn.execute("select count(*) from ceaseless.job").fetchone() == (0,)


def test_a_temporary_table_cannot_cancel_another_users_run(
    conn: psycopg.Connection,
    bobs_gate: tuple[psycopg.Connection, psycopg.Connection, object, object],
) -> None:
    alice, _, run, _ = bobs_gate
    with pytest.raises(psycopg.Error) as error:
        alice.execute("select ceaseless.cancel_topology_run(%s)", (run,))
    assert error.value.sqlstate == "CE404"
    status = conn.execute(
        "select status from ceaseless.topology_runs where id = %s", (run,)
    ).fetchone()
    assert status == ("awaiting_approval",)


def test_a_temporary_table_cannot_cancel_another_users_job(
    conn: psycopg.Connection, login_role: Callable[..., psycopg.Connection]
) -> None:
    make_agent(conn)
    alice, bob = login_role("alice"), login_role("bob")
    job = bob.execute(
        "insert into ceaseless.job (kind, agent, prompt) values ('task', 'noop', 'b') returning id"
    ).fetchone()[0]  # type: ignore[index]
    alice.execute("create temp table job (like ceaseless.job including defaults)")
    alice.execute(
        "insert into job (id, kind, agent, user_id) values (%s, 'task', 'noop', current_user)",
        (job,),
    )
    with pytest.raises(psycopg.Error) as error:
        alice.execute("select ceaseless.cancel_job(%s)", (job,))
    assert error.value.sqlstate == "CE404"
    assert conn.execute("select state from ceaseless.job where id = %s", (job,)).fetchone() == (
        "pending",
    )


def test_migrate_takes_temporary_from_user_roles_on_a_database_of_its_own(
    conn: psycopg.Connection, db_url: str, login_role: Callable[..., psycopg.Connection]
) -> None:
    alice = login_role("alice")
    listener = login_role("listener", "ceaseless_listener")
    alice.execute("create temp table before_migrate (x integer)")  # the clone's default

    migrate(db_url, reapply_functions=True)

    fresh = login_role("alice")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        fresh.execute("create temp table scratch (x integer)")
    listener.execute("create temp table scratch (x integer)")


def test_migrate_leaves_temporary_alone_on_a_shared_database(
    conn: psycopg.Connection, db_url: str, login_role: Callable[..., psycopg.Connection]
) -> None:
    conn.execute("create schema other_app")
    conn.execute("create table other_app.orders (id integer)")
    notices: list[str] = []
    conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))

    restricted = conn.execute("select ceaseless._restrict_temporary()").fetchone()
    migrate(db_url, reapply_functions=True)

    assert restricted == (False,)
    assert any("is shared (schema other_app" in n for n in notices), notices
    login_role("alice").execute("create temp table scratch (x integer)")
