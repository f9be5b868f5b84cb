"""Routines end to end: SQL API → NOTIFY → listener → agent → routine_runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import psycopg

from tests.e2e.support import ListenerProcess, wait_routine_run, wait_until
from tests.factories import make_agent, make_routine

SECRET = "a-signing-secret-of-some-length"


def _reply_agent(conn: psycopg.Connection, reply: str, name: str = "replier") -> str:
    """A command agent that reads its prompt and answers `reply`."""
    return make_agent(
        conn,
        name,
        "command",
        ["sh", "-c", f"cat > /dev/null; printf '%s' '{reply}'"],
        max_concurrent=50,
    )


def _echo_agent(conn: psycopg.Connection) -> str:
    """A command agent whose reply is its whole prompt."""
    return make_agent(conn, "echo", "command", ["cat"], max_concurrent=50)


def test_manual_routine_answering_routine_ok_ends_ok(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    routine = make_routine(conn, agent=_reply_agent(conn, "ROUTINE_OK"))
    start_listener("--poll-interval", "60")
    conn.execute("select ceaseless.run_routine(%s)", (routine,))
    assert wait_routine_run(conn, routine) == ("ok", "")


def test_event_routine_with_a_finding_ends_in_attention(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    routine = make_routine(
        conn,
        trigger_type="event",
        trigger_config={"pattern": "disk"},
        agent=_reply_agent(conn, "Disk at 97 percent"),
    )
    start_listener("--poll-interval", "60")
    conn.execute("insert into ceaseless.events (user_id, content) values ('alice', 'disk alert')")
    assert wait_routine_run(conn, routine) == ("attention", "Disk at 97 percent")


def test_lightweight_prompt_carries_context_files_state_and_instruction(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess], tmp_path: Path
) -> None:
    (tmp_path / "notes.md").write_text("remember the milk")
    routine = make_routine(
        conn,
        agent=_echo_agent(conn),
        action_config={"prompt": "Review the notes.", "context_paths": ["notes.md", "gone.md"]},
    )
    conn.execute(
        'update ceaseless.routines set state = \'{"last_status": "ok"}\' where id = %s', (routine,)
    )
    start_listener("--poll-interval", "60", "--workdir", str(tmp_path))
    conn.execute("select ceaseless.run_routine(%s)", (routine,))
    status, summary = wait_routine_run(conn, routine)
    assert status == "attention"
    order = [
        summary.index(part)
        for part in (
            "Review the notes.",
            "remember the milk",
            "gone.md",
            "(missing",
            "last_status",
            "ROUTINE_OK",
        )
    ]
    assert order == sorted(order)


def test_cron_routine_is_scheduled_and_fired_by_the_listener(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    start_listener("--poll-interval", "60")
    # Six fields: the sixth is seconds, so this fires every second.
    routine = make_routine(
        conn,
        trigger_type="cron",
        trigger_config={"schedule": "* * * * * *"},
        agent=_reply_agent(conn, "ROUTINE_OK"),
        cooldown_secs=3600,
    )
    assert wait_routine_run(conn, routine, timeout=10) == ("ok", "")
    row = conn.execute(
        "select trigger_type, trigger_detail from ceaseless.routine_runs "
        "where routine_id = %s order by started_at limit 1",
        (routine,),
    ).fetchone()
    assert row == ("cron", "* * * * * *")


def test_two_listeners_fire_a_thousand_due_routines_exactly_once(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(conn, max_concurrent=2000)
    conn.execute("update ceaseless.settings set value = '5000' where key = 'routine_max_running'")
    conn.execute(
        "insert into ceaseless.routines (name, user_id, agent, trigger_type, trigger_config, "
        "action_type, action_config, cooldown_secs) "
        "select 'r' || g, 'alice', 'noop', 'cron', '{\"schedule\": \"0 0 1 1 *\"}', "
        '\'full_job\', \'{"title": "t", "description": "d"}\', 0 '
        "from generate_series(1, 1000) g"
    )
    start_listener("--poll-interval", "0.3", worker_id="one")
    start_listener("--poll-interval", "0.3", worker_id="two")
    wait_until(
        lambda: (
            conn.execute(
                "select count(*) from ceaseless.routines where next_fire_at is null"
            ).fetchone()
            == (0,)
        ),
        20,
        "the listeners never scheduled the routines",
    )
    conn.execute("update ceaseless.routines set next_fire_at = now() + interval '1 second'")
    wait_until(
        lambda: conn.execute("select count(*) from ceaseless.routine_runs").fetchone() == (1000,),
        60,
        "not every routine fired",
    )
    time.sleep(1)  # let any double fire show up
    per_routine = conn.execute(
        "select count(*) from ceaseless.routine_runs group by routine_id"
    ).fetchall()
    assert len(per_routine) == 1000 and {n for (n,) in per_routine} == {1}


def test_an_unparseable_stored_schedule_disables_only_that_routine(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(conn)
    good = make_routine(conn, "good", "cron", {"schedule": "0 0 1 1 *"})
    bad = make_routine(conn, "bad", "cron", {"schedule": "0 0 1 1 *"})
    # Only a bypass of validation (a restore, an old version) can store this.
    conn.execute("alter table ceaseless.routines disable trigger routines_validate")
    conn.execute(
        'update ceaseless.routines set trigger_config = \'{"schedule": "99 * * * *", '
        '"timezone": "UTC"}\', next_fire_at = null where id = %s',
        (bad,),
    )
    conn.execute("alter table ceaseless.routines enable trigger routines_validate")
    start_listener("--poll-interval", "60")
    wait_until(
        lambda: (
            conn.execute("select enabled from ceaseless.routines where id = %s", (bad,)).fetchone()
            == (False,)
        ),
        10,
    )
    error = conn.execute(
        "select last_error from ceaseless.routines where id = %s", (bad,)
    ).fetchone()
    assert error is not None and "99 * * * *" in error[0]
    # The good routine is scheduled in the same pass (its batch is written
    # after the bad one is disabled, so wait for it rather than race it).
    wait_until(
        lambda: (
            conn.execute(
                "select next_fire_at is not null and enabled from ceaseless.routines where id = %s",
                (good,),
            ).fetchone()
            == (True,)
        ),
        10,
        "the good routine was not scheduled",
    )


def test_routine_notification_is_delivered_by_the_running_listener(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    routine = make_routine(
        conn, agent=_reply_agent(conn, "Certificate expires in 3 days"), notify_user="carol"
    )
    listener = start_listener("--poll-interval", "60")
    conn.execute("select ceaseless.run_routine(%s)", (routine,))
    wait_until(
        lambda: (
            conn.execute("select status from ceaseless.notifications").fetchone() == ("delivered",)
        ),
        15,
        "the notification was not delivered",
    )
    listener.wait_for_event("notification.delivered")
    line = listener.events("notification.delivered")[0]
    assert "Certificate expires in 3 days" in str(line)


def test_max_tokens_reaches_the_agent_environment(
    conn: psycopg.Connection, start_listener: Callable[..., ListenerProcess]
) -> None:
    make_agent(conn, "env", "command", ["sh", "-c", "cat >/dev/null; echo $CEASELESS_MAX_TOKENS"])
    routine = make_routine(conn, agent="env", action_config={"prompt": "p", "max_tokens": 321})
    start_listener("--poll-interval", "60")
    conn.execute("select ceaseless.run_routine(%s)", (routine,))
    assert wait_routine_run(conn, routine) == ("attention", "321")
