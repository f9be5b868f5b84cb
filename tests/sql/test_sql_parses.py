"""Static checks of db/ and functions/: they parse, and they follow the house rules.

- every file parses, and so does every PL/pgSQL body (a typo in a function body
  otherwise surfaces only when the function first runs);
- migrations define no functions, triggers or views: those live once, in
  functions/, and are re-applied by migrate when they change;
- functions/ files can be re-applied: CREATE OR REPLACE FUNCTION and CREATE OR
  REPLACE TRIGGER (a DROP TRIGGER would lock the table against readers too);
- dynamic SQL is built with format() and %I / %L, never by concatenation;
- every table, view and function carries a COMMENT.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pglast import ast, parse_plpgsql, parse_sql
from pglast.parser import ParseError, scan

from listener.database.migrate import function_files, migrations

MIGRATIONS = [m.path for m in migrations()]
FUNCTION_FILES = function_files()
SQL_FILES = MIGRATIONS + FUNCTION_FILES

# PL/pgSQL statements that run a string as SQL, and the key holding the string.
_DYNAMIC = {
    "PLpgSQL_stmt_dynexecute": "query",
    "PLpgSQL_stmt_dynfors": "query",
    "PLpgSQL_stmt_return_query": "dynquery",
    "PLpgSQL_stmt_open": "dynquery",
}
_CONCAT_FUNCTIONS = {"concat", "concat_ws"}


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def _statements(path: Path) -> list[tuple[ast.Node, str]]:
    """Each statement of the file with its own text."""
    text = path.read_text()
    out = []
    for raw in parse_sql(text):
        end = raw.stmt_location + raw.stmt_len if raw.stmt_len else len(text)
        out.append((raw.stmt, text[raw.stmt_location : end]))
    return out


def _option(options: tuple[ast.DefElem, ...] | None, name: str) -> Any:
    for option in options or ():
        if option.defname == name:
            return option.arg
    return None


def _language(options: tuple[ast.DefElem, ...] | None, default: str) -> str:
    arg = _option(options, "language")
    return arg.sval.lower() if arg is not None else default


def _plpgsql_trees(path: Path) -> Iterator[tuple[str, list[Any]]]:
    """(name, parse tree) of every PL/pgSQL function body and DO block in the file."""
    for stmt, text in _statements(path):
        if isinstance(stmt, ast.CreateFunctionStmt) and _language(stmt.options, "sql") == "plpgsql":
            name = ".".join(n.sval for n in stmt.funcname)
        elif isinstance(stmt, ast.DoStmt) and _language(stmt.args, "plpgsql") == "plpgsql":
            body = _option(stmt.args, "as").sval
            name, text = (
                "DO block",
                f"create function f() returns void language plpgsql as $do${body}$do$",
            )
        else:
            continue
        try:
            yield name, parse_plpgsql(text)
        except ParseError as exc:
            raise AssertionError(f"{path.name}, {name}: {exc}") from exc


def _nodes(tree: Any, key: str | None = None) -> Iterator[tuple[str | None, Any]]:
    """Every (key, value) pair in a nested JSON tree."""
    yield key, tree
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _nodes(v, k)
    elif isinstance(tree, list):
        for v in tree:
            yield from _nodes(v, key)


def _concatenates(query: str) -> bool:
    tokens = scan(query)
    for i, token in enumerate(tokens):
        word = query[token.start : token.end + 1]
        if token.name == "Op" and word == "||":
            return True
        following = tokens[i + 1] if i + 1 < len(tokens) else None
        if word.lower() in _CONCAT_FUNCTIONS and following and query[following.start] == "(":
            return True
    return False


def concatenated_dynamic_sql(tree: list[Any]) -> list[str]:
    """The dynamic SQL of a PL/pgSQL tree that is built by concatenation.

    Catches both `execute 'drop table ' || t` and a variable built that way
    (by its declaration default or an assignment) and executed later.
    """
    function = tree[0]["PLpgSQL_function"]
    names = [next(iter(d.values())).get("refname") for d in function["datums"]]
    tainted = {
        names[i]
        for i, datum in enumerate(function["datums"])
        if _concatenates(
            datum.get("PLpgSQL_var", {})
            .get("default_val", {})
            .get("PLpgSQL_expr", {})
            .get("query", "")
        )
    }
    for key, node in _nodes(function["action"]):
        if key == "PLpgSQL_stmt_assign" and _concatenates(node["expr"]["PLpgSQL_expr"]["query"]):
            tainted.add(names[node["varno"]])
    found = []
    for key, node in _nodes(function["action"]):
        if key in _DYNAMIC and _DYNAMIC[key] in node:
            query = node[_DYNAMIC[key]]["PLpgSQL_expr"]["query"]
            if _concatenates(query) or query.strip() in tainted:
                found.append(f"line {node.get('lineno')}: {query}")
    return found


@pytest.mark.parametrize("path", SQL_FILES, ids=_id)
def test_sql_file_parses(path: Path) -> None:
    assert parse_sql(path.read_text())


@pytest.mark.parametrize("path", SQL_FILES, ids=_id)
def test_plpgsql_bodies_parse(path: Path) -> None:
    for name, tree in _plpgsql_trees(path):
        assert tree and "PLpgSQL_function" in tree[0], name


@pytest.mark.parametrize("path", SQL_FILES, ids=_id)
def test_sql_language_bodies_parse(path: Path) -> None:
    for stmt, _ in _statements(path):
        if isinstance(stmt, ast.CreateFunctionStmt) and _language(stmt.options, "sql") == "sql":
            body = _option(stmt.options, "as")
            if body is not None:  # else a BEGIN ATOMIC body, parsed with the file
                assert parse_sql(body[0].sval), stmt.funcname


@pytest.mark.parametrize("path", MIGRATIONS, ids=_id)
def test_migrations_define_no_functions_triggers_or_views(path: Path) -> None:
    misplaced = [
        text.splitlines()[0]
        for stmt, text in _statements(path)
        if isinstance(stmt, ast.CreateFunctionStmt | ast.CreateTrigStmt | ast.ViewStmt)
    ]
    assert misplaced == [], f"{path.name}: move these to functions/"


@pytest.mark.parametrize("path", FUNCTION_FILES, ids=_id)
def test_function_files_create_or_replace_every_function(path: Path) -> None:
    plain = [
        text.splitlines()[0]
        for stmt, text in _statements(path)
        if isinstance(stmt, ast.CreateFunctionStmt) and not stmt.replace
    ]
    assert plain == [], f"{path.name}: use CREATE OR REPLACE, the file is re-applied"


@pytest.mark.parametrize("path", FUNCTION_FILES, ids=_id)
def test_function_files_create_or_replace_every_trigger(path: Path) -> None:
    plain = [
        f"{stmt.trigname} on {stmt.relation.relname}"
        for stmt, _ in _statements(path)
        if isinstance(stmt, ast.CreateTrigStmt) and not stmt.replace
    ]
    assert plain == [], f"{path.name}: use CREATE OR REPLACE TRIGGER, the file is re-applied"


@pytest.mark.parametrize("path", SQL_FILES, ids=_id)
def test_dynamic_sql_is_never_built_by_concatenation(path: Path) -> None:
    found = {
        name: bad for name, tree in _plpgsql_trees(path) if (bad := concatenated_dynamic_sql(tree))
    }
    assert found == {}, f"{path.name}: build dynamic SQL with format() and %I / %L"


def test_dynamic_sql_check_catches_concatenation() -> None:
    function = """
        create function f(t text) returns void language plpgsql as $$
        declare
            v_default text := 'truncate ' || t;
            v_assigned text;
            c refcursor;
            r record;
        begin
            v_assigned := concat('drop table ', t);
            execute format('drop table %I', t);
            execute 'select ''a || b''';
            execute 'drop table ' || t;
            execute v_default;
            execute v_assigned;
            for r in execute 'select ' || t loop end loop;
            open c for execute 'select ' || t;
        end
        $$
    """
    found = concatenated_dynamic_sql(parse_plpgsql(function))
    assert [line.split(":")[0] for line in found] == [
        "line 11",
        "line 12",
        "line 13",
        "line 14",
        "line 15",
    ]


def test_every_table_view_and_function_has_a_comment(conn: psycopg.Connection) -> None:
    uncommented = conn.execute(
        """
        select format('%s %s', case c.relkind when 'v' then 'view' when 'm' then 'view'
                                             else 'table' end, c.relname)
        from pg_class c
        where c.relnamespace = 'ceaseless'::regnamespace
          and c.relkind in ('r', 'p', 'v', 'm', 'f')
          and coalesce(obj_description(c.oid, 'pg_class'), '') = ''
          and not exists (select from pg_depend d where d.objid = c.oid and d.deptype = 'e')
        union all
        select format('function %s', p.oid::regprocedure)
        from pg_proc p
        where p.pronamespace = 'ceaseless'::regnamespace
          and coalesce(obj_description(p.oid, 'pg_proc'), '') = ''
          and not exists (select from pg_depend d where d.objid = p.oid and d.deptype = 'e')
        order by 1
        """
    ).fetchall()
    assert [row[0] for row in uncommented] == []
