"""tests/schema.sql is what a fresh install creates, on every supported server version."""

from __future__ import annotations

import difflib
from pathlib import Path

import psycopg

from listener.database.reference import schema_dump

DUMP = Path(__file__).resolve().parents[2] / "tests" / "schema.sql"


def test_a_fresh_install_equals_the_committed_schema_dump(conn: psycopg.Connection) -> None:
    expected = DUMP.read_text()
    actual = schema_dump(conn)
    diff = "".join(
        difflib.unified_diff(
            expected.splitlines(keepends=True),
            actual.splitlines(keepends=True),
            "tests/schema.sql (committed)",
            "a fresh install",
            n=2,
        )
    )
    assert not diff, (
        "tests/schema.sql differs from a fresh install: if the change is meant, run "
        f"bin/regen-sql-reference and commit both files it writes\n{diff[:20000]}"
    )


def test_a_schema_change_shows_in_the_dump(conn: psycopg.Connection) -> None:
    before = schema_dump(conn).splitlines()
    conn.execute(
        """
        alter table ceaseless.job add column reviewer text;
        create index job_reviewer_idx on ceaseless.job (reviewer);
        grant select (reviewer) on ceaseless.job to ceaseless_user;
        create or replace function ceaseless._actor() returns text language sql stable
            set search_path = pg_catalog, ceaseless, pg_temp as 'select ''someone''::text';
        """
    )
    changed = set(schema_dump(conn).splitlines()) - set(before)
    assert "    reviewer text," in changed
    assert "CREATE INDEX job_reviewer_idx ON ceaseless.job USING btree (reviewer);" in changed
    assert "grant select (reviewer) on table ceaseless.job to ceaseless_user;" in changed
    assert [line for line in changed if line.startswith("-- functions/00_helpers.sql, body md5")]
