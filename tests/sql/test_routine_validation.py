"""Routines are validated in full at INSERT/UPDATE; the error names field, rule and value."""

from __future__ import annotations

import psycopg
import pytest

from tests.factories import make_agent, make_routine


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn)


def _refused(conn: psycopg.Connection, **kw: object) -> str:
    with pytest.raises(psycopg.Error) as error:
        make_routine(conn, **kw)  # type: ignore[arg-type]
    return str(error.value)


def test_unknown_trigger_type_is_refused_by_its_check(conn: psycopg.Connection) -> None:
    assert "routines_trigger_type_check" in _refused(conn, trigger_type="sometimes")


def test_unknown_action_type_is_refused_by_its_check(conn: psycopg.Connection) -> None:
    assert "routines_action_type_check" in _refused(conn, action_type="big")


def test_event_routine_needs_a_compiling_pattern(conn: psycopg.Connection) -> None:
    message = _refused(conn, trigger_type="event", trigger_config={"pattern": "(open"})
    assert "trigger_config.pattern" in message and "(open" in message
    assert "regular expression" in message
    assert "trigger_config.pattern" in _refused(conn, trigger_type="event", trigger_config={})


def test_webhook_routine_needs_a_url_safe_path_and_a_secret(conn: psycopg.Connection) -> None:
    message = _refused(
        conn, trigger_type="webhook", trigger_config={"path": "a/b", "secret": "s" * 20}
    )
    assert "trigger_config.path" in message and "a/b" in message
    message = _refused(
        conn, trigger_type="webhook", trigger_config={"path": "ok", "secret": "short"}
    )
    assert "trigger_config.secret" in message and "short" not in message


def test_lightweight_needs_a_prompt_and_relative_context_paths(conn: psycopg.Connection) -> None:
    assert "action_config.prompt" in _refused(conn, action_config={"prompt": "  "})
    message = _refused(conn, action_config={"prompt": "p", "context_paths": ["../etc/passwd"]})
    assert "action_config.context_paths" in message and "../etc/passwd" in message
    assert "context_paths" in _refused(
        conn, action_config={"prompt": "p", "context_paths": ["/etc/passwd"]}
    )
    assert "max_tokens" in _refused(conn, action_config={"prompt": "p", "max_tokens": -1})


def test_full_job_needs_title_description_and_sane_iterations(conn: psycopg.Connection) -> None:
    assert "action_config.title" in _refused(
        conn, action_type="full_job", action_config={"description": "d"}
    )
    assert "action_config.description" in _refused(
        conn, action_type="full_job", action_config={"title": "t"}
    )
    assert "max_iterations" in _refused(
        conn,
        action_type="full_job",
        action_config={"title": "t", "description": "d", "max_iterations": 0},
    )


def test_guardrail_numbers_must_be_sane(conn: psycopg.Connection) -> None:
    assert "cooldown_secs_not_negative" in _refused(conn, cooldown_secs=-1)
    assert "max_concurrent_positive" in _refused(conn, max_concurrent=0)
    assert "dedup_window_secs_positive" in _refused(conn, dedup_window_secs=0)


def test_defaults_are_filled(conn: psycopg.Connection) -> None:
    routine = make_routine(conn, trigger_type="event", trigger_config={"pattern": "x"})
    row = conn.execute(
        "select trigger_config, action_config from ceaseless.routines where id = %s", (routine,)
    ).fetchone()
    assert row == ({"pattern": "x", "channel": None}, {"prompt": "check", "context_paths": []})


def test_an_update_is_validated_too(conn: psycopg.Connection) -> None:
    routine = make_routine(conn, trigger_type="event", trigger_config={"pattern": "x"})
    with pytest.raises(psycopg.Error) as error:
        conn.execute(
            'update ceaseless.routines set trigger_config = \'{"pattern": "["}\' where id = %s',
            (routine,),
        )
    assert error.value.sqlstate == "CE422"


@pytest.mark.parametrize(
    ("table", "triggers", "bookkeeping"),
    [
        (
            "routines",
            ("routines_validate", "routines_changed"),
            {"next_fire_at", "last_run_at", "run_count", "consecutive_failures", "state"},
        ),
        (
            "loops",
            ("loops_validate", "loops_changed", "loops_schedule"),
            {"next_fire_at", "last_run_id"},
        ),
    ],
)
def test_every_column_but_runtime_bookkeeping_is_validated_and_announced_on_update(
    conn: psycopg.Connection, table: str, triggers: tuple[str, ...], bookkeeping: set[str]
) -> None:
    # The row triggers skip an UPDATE that sets only bookkeeping (a fire's next_fire_at or
    # last_run_id, a finish's counters); a column left out of their UPDATE OF list would be
    # stored unjudged and unaudited.
    columns = {
        name
        for (name,) in conn.execute(
            "select attname from pg_attribute where attrelid = %s::regclass "
            "and attnum > 0 and not attisdropped",
            (f"ceaseless.{table}",),
        )
    }
    for trigger in triggers:
        (definition,) = conn.execute(
            "select pg_get_triggerdef(oid) from pg_trigger "
            "where tgrelid = %s::regclass and tgname = %s",
            (f"ceaseless.{table}", trigger),
        ).fetchone()  # type: ignore[misc]
        listed = definition.split(" UPDATE OF ", 1)[1].split(" ON ", 1)[0].split(" OR ")[0]
        assert {c.strip() for c in listed.split(",")} == columns - bookkeeping, trigger


def test_a_config_change_beside_bookkeeping_is_still_validated(conn: psycopg.Connection) -> None:
    routine = make_routine(conn)
    with pytest.raises(psycopg.Error, match="prompt"):
        conn.execute(
            "update ceaseless.routines set run_count = run_count + 1, "
            """action_config = '{"prompt": "  "}' where id = %s""",
            (routine,),
        )
