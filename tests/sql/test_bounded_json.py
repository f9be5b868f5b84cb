"""JSON written from outside is nested at most 64 levels deep, in every column that takes it.

A job payload nested 3,000 levels deep (18 KB) once stopped every listener that claimed
it: Python's JSON decoder recurses per level. Each JSON column a user, an operator or
their client writes refuses such a document at INSERT and UPDATE (CE422 naming the
column), whatever its shape; wide documents within the length caps are not refused for
their width; and every JSON column of the schema is either guarded or written only by
the listener (a catalog test, so a new column cannot be forgotten).
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.factories import make_agent, make_job, make_routine
from tests.sql.loops import make_loop

# The cap (_input_cap('json_depth')), written out: read from the function, a test
# would pass whatever it was.
DEPTH = 64

# Every JSON column written from outside, and how a test writes a value into it.
GUARDED = {
    ("events", "payload"),
    ("job", "payload"),
    ("routines", "trigger_config"),
    ("routines", "action_config"),
    ("routines", "state"),
    ("loops", "graph"),
    ("loops", "repeat_policy"),
    ("loops", "triggers"),
    ("topology_runs", "graph"),
    ("settings", "value"),
    ("agents", "env"),
}
# JSON columns only the listener's own functions write, with what they hold: no
# user or operator may write them (checked below), so no cap is needed there.
LISTENER_WRITTEN = {
    ("audit_log", "detail"): "rows the triggers record, built by SQL",
    ("forge_issue", "labelled_by"): "logins taken from the forge by the poller",
    ("late_results", "result"): "a refused run's result fields, built by the listener",
    ("metric_deltas", "labels"): "metric labels built by the counting triggers",
    ("metric_totals", "labels"): "metric labels built by the counting triggers",
}


def nested(depth: int, rng: random.Random, leaf: Any = 1) -> str:
    """JSON text whose deepest value sits inside `depth` arrays and objects, mixed at random.

    Text, not a Python value: Python's own encoder recurses per level too.
    """
    opening: list[str] = []
    closing: list[str] = []
    for _ in range(depth):
        if rng.random() < 0.5:
            opening.append('{"k": ')
            closing.append("}")
        else:
            opening.append("[")
            closing.append("]")
    return "".join(opening) + json.dumps(leaf) + "".join(reversed(closing))


def in_object(text: str) -> str:
    """The document as the value of a key: some columns take only objects."""
    return '{"doc": ' + text + "}"


def _depth(doc: Any) -> int:
    if isinstance(doc, dict):
        return 1 + max((_depth(v) for v in doc.values()), default=0)
    if isinstance(doc, list):
        return 1 + max((_depth(v) for v in doc), default=0)
    return 0


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn)


def _writers(conn: psycopg.Connection) -> dict[tuple[str, str], Callable[[str], None]]:
    """For each guarded column, a function that writes a JSON text into it (INSERT or UPDATE)."""
    routine = make_routine(conn, name=f"r-{uuid.uuid4()}")
    loop = make_loop(conn)

    def update(table: str, column: str, key: str, ident: Any) -> Callable[[str], None]:
        def write(doc: str) -> None:
            conn.execute(
                f"update ceaseless.{table} set {column} = %s::jsonb where {key} = %s",
                (doc, ident),
            )

        return write

    return {
        ("events", "payload"): lambda doc: conn.execute(
            "insert into ceaseless.events (user_id, content, payload) values ('u', 'x', %s)",
            (in_object(doc),),
        ),
        ("job", "payload"): lambda doc: conn.execute(
            "insert into ceaseless.job (kind, agent, prompt, payload) "
            "values ('task', 'noop', 'p', %s)",
            (in_object(doc),),
        ),
        ("routines", "trigger_config"): update("routines", "trigger_config", "id", routine),
        ("routines", "action_config"): update("routines", "action_config", "id", routine),
        ("routines", "state"): update("routines", "state", "id", routine),
        ("loops", "graph"): update("loops", "graph", "id", loop),
        ("loops", "repeat_policy"): update("loops", "repeat_policy", "id", loop),
        ("loops", "triggers"): update("loops", "triggers", "id", loop),
        ("topology_runs", "graph"): lambda doc: conn.execute(
            "insert into ceaseless.topology_runs (graph, task) values (%s, 't')", (doc,)
        ),
        ("settings", "value"): update("settings", "value", "key", "notification_sinks"),
        ("agents", "env"): update("agents", "env", "name", "noop"),
    }


def _refused_as_too_deep(write: Callable[[str], None], doc: str, table: str, column: str) -> None:
    with pytest.raises(psycopg.Error) as error:
        write(doc)
    message = error.value.diag.message_primary or ""
    assert error.value.sqlstate == "CE422", message
    assert message.startswith(f"{table}.{column}: must be nested at most {DEPTH} levels deep"), (
        message
    )
    assert (error.value.diag.table_name, error.value.diag.column_name) == (table, column)
    # The document is never echoed: it may be a megabyte.
    assert len(message) < 200


def test_every_json_column_is_guarded_or_written_only_by_the_listener(
    conn: psycopg.Connection,
) -> None:
    columns = set(
        conn.execute(
            "select c.table_name, c.column_name from information_schema.columns c "
            "join information_schema.tables t using (table_schema, table_name) "
            "where c.table_schema = 'ceaseless' and c.data_type in ('json', 'jsonb') "
            "and t.table_type = 'BASE TABLE'"
        ).fetchall()
    )
    guarded = {
        (table, column)
        for table, args in conn.execute(
            "select c.relname, t.tgargs from pg_trigger t join pg_class c on c.oid = t.tgrelid "
            "where c.relnamespace = 'ceaseless'::regnamespace "
            "and t.tgfoid = 'ceaseless._tg_bounded_json'::regproc"
        ).fetchall()
        for column in bytes(args).decode().split("\x00")
        if column
    }
    assert guarded == GUARDED
    assert columns == GUARDED | set(LISTENER_WRITTEN)
    for table, column in LISTENER_WRITTEN:
        for role in ("ceaseless_user", "ceaseless_operator"):
            for privilege in ("INSERT", "UPDATE"):
                allowed = conn.execute(
                    "select has_column_privilege(%s, %s, %s, %s)",
                    (role, f"ceaseless.{table}", column, privilege),
                ).fetchone()
                assert allowed == (False,), f"{role} may {privilege} {table}.{column}"


@pytest.mark.parametrize(("table", "column"), sorted(GUARDED))
def test_a_document_nested_past_the_cap_is_refused_naming_the_column(
    conn: psycopg.Connection, table: str, column: str
) -> None:
    write = _writers(conn)[(table, column)]
    rng = random.Random(f"{table}.{column}")
    for depth in (DEPTH + 1, 100, 3000):
        _refused_as_too_deep(write, nested(depth, rng), table, column)
    # The deep part may sit anywhere, beside shallow siblings.
    beside = '{"a": 1, "b": [2, {"c": ' + nested(DEPTH - 2, rng) + "}]}"
    _refused_as_too_deep(write, beside, table, column)


def test_a_document_at_the_cap_is_not_refused_for_its_depth(conn: psycopg.Connection) -> None:
    rng = random.Random(1)
    # The deepest value sits inside exactly DEPTH arrays and objects.
    writers = _writers(conn)
    for column in sorted(GUARDED - {("job", "payload"), ("events", "payload")}):
        try:
            writers[column](nested(DEPTH, rng))
        except psycopg.Error as error:
            # Refused, if at all, for what the column's own rules say (a shape, a type).
            assert "levels deep" not in (error.diag.message_primary or ""), column
    writers[("job", "payload")](nested(DEPTH - 1, rng))
    writers[("events", "payload")](nested(DEPTH - 2, rng, leaf=[]))


def test_wide_documents_within_the_length_caps_are_accepted(conn: psycopg.Connection) -> None:
    wide_object = {f"key{i}": i for i in range(20_000)}
    wide_array = list(range(100_000))
    for doc in (wide_object, {"items": wide_array}, {"a": wide_array[:1000], "b": wide_object}):
        make_job(conn, payload=doc)
        conn.execute(
            "insert into ceaseless.events (user_id, content, payload) values ('u', 'x', %s)",
            (json.dumps(doc),),
        )


def test_a_refused_bulk_insert_stores_nothing(conn: psycopg.Connection) -> None:
    docs = [json.dumps({"n": i}) for i in range(99)] + [in_object(nested(200, random.Random(2)))]
    with pytest.raises(psycopg.Error) as error:
        conn.execute(
            "insert into ceaseless.job (kind, agent, prompt, payload) "
            "select 'task', 'noop', 'p', d::jsonb from unnest(%s::text[]) d",
            (docs,),
        )
    assert error.value.sqlstate == "CE422"
    assert conn.execute("select count(*) from ceaseless.job").fetchone() == (0,)


def test_a_user_role_is_refused_like_anyone(
    conn: psycopg.Connection, login_role: Callable[..., psycopg.Connection]
) -> None:
    alice = login_role("alice")
    deep = in_object(nested(500, random.Random(3)))
    for sql in (
        "insert into ceaseless.job (kind, agent, prompt, payload) values ('task', 'noop', 'p', %s)",
        "insert into ceaseless.events (content, payload) values ('x', %s)",
    ):
        with pytest.raises(psycopg.Error) as error:
            alice.execute(sql, (deep,))
        assert error.value.sqlstate == "CE422"
    assert conn.execute("select count(*) from ceaseless.job").fetchone() == (0,)


# PostgreSQL's jsonb refuses \u0000, and lone surrogates are not text: neither is a
# matter of depth.
_json_text = st.text(
    st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=8
)
_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), _json_text)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    depth=st.integers(min_value=DEPTH + 1, max_value=4000),
    seed=st.integers(min_value=0, max_value=2**32),
    leaf=_json_leaf,
    column=st.sampled_from(sorted(GUARDED)),
)
def test_fuzzed_deep_documents_are_refused_in_every_column(
    conn: psycopg.Connection,
    depth: int,
    seed: int,
    leaf: Any,
    column: tuple[str, str],
) -> None:
    write = _writers(conn)[column]
    _refused_as_too_deep(write, nested(depth, random.Random(seed), leaf), *column)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    doc=st.recursive(
        _json_leaf,
        lambda children: st.one_of(
            st.lists(children, max_size=30), st.dictionaries(_json_text, children)
        ),
        max_leaves=300,
    )
)
def test_fuzzed_shallow_documents_are_never_refused_for_depth(
    conn: psycopg.Connection, doc: Any
) -> None:
    assume(_depth(doc) < DEPTH)
    try:
        make_job(conn, payload=doc if isinstance(doc, dict) else {"doc": doc})
    except psycopg.Error as error:  # pragma: no cover - a failure names what refused it
        raise AssertionError(f"refused: {error.sqlstate} {error.diag.message_primary}") from error


def test_the_documented_example_fails_as_documented(conn: psycopg.Connection) -> None:
    doc = (Path(__file__).parents[2] / "docs" / "routines.md").read_text()
    block = next(b for b in doc.split("```sql\n")[1:] if "levels deep" in b).split("```")[0]
    statement, expected = block.split("\n-- ERROR:  ")
    make_agent(conn, "echo", "command", ["cat"])
    with pytest.raises(psycopg.Error) as error:
        conn.execute(statement)
    assert error.value.diag.message_primary == expected.strip()
