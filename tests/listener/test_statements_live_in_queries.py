"""Every statement the listener runs is in listener/queries/, but the database room's own.

listener/database/ (migrate, reference, embedded, connections) talks to the server about
its schema and its bookkeeping and keeps those statements; every other module calls a
function of listener/queries/ and never runs SQL itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import listener

_PACKAGE = Path(listener.__file__).parent
_ALLOWED = ("queries", "database")

# psycopg's methods that run a statement (on a connection or a cursor).
_RUN = {"execute", "executemany"}
# Methods that run a statement only when given one; elsewhere the names are common
# (dict.copy(), a stream of bytes).
_RUN_WHEN_GIVEN_SQL = {"copy", "stream"}


def _is_text(node: ast.expr) -> bool:
    return isinstance(node, ast.JoinedStr) or (
        isinstance(node, ast.Constant) and isinstance(node.value, str | bytes)
    )


def statements_run(source: str) -> list[str]:
    """Where the module's source runs SQL, or composes it with psycopg.sql: `line: what`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method = node.func.attr
            if method in _RUN or (
                method in _RUN_WHEN_GIVEN_SQL and any(_is_text(arg) for arg in node.args)
            ):
                found.append((node.lineno, f".{method}(…)"))
        elif isinstance(node, ast.ImportFrom) and node.module == "psycopg":
            if any(alias.name == "sql" for alias in node.names):
                found.append((node.lineno, "from psycopg import sql"))
        elif isinstance(node, ast.Import) and any(a.name == "psycopg.sql" for a in node.names):
            found.append((node.lineno, "import psycopg.sql"))
    return [f"{line}: {what}" for line, what in sorted(found)]


def _modules_outside() -> list[Path]:
    return [
        path
        for path in sorted(_PACKAGE.rglob("*.py"))
        if path.relative_to(_PACKAGE).parts[0] not in _ALLOWED
    ]


def test_no_module_outside_queries_and_database_runs_a_statement() -> None:
    modules = _modules_outside()
    assert len(modules) > 40, "the walk found the listener's modules"
    offenders = [
        f"{path.relative_to(_PACKAGE.parent)}:{where}"
        for path in modules
        for where in statements_run(path.read_text())
    ]
    assert offenders == [], "move these statements into a module of listener/queries/"


def test_the_check_sees_a_statement_run_in_any_form() -> None:
    source = (
        "from psycopg import sql\n"
        "async def f(conn, cur, name):\n"
        "    await conn.execute('select 1')\n"
        "    cur.executemany(query, rows)\n"
        "    await conn.execute(f'listen {name}')\n"
        "    with cur.copy('copy t from stdin'):\n"
        "        pass\n"
    )
    assert [line.split(":")[0] for line in statements_run(source)] == ["1", "3", "4", "5", "6"]
    assert statements_run("def f(d, s):\n    return d.copy(), s.stream()\n") == []
