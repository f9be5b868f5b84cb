"""agents.env_passthrough: plain variable names only, and never the database's."""

from __future__ import annotations

import psycopg
import pytest

from tests.factories import make_agent


@pytest.mark.parametrize(
    "names",
    [["DATABASE_URL"], ["PGHOST"], ["HTTPS_PROXY", "pgpassword"], ["CEASELESS_HOME"]],
)
def test_the_databases_variables_cannot_be_passed_through(
    conn: psycopg.Connection, names: list[str]
) -> None:
    with pytest.raises(psycopg.errors.CheckViolation) as caught:
        make_agent(conn, "lane", "command", ["x"], env_passthrough=names)
    assert caught.value.diag.constraint_name == "env_passthrough_not_database"


@pytest.mark.parametrize("names", [[""], [None], ["A B"], ["1X"], ["X*"], ["A"] * 101])
def test_passthrough_entries_are_plain_names(
    conn: psycopg.Connection, names: list[str | None]
) -> None:
    with pytest.raises(psycopg.errors.CheckViolation) as caught:
        make_agent(conn, "lane", "command", ["x"], env_passthrough=names)
    assert caught.value.diag.constraint_name == "env_passthrough_names"


def test_plain_names_are_accepted_and_default_to_none(conn: psycopg.Connection) -> None:
    make_agent(conn, "lane", "command", ["x"], env_passthrough=["HTTPS_PROXY", "no_proxy", "_X1"])
    make_agent(conn, "other", "command", ["x"])
    rows = conn.execute(
        "select name, env_passthrough from ceaseless.agents where name in ('lane', 'other') "
        "order by name"
    ).fetchall()
    assert rows == [("lane", ["HTTPS_PROXY", "no_proxy", "_X1"]), ("other", [])]
