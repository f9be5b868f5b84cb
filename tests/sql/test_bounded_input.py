"""Untrusted text is bounded: no back-references in event patterns, a cap on every text
that someone other than its sender pays for, and context paths inside the workspace.

Every cap is checked at the cap (accepted) and one past it (refused with CE422, the
field named, the length given, and the value not echoed in full).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from listener import cron
from listener.database import connections
from tests.factories import make_agent, make_job, make_routine

# The caps of _input_cap (functions/00_helpers.sql), written out: a test that read
# them from the function would pass whatever they were.
PATTERN = 2000
SCHEDULE = 1000
SCHEDULE_ITEMS = 60
PROMPT = 100_000
EVENT_CONTENT = 1_000_000
EVENT_PAYLOAD = 1_000_000
JOB_PROMPT = 2_000_000
JOB_PAYLOAD = 1_000_000
# How much of a refused value an error may show: its first 40 characters, plus the
# rest of the message.
SHOWN = 400


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn)


def _refused(conn: psycopg.Connection, sql: str, params: Any = ()) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as error:
        conn.execute(sql, params)
    return error.value


def _routine_refused(conn: psycopg.Connection, **kw: Any) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as error:
        make_routine(conn, **kw)
    return error.value


def _too_long(error: psycopg.Error, field: str, cap: int) -> None:
    """The error is CE422 naming the field, the cap and the length, and shows little."""
    message = error.diag.message_primary or ""
    assert error.sqlstate == "CE422", message
    assert message.startswith(f"{field}: must be at most {cap} characters, this one has ")
    assert len(message) < SHOWN


def test_caps_are_the_documented_ones(conn: psycopg.Connection) -> None:
    names = [
        "pattern",
        "schedule",
        "schedule_items",
        "prompt",
        "event_content",
        "event_payload",
        "job_prompt",
    ]
    rows = conn.execute(
        "select n, ceaseless._input_cap(n) from unnest(%s::text[]) n", ([*names, "job_payload"],)
    ).fetchall()
    assert dict(rows) == {
        "pattern": PATTERN,
        "schedule": SCHEDULE,
        "schedule_items": SCHEDULE_ITEMS,
        "prompt": PROMPT,
        "event_content": EVENT_CONTENT,
        "event_payload": EVENT_PAYLOAD,
        "job_prompt": JOB_PROMPT,
        "job_payload": JOB_PAYLOAD,
    }


# --- event patterns ------------------------------------------------------------


def test_the_reported_backreference_pattern_is_refused(conn: psycopg.Connection) -> None:
    # It held one INSERT INTO events of 1,000 'a's past 4 s.
    pattern = r"(a*)(a*)(a*)\3\2\1b?$"
    error = _routine_refused(conn, trigger_type="event", trigger_config={"pattern": pattern})
    assert error.sqlstate == "CE422"
    assert (error.diag.message_primary or "").startswith(
        r"routines.trigger_config.pattern: must not contain back-references (\3)"
    )


@pytest.mark.parametrize(
    "pattern",
    [r"(a)\1", r"(x)(y)(z)(a)(b)(c)(d)(e)(f)(g)\10", r"(?i)(a)\1", r"(?b)\(a\)\1", r"\\\1"],
)
def test_every_backreference_form_is_refused(conn: psycopg.Connection, pattern: str) -> None:
    error = _routine_refused(conn, trigger_type="event", trigger_config={"pattern": pattern})
    assert "back-references" in (error.diag.message_primary or "")


@pytest.mark.parametrize("pattern", [r"\\1", r"a\\\\1", r"***=\1", r"[0-9]{1}\d", r"\x31\0"])
def test_what_only_looks_like_a_backreference_is_accepted(
    conn: psycopg.Connection, pattern: str
) -> None:
    make_routine(conn, trigger_type="event", trigger_config={"pattern": pattern})


def test_an_update_to_a_backreference_is_refused(conn: psycopg.Connection) -> None:
    routine = make_routine(conn, trigger_type="event", trigger_config={"pattern": "(a)"})
    error = _refused(
        conn,
        "update ceaseless.routines set trigger_config = %s where id = %s",
        (json.dumps({"pattern": r"(a)\1"}), routine),
    )
    assert "back-references" in (error.diag.message_primary or "")


def test_pattern_at_its_cap_is_accepted(conn: psycopg.Connection) -> None:
    make_routine(conn, trigger_type="event", trigger_config={"pattern": "a" * PATTERN})


def test_pattern_past_its_cap_is_refused(conn: psycopg.Connection) -> None:
    error = _routine_refused(
        conn, trigger_type="event", trigger_config={"pattern": "a" * (PATTERN + 1)}
    )
    _too_long(error, "routines.trigger_config.pattern", PATTERN)
    assert error.diag.column_name == "trigger_config"


def test_the_reported_forty_thousand_character_pattern_is_refused_at_once(
    conn: psycopg.Connection,
) -> None:
    # Literal extraction took 6.8 s on it; the cap refuses it before extraction.
    conn.execute("set statement_timeout = '2s'")
    error = _routine_refused(
        conn, trigger_type="event", trigger_config={"pattern": "deploy " * 5715 + "x"}
    )
    _too_long(error, "routines.trigger_config.pattern", PATTERN)


def _extraction_ms(conn: psycopg.Connection, pattern: str) -> float:
    """Server time of one literal extraction, the best of three."""
    row = conn.execute(
        "select min(ms) from ("
        "  select extract(epoch from clock_timestamp() - t0) * 1000 as ms"
        "  from generate_series(1, 3) g,"
        "       lateral (select clock_timestamp() as t0 offset 0) s,"
        "       lateral (select ceaseless._regex_required_literal(%s || g::text) offset 0) e"
        ") t",
        (pattern,),
    ).fetchone()
    assert row is not None
    return float(row[0])


def test_literal_extraction_is_linear_in_the_pattern(conn: psycopg.Connection) -> None:
    # Far past the cap, so that a quadratic extraction shows: eight times the length
    # costs about eight times as much when linear, sixty-four times when quadratic.
    conn.execute("set statement_timeout = '20s'")
    unit = "déploy (x)+ [ab] \\. b{2,3} "
    short, long = unit * 500, unit * 4000
    assert conn.execute("select ceaseless._regex_required_literal(%s)", (long,)).fetchone() == (
        " déploy ",
    )
    ratio = _extraction_ms(conn, long) / _extraction_ms(conn, short)
    assert ratio < 24, f"8x the pattern cost {ratio:.1f}x the time"


# --- cron schedules ------------------------------------------------------------


def _schedule_error(conn: psycopg.Connection, schedule: str) -> str | None:
    row = conn.execute("select ceaseless._cron_error(%s)", (schedule,)).fetchone()
    assert row is not None
    return row[0]


def test_schedule_at_its_cap_is_accepted(conn: psycopg.Connection) -> None:
    schedule = "0" * (SCHEDULE - len(" * * * *")) + " * * * *"
    assert len(schedule) == SCHEDULE
    make_routine(conn, trigger_type="cron", trigger_config={"schedule": schedule})
    # The listener computes its slots (the check at INSERT is the only one).
    assert cron.next_fire(schedule, "UTC", datetime(2026, 1, 1, tzinfo=UTC)) == datetime(
        2026, 1, 1, 1, 0, tzinfo=UTC
    )


def test_schedule_past_its_cap_is_refused(conn: psycopg.Connection) -> None:
    schedule = "0" * (SCHEDULE + 1 - len(" * * * *")) + " * * * *"
    error = _routine_refused(conn, trigger_type="cron", trigger_config={"schedule": schedule})
    _too_long(error, "routines.trigger_config.schedule", SCHEDULE)
    expected = f"schedule is {SCHEDULE + 1} characters long; at most {SCHEDULE} are allowed"
    assert _schedule_error(conn, schedule) == expected


def test_the_reported_fifty_thousand_item_minute_list_is_refused(
    conn: psycopg.Connection,
) -> None:
    # croniter spent 0.6 s a call on it, on the listener's event loop.
    schedule = ",".join(str(i % 60) for i in range(50_000)) + " * * * *"
    error = _routine_refused(conn, trigger_type="cron", trigger_config={"schedule": schedule})
    _too_long(error, "routines.trigger_config.schedule", SCHEDULE)
    # One stored before the caps was disabled by db/0045
    # (tests/listener/test_cron_off_loop.py).


@pytest.mark.parametrize("position", range(6))
def test_field_at_its_item_cap_is_accepted(conn: psycopg.Connection, position: int) -> None:
    fields = ["1"] * 6
    fields[position] = ",".join(["1"] * SCHEDULE_ITEMS)
    schedule = " ".join(fields)
    assert _schedule_error(conn, schedule) is None
    cron.next_fire(schedule, "UTC", datetime(2026, 1, 1, tzinfo=UTC))


@pytest.mark.parametrize("position", range(6))
def test_field_past_its_item_cap_is_refused(conn: psycopg.Connection, position: int) -> None:
    fields = ["1"] * 6
    fields[position] = ",".join(["1"] * (SCHEDULE_ITEMS + 1))
    schedule = " ".join(fields)
    name = ("minute", "hour", "day-of-month", "month", "day-of-week", "second")[position]
    expected = (
        f"{name} field has {SCHEDULE_ITEMS + 1} list items; at most {SCHEDULE_ITEMS} are "
        "allowed (no field has more values than that)"
    )
    assert _schedule_error(conn, schedule) == expected
    error = _routine_refused(conn, trigger_type="cron", trigger_config={"schedule": schedule})
    assert (error.diag.message_primary or "").startswith(
        f"routines.trigger_config.schedule: {expected}"
    )


# --- prompts -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action_type", "field"),
    [("lightweight", "prompt"), ("full_job", "title"), ("full_job", "description")],
)
def test_routine_prompts_at_and_past_their_cap(
    conn: psycopg.Connection, action_type: str, field: str
) -> None:
    base = {"prompt": "p"} if action_type == "lightweight" else {"title": "t", "description": "d"}
    make_routine(conn, "at", action_type=action_type, action_config={**base, field: "x" * PROMPT})
    error = _routine_refused(
        conn,
        name="past",
        action_type=action_type,
        action_config={**base, field: "x" * (PROMPT + 1)},
    )
    _too_long(error, f"routines.action_config.{field}", PROMPT)


def test_job_prompt_at_and_past_its_cap(conn: psycopg.Connection) -> None:
    make_job(conn, prompt="x" * JOB_PROMPT)
    error = _refused(
        conn,
        "insert into ceaseless.job (kind, agent, prompt) values ('task', 'noop', %s)",
        ("x" * (JOB_PROMPT + 1),),
    )
    _too_long(error, "job.prompt", JOB_PROMPT)
    assert (error.diag.table_name, error.diag.column_name) == ("job", "prompt")


def test_job_prompt_update_past_its_cap_is_refused(conn: psycopg.Connection) -> None:
    job = make_job(conn)
    error = _refused(
        conn,
        "update ceaseless.job set prompt = repeat('y', %s) where id = %s",
        (JOB_PROMPT + 1, job),
    )
    _too_long(error, "job.prompt", JOB_PROMPT)


def test_job_payload_at_and_past_its_cap(conn: psycopg.Connection) -> None:
    # {"k": "…"} is 9 characters of JSON around the string.
    make_job(conn, payload={"k": "x" * (JOB_PAYLOAD - 9)})
    error = _refused(
        conn,
        "insert into ceaseless.job (kind, agent, payload) values ('task', 'noop', %s)",
        (json.dumps({"k": "x" * (JOB_PAYLOAD - 8)}),),
    )
    _too_long(error, "job.payload", JOB_PAYLOAD)


# --- event content ---------------------------------------------------------------


def test_event_content_at_and_past_its_cap(conn: psycopg.Connection) -> None:
    make_routine(conn, trigger_type="event", trigger_config={"pattern": "zzz"})
    row = conn.execute(
        "insert into ceaseless.events (user_id, content) values ('alice', repeat('a', %s) || "
        "'zzz') returning fired_count",
        (EVENT_CONTENT - 3,),
    ).fetchone()
    assert row == (1,)
    error = _refused(
        conn,
        "insert into ceaseless.events (user_id, content) values ('alice', repeat('a', %s))",
        (EVENT_CONTENT + 1,),
    )
    _too_long(error, "events.content", EVENT_CONTENT)
    assert (error.diag.table_name, error.diag.column_name) == ("events", "content")


def test_event_payload_at_and_past_its_cap(conn: psycopg.Connection) -> None:
    # {"k": "…"} is 9 characters of JSON around the string.
    conn.execute(
        "insert into ceaseless.events (user_id, content, payload) values ('alice', 'x', %s)",
        (json.dumps({"k": "x" * (EVENT_PAYLOAD - 9)}),),
    )
    error = _refused(
        conn,
        "insert into ceaseless.events (user_id, content, payload) values ('alice', 'x', %s)",
        (json.dumps({"k": "x" * (EVENT_PAYLOAD - 8)}),),
    )
    _too_long(error, "events.payload", EVENT_PAYLOAD)


def test_a_routine_prompt_and_event_at_their_caps_still_make_a_job(
    conn: psycopg.Connection,
) -> None:
    # The job prompt cap leaves room for both, so a fire never fails on it.
    make_routine(
        conn,
        trigger_type="event",
        trigger_config={"pattern": "^a"},
        action_config={"prompt": "p" * PROMPT},
    )
    conn.execute(
        "insert into ceaseless.events (user_id, content) values ('alice', repeat('a', %s))",
        (EVENT_CONTENT,),
    )
    row = conn.execute("select char_length(prompt) from ceaseless.job").fetchone()
    assert row is not None and PROMPT + EVENT_CONTENT < row[0] <= JOB_PROMPT


# --- context paths -------------------------------------------------------------


@pytest.mark.parametrize("path", ["../x", "a/../../x", "/etc/x", "/", "..", "  ", 7])
def test_job_context_paths_outside_the_workspace_are_refused(
    conn: psycopg.Connection, path: object
) -> None:
    error = _refused(
        conn,
        "insert into ceaseless.job (kind, agent, payload) values ('task', 'noop', %s)",
        (json.dumps({"context_paths": ["notes.md", path]}),),
    )
    assert error.sqlstate == "CE422"
    assert (error.diag.message_primary or "").startswith(
        "job.payload.context_paths: each entry must be a relative path inside the workspace"
    )


def test_job_context_paths_must_be_an_array(conn: psycopg.Connection) -> None:
    error = _refused(
        conn,
        "insert into ceaseless.job (kind, agent, payload) values ('task', 'noop', %s)",
        (json.dumps({"context_paths": "/etc/shadow"}),),
    )
    assert (error.diag.message_primary or "").startswith("job.payload.context_paths: must be")


def test_relative_context_paths_are_accepted(conn: psycopg.Connection) -> None:
    # etc/shadow is a file of the workspace here; the listener resolves it there.
    make_job(conn, payload={"context_paths": ["notes.md", "etc/shadow", "a/..b/c", "./x"]})
    make_job(conn, payload={"context_paths": None})


@pytest.mark.parametrize("path", ["../x", "/etc/x", "a/../../x"])
def test_routine_context_paths_outside_the_workspace_are_refused(
    conn: psycopg.Connection, path: str
) -> None:
    error = _routine_refused(conn, action_config={"prompt": "p", "context_paths": [path]})
    assert "action_config.context_paths" in (error.diag.message_primary or "")


# --- the statement timeout on the event-firing path ------------------------------

# Allowed (no back-reference, 61 characters) and yet about 4 s on PostgreSQL 15
# against a megabyte of random a and b: the automaton's states explode.
SLOW_PATTERN = "a[ab]{255}" * 6 + "c"


def test_a_slow_allowed_pattern_is_cut_off_by_the_connections_statement_timeout(
    conn: psycopg.Connection, db_url: str
) -> None:
    """An event insert is bounded by its connection's statement_timeout, not by SQL.

    PostgreSQL arms statement_timeout when a statement arrives, so a SET inside
    the trigger could not bound it; the regex engine does honour a cancel. Our
    connections carry the timeout (connections.connection_kwargs with a server deadline,
    as the listener and ingress use); a user role gets it as a role setting.
    """
    make_routine(conn, trigger_type="event", trigger_config={"pattern": SLOW_PATTERN})
    content = "select string_agg(case when random() < 0.5 then 'a' else 'b' end, '') "
    deadline = 0.5
    kwargs = connections.connection_kwargs("test", server_deadline=deadline, url=db_url)
    with psycopg.connect(db_url, **kwargs) as ours:
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled):
            ours.execute(
                f"insert into ceaseless.events (user_id, content) select 'alice', ({content} "
                "from generate_series(1, 1000000))"
            )
        elapsed = time.monotonic() - started
    # Building the content takes a fraction of the deadline; the match alone takes
    # several times it.
    assert elapsed < deadline + 1.0
    assert conn.execute("select count(*) from ceaseless.events").fetchone() == (0,)
