"""docs/sql-reference.md is what the schema's comments say today."""

from __future__ import annotations

from pathlib import Path

import psycopg

from listener.reference import render

DOC = Path(__file__).resolve().parents[2] / "docs" / "sql-reference.md"


def test_committed_sql_reference_matches_the_schema(conn: psycopg.Connection) -> None:
    expected = render(conn)
    assert DOC.read_text() == expected, (
        "docs/sql-reference.md is stale: regenerate it with "
        "`ceaseless docs sql-reference --output docs/sql-reference.md`"
    )
