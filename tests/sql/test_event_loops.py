"""Loops fired by events: INSERT INTO events starts the user's matching event loops in the same
transaction, through the loops' one firing path, as it fires event routines."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

from tests.factories import make_agent, make_routine
from tests.sql.loops import iterations, loop_row, make_loop, runs, succeed

EVENT = {"event": {"pattern": "^deploy (failed|broken)", "channel": "ci"}}


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn)


def _event(conn: psycopg.Connection, content: str, channel: str | None = "ci",
           user: str | None = None) -> int:  # fmt: skip
    owner = user or "postgres"
    row = conn.execute(
        "insert into ceaseless.events (user_id, channel, content) values (%s, %s, %s) "
        "returning fired_count",
        (owner, channel, content),
    ).fetchone()
    assert row is not None
    return row[0]


def test_a_matching_event_starts_an_iteration_with_the_event_in_its_task(
    conn: psycopg.Connection,
) -> None:
    loop = make_loop(conn, triggers=EVENT, user_id="postgres")

    fired = _event(conn, "deploy failed on main: exit 1")

    (iteration,) = iterations(conn, loop)
    assert fired == 1
    assert (iteration["status"], iteration["trigger_type"]) == ("running", "event")
    assert iteration["trigger_detail"] == "deploy failed on main: exit 1"
    assert iteration["task"].endswith("## Event\n\ndeploy failed on main: exit 1")
    stored = loop_row(conn, loop)["triggers"]
    assert stored == {"event": {"pattern": "^deploy (failed|broken)", "channel": "ci"}}


def test_the_channel_the_pattern_and_the_owner_must_all_match(conn: psycopg.Connection) -> None:
    loop = make_loop(conn, triggers=EVENT, user_id="postgres")
    any_channel = make_loop(conn, triggers={"event": {"pattern": "^deploy"}}, user_id="postgres")

    assert _event(conn, "deploy failed", channel="CI") == 2  # channels ignore case
    succeed(conn, iterations(conn, loop)[0]["id"])
    succeed(conn, iterations(conn, any_channel)[0]["id"])
    assert _event(conn, "deploy failed", channel="ops") == 1  # only the loop of any channel
    succeed(conn, iterations(conn, any_channel)[1]["id"])
    assert _event(conn, "the deploy failed", channel="ci") == 0  # anchored pattern
    assert _event(conn, "deploy failed", channel="ci", user="mallory") == 0  # another user's
    assert len(iterations(conn, loop)) == 1 and len(iterations(conn, any_channel)) == 2


def test_an_event_during_a_live_iteration_is_recorded_as_a_skipped_fire(
    conn: psycopg.Connection,
) -> None:
    loop = make_loop(conn, triggers=EVENT, user_id="postgres")
    routine = make_routine(conn, trigger_type="event", trigger_config={"pattern": "^deploy"},
                           user_id="postgres")  # fmt: skip

    conn.execute(
        "insert into ceaseless.events (user_id, channel, content) "
        "select 'postgres', 'ci', 'deploy failed ' || g from generate_series(1, 3) g"
    )

    statuses = [(r["status"], r["skip_reason"]) for r in runs(conn, loop)]
    assert statuses == [
        ("running", None),
        ("skipped", "live_iteration"),
        ("skipped", "live_iteration"),
    ]
    fired_routine = conn.execute(
        "select count(*) from ceaseless.routine_runs where routine_id = %s", (routine,)
    ).fetchone()
    assert fired_routine == (3,)  # the routine fires as before, beside the loop


def test_a_disabled_loop_is_not_fired_and_a_bad_event_trigger_is_refused_naming_it(
    conn: psycopg.Connection,
) -> None:
    loop = make_loop(conn, triggers=EVENT, user_id="postgres", enabled=False)
    assert _event(conn, "deploy failed") == 0
    assert runs(conn, loop) == []

    for triggers, message in (
        ({"event": "deploy"}, "loops.triggers.event: must be an object {pattern, channel?}"),
        ({"event": {"pattern": "(a)\\1"}},
         "loops.triggers.event.pattern: must not contain back-references"),
        ({"event": {"pattern": "  "}},
         "loops.triggers.event.pattern: must be a regular expression"),
        ({"event": {"pattern": "x", "channel": 7}},
         "loops.triggers.event.channel: must be a channel name or null"),
        ({"event": {"pattern": "x", "when": "now"}}, 'loops.triggers.event: unknown key "when"'),
    ):  # fmt: skip
        with pytest.raises(psycopg.Error) as refused:
            make_loop(conn, triggers=triggers)
        assert refused.value.diag.sqlstate == "CE422"
        assert str(refused.value.diag.message_primary).startswith(message), refused.value


def test_a_users_event_fires_only_their_own_loops(
    conn: psycopg.Connection, login_role: Callable[[str], psycopg.Connection]
) -> None:
    alice, bob = login_role("alice"), login_role("bob")
    for user in (alice, bob):
        user.execute(
            "insert into ceaseless.loops (title, description, task_template, graph, triggers) "
            "values ('watch', '', 'look', %s, %s)",
            (
                '{"nodes": [{"id": "A", "agent": "noop", "prompt": "p"}]}',
                '{"event": {"pattern": "^deploy"}}',
            ),
        )

    fired = bob.execute(
        "insert into ceaseless.events (content) values ('deploy failed') returning fired_count"
    ).fetchone()

    assert fired == (1,)
    owners = conn.execute(
        "select l.user_id, count(r.id) from ceaseless.loops l "
        "left join ceaseless.topology_runs r on r.loop_id = l.id group by 1 order by 1"
    ).fetchall()
    assert owners == sorted([(alice.info.user, 0), (bob.info.user, 1)])
    explained = bob.execute(
        "select detail from ceaseless.explain_loop((select id from ceaseless.loops)) "
        "where reason = 'live_iteration'"
    ).fetchall()
    assert len(explained) == 1
