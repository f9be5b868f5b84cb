"""Numeric settings are checked when written: an integer within the key's range, or CE422."""

from __future__ import annotations

import psycopg
import pytest


def _write(conn: psycopg.Connection, key: str, value: str) -> None:
    conn.execute("update ceaseless.settings set value = %s::jsonb where key = %s", (value, key))


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("lease_secs", '"soon"', '"soon"'),
        ("lease_secs", "1", "1"),
        ("lease_secs", "2.5", "2.5"),
        ("rate_limit_max_wait_secs", "-1", "-1"),
        ("rate_limit_max_wait_secs", "99999999999999999999", "99999999999999999999"),
        ("webhook_max_body_bytes", "2000000", "2000000"),
        ("retry_base_secs", "null", "null"),
        ("notification_max_attempts", "[3]", "[3]"),
    ],
)
def test_a_bad_numeric_setting_is_refused_naming_key_range_and_value(
    conn: psycopg.Connection, key: str, value: str, shown: str
) -> None:
    with pytest.raises(psycopg.Error) as error:
        _write(conn, key, value)
    assert error.value.sqlstate == "CE422"
    message = str(error.value.diag.message_primary)
    assert message.startswith(f"settings.{key}: must be an integer from ")
    assert message.endswith(f"; got {shown}")


def test_the_stored_value_is_kept_after_a_refusal(conn: psycopg.Connection) -> None:
    with pytest.raises(psycopg.Error):
        _write(conn, "lease_secs", "0")
    conn.rollback()
    assert conn.execute("select ceaseless._setting_int('lease_secs')").fetchone() == (60,)


@pytest.mark.parametrize(
    ("key", "value", "read"),
    [
        ("lease_secs", "2", 2),
        ("lease_secs", '"30"', 30),
        ("rate_limit_max_wait_secs", "0", 0),
        ("routine_max_running", "0", 0),
        ("topology_upstream_chars", "1000000", 1000000),
    ],
)
def test_values_within_range_are_stored_and_read(
    conn: psycopg.Connection, key: str, value: str, read: int
) -> None:
    _write(conn, key, value)
    assert conn.execute("select ceaseless._setting_int(%s)", (key,)).fetchone() == (read,)


def test_settings_it_does_not_know_are_stored_as_given(conn: psycopg.Connection) -> None:
    conn.execute(
        "insert into ceaseless.settings (key, value) values ('team_note', '\"call Ana first\"')"
    )
    assert conn.execute(
        "select value from ceaseless.settings where key = 'team_note'"
    ).fetchone() == ("call Ana first",)


def test_every_numeric_setting_seeded_by_the_migrations_is_in_range(
    conn: psycopg.Connection,
) -> None:
    rows = conn.execute(
        "select key from ceaseless.settings "
        "where ceaseless._setting_range(key) is not null "
        "and not ceaseless._setting_range(key) @> (value #>> '{}')::bigint"
    ).fetchall()
    assert rows == []
    ranged = conn.execute(
        "select count(*) from ceaseless.settings where ceaseless._setting_range(key) is not null"
    ).fetchone()
    assert ranged == (23,)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (
            '"{\\"default\\": {\\"type\\": \\"webhook\\", \\"url\\": \\"https://h.test/x\\"}}"',
            "must be a JSON object mapping sink names to their configuration",
        ),
        ('["log"]', "must be a JSON object mapping sink names"),
        ('{"default": "log"}', "notification sink 'default' must be a JSON object"),
        ('{"default": {"type": "webhook"}}', "notification sink 'default' (type webhook) needs"),
        ('{"ops": {"type": "email"}}', "notification sink 'ops' has type \"email\""),
    ],
    ids=["json-string", "array", "sink-not-object", "webhook-without-url", "unknown-type"],
)
def test_notification_sinks_that_cannot_deliver_are_refused_when_written(
    conn: psycopg.Connection, value: str, problem: str
) -> None:
    with pytest.raises(psycopg.Error) as error:
        _write(conn, "notification_sinks", value)
    assert error.value.sqlstate == "CE422"
    message = str(error.value.diag.message_primary)
    assert message.startswith("settings.notification_sinks: ") and problem in message
    assert "h.test" not in message


def test_good_notification_sinks_are_stored(conn: psycopg.Connection) -> None:
    sinks = (
        '{"default": {"type": "log"}, "ops": {"type": "pg", "channel": "ops"}, '
        '"hook": {"type": "webhook", "url": "https://h.test/x", "headers": {"A": "b"}}}'
    )
    _write(conn, "notification_sinks", sinks)
    row = conn.execute("select value from ceaseless.settings where key = 'notification_sinks'")
    assert row.fetchone()[0]["ops"] == {"type": "pg", "channel": "ops"}  # type: ignore[index]


@pytest.mark.parametrize("value", ["3600", "0", "-1", '"a month"'])
def test_the_audit_retention_floor_is_at_least_a_day(conn: psycopg.Connection, value: str) -> None:
    with pytest.raises(psycopg.Error) as error:
        _write(conn, "audit_log_min_retention_secs", value)
    assert error.value.sqlstate == "CE422"
    assert "settings.audit_log_min_retention_secs: must be an integer from 86400" in str(
        error.value
    )
    conn.rollback()
    _write(conn, "audit_log_min_retention_secs", "86400")


@pytest.mark.parametrize("value", ["0", "100001", '"all"'])
def test_backfill_max_is_1_to_100000(conn: psycopg.Connection, value: str) -> None:
    with pytest.raises(psycopg.Error) as error:
        _write(conn, "backfill_max", value)
    assert error.value.sqlstate == "CE422"
    assert "settings.backfill_max: must be an integer from 1" in str(error.value)
    conn.rollback()
    _write(conn, "backfill_max", "5000")
