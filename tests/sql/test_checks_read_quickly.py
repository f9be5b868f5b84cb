"""db/0098 and db/0100 wrote the schema's CHECK constraints again, shorter: each allows and
refuses exactly the rows it did.

The rules before are read from a database migrated up to the migration before 0098, the rules
after from a fully migrated one; every constraint whose text changed is evaluated, before and
after, over every combination of telling values of the columns it reads (NULL, the values its
lists name, each side of every bound), as PostgreSQL judges a CHECK: a NULL result passes.
"""

from __future__ import annotations

import json
import re
import shutil
from decimal import Decimal
from pathlib import Path

import psycopg
from psycopg import sql

from listener.database.migrate import migrate, sql_root

# The migrations that wrote the checks shorter; the first is where "before" ends.
SHORTER = ("0098", "0100")

_BOUNDS = (-1001, -1000, -1, 0, 1, 2, 3, 4, 6, 1000, 1001)
_LENGTHS = (1, 200, 201, 1000, 1001, 16000, 16001, 65536, 65537)


def _definitions(url: str) -> dict[tuple[str, str], str]:
    """(table, constraint) → the CHECK's expression, for the tables of schema ceaseless."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "select c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid) "
            "from pg_constraint c "
            "where c.connamespace = 'ceaseless'::regnamespace and c.contype = 'c'"
        ).fetchall()
    return {
        (table, name): definition.removeprefix("CHECK ").removesuffix(" NOT VALID")
        for table, name, definition in rows
    }


def _columns(conn: psycopg.Connection, table: str, constraint: str) -> list[tuple[str, str]]:
    return [
        (name, kind)
        for name, kind in conn.execute(
            "select a.attname, format_type(a.atttypid, null) "
            "from pg_constraint c cross join unnest(c.conkey) k(attnum) "
            "join pg_attribute a on a.attrelid = c.conrelid and a.attnum = k.attnum "
            "where c.conrelid = %s::regclass and c.conname = %s order by a.attnum",
            (table, constraint),
        ).fetchall()
    ]


def _telling(kind: str, words: list[str], keys: list[str], few: bool) -> tuple[list[object], str]:
    """Values of a column of type `kind` on each side of what the rules test, and the SQL
    array type to pass them as; `few`: only NULL and one value (a rule over many columns
    tests which of them are set). A JSON column gets objects whose `keys` hold each word."""
    if kind == "jsonb":
        objects = [json.dumps({key: word}) for key in keys for word in [*words, "other"]]
        return [None, "{}", *objects], "jsonb[]"
    if kind == "text":
        values: list[object] = [None, "", "x", "/x", *words, *("y" * n for n in _LENGTHS)]
        return ([None, words[0] if words else "x"] if few else values), "text[]"
    if kind in ("integer", "bigint"):
        return ([None, 1] if few else [None, *_BOUNDS]), f"{kind}[]"
    if kind == "numeric":
        return ([None, 1] if few else [None, *map(Decimal, ("-1", "0", "0.01", "1"))]), "numeric[]"
    if kind == "timestamp with time zone":
        return [None, "2026-12-07 10:00+00"], "timestamptz[]"
    if kind == "uuid":
        return [None, "00000000-0000-0000-0000-000000000001"], "uuid[]"
    raise AssertionError(f"no telling values for a column of type {kind}")


def test_every_shortened_check_allows_and_refuses_what_it_did(
    conn: psycopg.Connection, db_url: str, empty_db_url: str, tmp_path: Path
) -> None:
    for area in ("db", "functions"):
        shutil.copytree(sql_root() / area, tmp_path / area)
    for later in (tmp_path / "db").glob("*.sql"):
        if later.name[:4] >= SHORTER[0]:
            later.unlink()
    migrate(empty_db_url, root=tmp_path)
    before, after = _definitions(empty_db_url), _definitions(db_url)
    changed = sorted(key for key in after if before.get(key, after[key]) != after[key])
    # Every constraint the migration writes again is compared here.
    written = [
        name
        for version in SHORTER
        for migration in (sql_root() / "db").glob(f"{version}_*.sql")
        for name in re.findall(r"add constraint (\w+)", migration.read_text())
    ]
    assert sorted(name for _, name in changed) == sorted(written)

    for table, constraint in changed:
        columns = _columns(conn, table, constraint)
        words = sorted(
            set(re.findall(r"'(\w+)'", before[(table, constraint)]))
            | {
                word
                for literal in re.findall(r"'\{([\w,]+)\}'", after[(table, constraint)])
                for word in literal.split(",")
            }
        )
        keys = re.findall(r"->> '(\w+)'", before[(table, constraint)])
        grids = [_telling(kind, words, keys, few=len(columns) > 2) for _, kind in columns]
        sources = sql.SQL(" cross join ").join(
            sql.SQL("unnest({}::{}) as {}({})").format(
                sql.Placeholder(),
                sql.SQL(array_type),
                sql.Identifier(f"c{i}"),
                sql.Identifier(name),
            )
            for i, ((name, _), (_, array_type)) in enumerate(zip(columns, grids, strict=True))
        )
        query = sql.SQL(
            "select count(*) filter (where coalesce({old}, true) is distinct from "
            "                                coalesce({new}, true)), "
            "       count(*) filter (where not coalesce({new}, true)), count(*) "
            "from {sources}"
        ).format(
            # A literal % (`like '/%'`) is not a placeholder.
            old=sql.SQL(before[(table, constraint)].replace("%", "%%")),
            new=sql.SQL(after[(table, constraint)].replace("%", "%%")),
            sources=sources,
        )
        differ, refused, tried = conn.execute(query, [values for values, _ in grids]).fetchone()
        assert (table, constraint, differ) == (table, constraint, 0)
        # The grid reaches both sides of the rule.
        assert 0 < refused < tried, (table, constraint, refused, tried)
