"""docs/cron.md's examples, run as written: every psql statement and every CLI command.

A ```sql block is a list of statements, each ending with `;` at the end of a line; the
comment lines after one say what it returns: `-- ERROR:  message` (it fails with that
message), `-- a | b` (its one row; `null` for NULL), or nothing (it succeeds). A
```console block is a list of `$ ceaseless …` commands, each followed by what it prints
(stdout when it succeeds, after any warning on stderr; stderr when it fails). All run in
order on one database, as a reader would run them.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

import psycopg

from tests.e2e.support import ROOT, run_cli
from tests.factories import make_agent

DOC = ROOT / "docs" / "cron.md"


@dataclass(frozen=True)
class Statement:
    sql: str
    expected: list[str]  # the comment lines after it, without "-- "
    example: str | None  # the `-- Example: name` its block starts with


def statements() -> list[Statement]:
    found = []
    for block in re.findall(r"```sql\n(.*?)```", DOC.read_text(), flags=re.S):
        lines = block.splitlines()
        example = None
        if lines and lines[0].startswith("-- Example: "):
            example = lines.pop(0).removeprefix("-- Example: ")
        sql: list[str] = []
        for line in lines:
            if line.startswith("-- ") and not sql:
                found[-1].expected.append(line.removeprefix("-- "))
                continue
            sql.append(line)
            if line.endswith(";"):
                found.append(Statement("\n".join(sql), [], example))
                sql = []
        assert sql == [], f"a statement without its semicolon: {sql}"
    return found


def commands() -> list[tuple[str, list[str]]]:
    found: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```console\n(.*?)```", DOC.read_text(), flags=re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                found.append((line.removeprefix("$ "), []))
            else:
                found[-1][1].append(line)
    return found


def _shown(value: object) -> str:
    return "null" if value is None else str(value)


def _store_around_the_check(conn: psycopg.Connection, name: str, schedule: str) -> None:
    """A cron routine whose schedule was stored before the rule that refuses it now."""
    conn.execute(
        "insert into ceaseless.routines (name, user_id, agent, trigger_type, trigger_config, "
        "action_type, action_config) values (%s, 'alice', 'claude', 'cron', "
        """'{"schedule": "0 9 * * *"}', 'lightweight', '{"prompt": "p"}')""",
        (name,),
    )
    conn.execute("alter table ceaseless.routines disable trigger routines_validate")
    conn.execute(
        "update ceaseless.routines set trigger_config = jsonb_set(trigger_config, '{schedule}', "
        "to_jsonb(%s::text)) where name = %s",
        (schedule, name),
    )
    conn.execute("alter table ceaseless.routines enable trigger routines_validate")


SETUP = {
    "schedules stored before a rule refused them": lambda conn: _store_around_the_check(
        conn, "late-night", "0 22-2 * * *"
    ),
}


def test_every_psql_example_returns_what_the_doc_shows(conn: psycopg.Connection) -> None:
    make_agent(conn, "claude")  # the name the examples use; a noop adapter
    examples = statements()
    assert len(examples) >= 15
    done: set[str] = set()
    wrong = []
    for statement in examples:
        if statement.example is not None and statement.example not in done:
            SETUP[statement.example](conn)
            done.add(statement.example)
        errors = [e.removeprefix("ERROR:  ") for e in statement.expected if e.startswith("ERROR")]
        try:
            cursor = conn.execute(statement.sql.encode())
        except psycopg.Error as error:
            if errors != [error.diag.message_primary]:
                wrong.append((statement.sql, statement.expected, error.diag.message_primary))
            continue
        rows = cursor.fetchall() if cursor.description else []
        shown = [" | ".join(_shown(v) for v in row) for row in rows]
        if errors or (statement.expected and shown != statement.expected):
            wrong.append((statement.sql, statement.expected, shown))
    assert wrong == []


def test_every_cli_example_prints_what_the_doc_shows(db_url: str) -> None:
    examples = commands()
    assert len(examples) >= 5
    wrong = []
    for command, expected in examples:
        program, *args = shlex.split(command)
        assert program == "ceaseless"
        result = run_cli(db_url, *args)
        # A warning goes to stderr before the slots, and the page shows it above them.
        printed = result.stderr + result.stdout if result.returncode == 0 else result.stderr
        if printed.splitlines() != expected:
            wrong.append((command, expected, printed.splitlines()))
    assert wrong == []
