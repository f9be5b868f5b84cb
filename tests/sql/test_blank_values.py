"""Blank is blank: a value made only of Unicode whitespace is refused like an empty one.

A "not empty" check built on btrim() trims only U+0020, so prompts, titles,
descriptions and secrets of tabs, newlines, U+00A0 or U+3000 were stored and
reached an agent as an empty task.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factories import make_agent

# Every character Python calls whitespace, plus the zero-width ones that look
# like nothing: what a user would call blank.
WHITESPACE = "".join(chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace())
INVISIBLE = "\u200b\u2060\ufeff"
BLANKS = st.text(alphabet=WHITESPACE + INVISIBLE, min_size=1, max_size=12)

# (field, trigger type, trigger_config, action type, action_config) with the
# field under test left as a placeholder.
SECRET = "s" * 20
CASES: list[tuple[str, str, dict[str, str], str, dict[str, str]]] = [
    ("action_config.prompt", "manual", {}, "lightweight", {"prompt": "?"}),
    ("action_config.title", "manual", {}, "full_job", {"title": "?", "description": "d"}),
    ("action_config.description", "manual", {}, "full_job", {"title": "t", "description": "?"}),
    (
        "trigger_config.secret",
        "webhook",
        {"path": "p", "secret": "?"},
        "lightweight",
        {"prompt": "p"},
    ),
    ("trigger_config.pattern", "event", {"pattern": "?"}, "lightweight", {"prompt": "p"}),
    ("trigger_config.schedule", "cron", {"schedule": "?"}, "lightweight", {"prompt": "p"}),
]


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn)


def _fill(config: dict[str, str], blank: str) -> str:
    return json.dumps(
        {k: (blank * 20 if k == "secret" else blank) if v == "?" else v for k, v in config.items()}
    )


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_a_blank_field_is_refused_naming_the_field(
    conn: psycopg.Connection, case: tuple[str, str, dict[str, str], str, dict[str, str]]
) -> None:
    field, trigger_type, trigger_config, action_type, action_config = case

    # One connection for every example: each insert fails, so nothing stays.
    @settings(max_examples=60, deadline=None, derandomize=True)
    @given(blank=BLANKS)
    def refused(blank: str) -> None:
        with pytest.raises(psycopg.Error) as error:
            conn.execute(
                "insert into ceaseless.routines (name, user_id, trigger_type, trigger_config, "
                "action_type, action_config, agent) values ('r', 'alice', %s, %s, %s, %s, 'noop')",
                (
                    trigger_type,
                    _fill(trigger_config, blank),
                    action_type,
                    _fill(action_config, blank),
                ),
            )
        assert error.value.sqlstate == "CE422"
        assert f"routines.{field}:" in str(error.value)

    refused()


@pytest.mark.parametrize("column", ["name", "user_id"])
def test_a_blank_name_or_user_is_refused(conn: psycopg.Connection, column: str) -> None:
    values = {"name": "r", "user_id": "alice", column: "\u3000\t"}
    with pytest.raises(psycopg.Error) as error:
        conn.execute(
            "insert into ceaseless.routines (name, user_id, trigger_type, action_type, "
            "action_config, agent) values (%s, %s, 'manual', 'lightweight', "
            "'{\"prompt\": \"p\"}', 'noop')",
            (values["name"], values["user_id"]),
        )
    assert error.value.sqlstate == "CE422"
    assert f"routines.{column}: must not be blank" in str(error.value)


def test_text_with_something_in_it_is_not_blank(conn: psycopg.Connection) -> None:
    row = conn.execute(
        "select ceaseless._is_blank(' \u00a0x\u3000'), ceaseless._is_blank(''), "
        "ceaseless._is_blank(null), ceaseless._trim_blank(e'\\u3000 ok\\n\\t')"
    ).fetchone()
    assert row == (False, True, True, "ok")


def test_a_blank_job_prompt_is_refused_naming_the_field(conn: psycopg.Connection) -> None:
    @settings(max_examples=60, deadline=None, derandomize=True)
    @given(blank=BLANKS)
    def refused(blank: str) -> None:
        with pytest.raises(psycopg.Error) as error:
            conn.execute(
                "insert into ceaseless.job (kind, agent, prompt) values ('task', 'noop', %s)",
                (blank,),
            )
        assert error.value.sqlstate == "CE422"
        assert error.value.diag.message_primary == (
            "job.prompt: a job needs a prompt that is not blank; "
            f"got {json.dumps(blank, ensure_ascii=False)}"
        )
        assert (error.value.diag.table_name, error.value.diag.column_name) == ("job", "prompt")

    refused()


def test_a_job_without_a_prompt_is_refused(conn: psycopg.Connection) -> None:
    # The column's default is the empty prompt: leaving it out asks for nothing.
    with pytest.raises(psycopg.Error) as error:
        conn.execute("insert into ceaseless.job (kind, agent) values ('task', 'noop')")
    assert error.value.sqlstate == "CE422"
    assert error.value.diag.message_primary == (
        'job.prompt: a job needs a prompt that is not blank; got ""'
    )


def test_a_user_role_is_refused_a_blank_job_prompt_and_given_its_own(
    conn: psycopg.Connection, login_role: Callable[..., psycopg.Connection]
) -> None:
    alice = login_role("alice")
    with pytest.raises(psycopg.Error) as error:
        alice.execute(
            "insert into ceaseless.job (kind, agent, prompt) values ('task', 'noop', %s)",
            ("\u3000\n\t",),
        )
    assert error.value.sqlstate == "CE422"
    assert error.value.diag.message_primary == (
        'job.prompt: a job needs a prompt that is not blank; got "\u3000\\n\\t"'
    )

    alice.execute(
        "insert into ceaseless.job (kind, agent, prompt) values ('task', 'noop', ' do it ')"
    )
    assert alice.execute("select prompt from ceaseless.job").fetchall() == [(" do it ",)]


def test_a_blank_prompt_is_judged_when_the_prompt_is_written(conn: psycopg.Connection) -> None:
    # A row whose prompt is blank (stored with the triggers off, as a restore
    # may) can still have its payload changed; its prompt cannot be blanked
    # again or made blank.
    conn.execute("set session_replication_role = replica")
    (job,) = conn.execute(
        "insert into ceaseless.job (kind, agent, prompt) values ('task', 'noop', '') returning id"
    ).fetchone()  # type: ignore[misc]
    conn.execute("set session_replication_role = origin")

    conn.execute("update ceaseless.job set payload = '{\"k\": 1}' where id = %s", (job,))
    with pytest.raises(psycopg.Error) as error:
        conn.execute("update ceaseless.job set prompt = ' ' where id = %s", (job,))
    assert error.value.sqlstate == "CE422"
    conn.execute("update ceaseless.job set prompt = 'now say it' where id = %s", (job,))
    with pytest.raises(psycopg.Error):
        conn.execute("update ceaseless.job set prompt = '\u200b' where id = %s", (job,))
