"""Loop validation: every column but the graph checked at INSERT/UPDATE, defaults filled,
webhook credentials generated / cleared / rotated, schedules asked for, deletes guarded."""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
import pytest

from tests.factories import make_agent
from tests.sql.loops import iterations, live, loop_row, make_loop, run_loop, succeed


@pytest.fixture(autouse=True)
def agent(conn: psycopg.Connection) -> None:
    make_agent(conn)


def _refused(conn: psycopg.Connection, **kw: Any) -> psycopg.errors.Error:
    with pytest.raises(psycopg.errors.Error) as info:
        make_loop(conn, **kw)
    assert info.value.sqlstate == "CE422", info.value
    return info.value


def test_a_valid_loop_gets_its_defaults(conn: psycopg.Connection) -> None:
    loop = make_loop(conn, triggers={"cron": "0 * * * *", "on_completion": True})
    row = loop_row(conn, loop)
    assert row["triggers"] == {"cron": "0 * * * *", "timezone": "UTC", "on_completion": True}
    assert row["repeat_policy"] == {"kind": "infinite"}
    assert row["workspace_id"] is not None and row["created_by"] is not None
    handle = conn.execute(
        "select handle from ceaseless.users where id = %s", (row["created_by"],)
    ).fetchone()
    assert handle == (row["user_id"],)
    assert row["webhook_token"] is None and row["webhook_signing_key"] is None
    # A second loop of the same owner reuses the users row.
    assert loop_row(conn, make_loop(conn))["created_by"] == row["created_by"]


@pytest.mark.parametrize(
    ("columns", "field"),
    [
        ({"title": " \t\u3000"}, "loops.title: must not be blank"),
        ({"task": "\n"}, "loops.task_template: must not be blank"),
        ({"triggers": {"on_complete": True}}, 'loops.triggers: unknown key "on_complete"'),
        ({"triggers": {"cron": "61 * * * *"}}, "loops.triggers.cron:"),
        ({"triggers": {"cron": 5}}, "loops.triggers.cron: must be a cron expression"),
        (
            {"triggers": {"cron": "* * * * *", "timezone": "Mars/Olympus"}},
            "loops.triggers.timezone:",
        ),
        ({"triggers": {"on_completion": "yes"}}, "loops.triggers.on_completion: must be true"),
        ({"triggers": {"webhook_enabled": 1}}, "loops.triggers.webhook_enabled: must be true"),
        ({"policy": {"kind": "forever"}}, "loops.repeat_policy.kind: must be infinite, iters"),
        ({"policy": {"kind": "infinite", "spec": {"n": 3}}}, "an infinite policy takes no spec"),
        ({"policy": {"kind": "iters", "spec": {"n": 0}}}, "loops.repeat_policy.spec.n: must be"),
        ({"policy": {"kind": "iters", "spec": {"n": "3"}}}, "loops.repeat_policy.spec.n: must be"),
        ({"policy": {"kind": "iters", "spec": {"n": 2.5}}}, "loops.repeat_policy.spec.n: must be"),
        ({"policy": {"kind": "iters"}}, "loops.repeat_policy.spec.n: must be"),
        ({"policy": {"kind": "iters", "spec": {"n": 3, "m": 1}}}, 'unknown key "m"'),
        (
            {
                "policy": {
                    "kind": "until",
                    "spec": {"event": "succeeded", "match": "x", "within_iters": 3},
                }
            },
            "exactly one of event and match",
        ),
        (
            {"policy": {"kind": "until", "spec": {"within_iters": 3}}},
            "exactly one of event and match",
        ),
        (
            {"policy": {"kind": "until", "spec": {"event": "maybe", "within_iters": 3}}},
            "loops.repeat_policy.spec.event: must be succeeded or failed",
        ),
        (
            {"policy": {"kind": "until", "spec": {"event": "failed"}}},
            "loops.repeat_policy.spec.within_iters: an until policy needs a positive integer",
        ),
        (
            {"policy": {"kind": "until", "spec": {"match": "(a)\\1", "within_iters": 3}}},
            "loops.repeat_policy.spec.match: must not contain back-references",
        ),
        (
            {"policy": {"kind": "until", "spec": {"match": "(unclosed", "within_iters": 3}}},
            "loops.repeat_policy.spec.match: must be a valid regular expression",
        ),
        (
            {"policy": {"kind": "until", "spec": {"match": " ", "within_iters": 3}}},
            "loops.repeat_policy.spec.match: must be a regular expression that is not blank",
        ),
    ],
)
def test_bad_columns_are_refused_naming_field_and_rule(
    conn: psycopg.Connection, columns: dict, field: str
) -> None:
    error = _refused(conn, **columns)
    assert field in str(error)
    assert conn.execute("select count(*) from ceaseless.loops").fetchone() == (0,)


def test_long_values_are_refused_with_their_length_not_their_text(
    conn: psycopg.Connection,
) -> None:
    error = _refused(conn, task="x" * 100_001)
    assert "loops.task_template: must be at most 100000 characters" in str(error)
    assert len(error.diag.message_primary or "") < 200
    error = _refused(
        conn, policy={"kind": "until", "spec": {"match": "a" * 2001, "within_iters": 2}}
    )
    assert "loops.repeat_policy.spec.match: must be at most 2000" in str(error)
    error = _refused(conn, triggers={"cron": "* " * 600})
    assert "loops.triggers.cron: must be at most 1000" in str(error)


def test_an_unbounded_bad_value_is_shown_bounded(conn: psycopg.Connection) -> None:
    error = _refused(conn, triggers={"cron": list(range(100_000))})
    primary = error.diag.message_primary or ""
    assert "characters)" in primary and len(primary) < 400


def test_the_seeds_ok_event_means_succeeded(conn: psycopg.Connection) -> None:
    loop = make_loop(conn, policy={"kind": "until", "spec": {"event": "ok", "within_iters": 20}})
    assert loop_row(conn, loop)["repeat_policy"] == {
        "kind": "until",
        "spec": {"event": "succeeded", "within_iters": 20},
    }


def test_an_update_is_validated_like_an_insert(conn: psycopg.Connection) -> None:
    loop = make_loop(conn)
    with pytest.raises(psycopg.errors.Error) as info:
        conn.execute(
            'update ceaseless.loops set repeat_policy = \'{"kind": "iters"}\' where id = %s',
            (loop,),
        )
    assert info.value.sqlstate == "CE422"


def _token_pattern(conn: psycopg.Connection) -> str:
    row = conn.execute("select ceaseless._webhook_token_pattern()").fetchone()
    assert row is not None
    return row[0]


def _set_triggers(conn: psycopg.Connection, loop: Any, triggers: dict) -> None:
    conn.execute(
        "update ceaseless.loops set triggers = %s where id = %s", (json.dumps(triggers), loop)
    )


def test_webhook_credentials_are_generated_kept_cleared_and_rotated(
    conn: psycopg.Connection,
) -> None:
    loop = make_loop(conn, triggers={"webhook_enabled": True})
    first = loop_row(conn, loop)
    assert re.fullmatch(r"loop_[0-9a-f]{64}", first["webhook_token"])
    assert re.fullmatch(_token_pattern(conn), first["webhook_token"])
    assert re.fullmatch(r"[0-9a-f]{64}", first["webhook_signing_key"])
    # Another change keeps them.
    conn.execute("update ceaseless.loops set title = 'renamed' where id = %s", (loop,))
    _set_triggers(conn, loop, {"webhook_enabled": True, "on_completion": True})
    kept = loop_row(conn, loop)
    assert (kept["webhook_token"], kept["webhook_signing_key"]) == (
        first["webhook_token"],
        first["webhook_signing_key"],
    )
    _set_triggers(conn, loop, {"webhook_enabled": False})
    cleared = loop_row(conn, loop)
    assert cleared["webhook_token"] is None and cleared["webhook_signing_key"] is None
    _set_triggers(conn, loop, {"webhook_enabled": True})
    rotated = loop_row(conn, loop)
    assert rotated["webhook_token"] not in (None, first["webhook_token"])
    assert rotated["webhook_signing_key"] not in (None, first["webhook_signing_key"])
    # Audit rows say what happened to the credential, never what it is.
    audit = conn.execute(
        "select string_agg(detail::text, ' ') from ceaseless.audit_log where entity = 'loop'"
    ).fetchone()
    assert audit is not None
    assert first["webhook_token"] not in audit[0] and rotated["webhook_token"] not in audit[0]
    assert first["webhook_signing_key"] not in audit[0]


def test_webhook_credentials_cannot_be_set_by_hand(conn: psycopg.Connection) -> None:
    error = _refused(
        conn,
        triggers={"webhook_enabled": True},
        webhook_token="loop_mine",
        webhook_signing_key="my key of my choosing",
    )
    assert "loops.webhook_token: is generated" in str(error)
    assert "my key" not in str(error)
    loop = make_loop(conn, triggers={"webhook_enabled": True})
    with pytest.raises(psycopg.errors.Error) as info:
        conn.execute(
            "update ceaseless.loops set webhook_signing_key = 'guessable' where id = %s", (loop,)
        )
    assert info.value.sqlstate == "CE422"


def test_setting_the_signing_key_by_hand_names_the_signing_key(conn: psycopg.Connection) -> None:
    error = _refused(
        conn, triggers={"webhook_enabled": True}, webhook_signing_key="my key of my choosing"
    )
    assert "loops.webhook_signing_key: is generated" in str(error)
    assert error.diag.column_name == "webhook_signing_key" and "my key" not in str(error)
    loop = make_loop(conn, triggers={"webhook_enabled": True})
    with pytest.raises(psycopg.errors.Error) as info:
        conn.execute(
            "update ceaseless.loops set webhook_signing_key = 'guessable' where id = %s", (loop,)
        )
    assert "loops.webhook_signing_key: is generated" in str(info.value)
    assert "guessable" not in str(info.value)


def test_constraint_errors_never_print_the_credential(conn: psycopg.Connection) -> None:
    loop = make_loop(conn, triggers={"webhook_enabled": True})
    row = loop_row(conn, loop)
    with pytest.raises(psycopg.errors.CheckViolation) as info:
        conn.execute("update ceaseless.loops set stopped_reason = 'bored' where id = %s", (loop,))
    shown = f"{info.value} {info.value.diag.message_detail}"
    assert row["webhook_token"] not in shown and row["webhook_signing_key"] not in shown


def _notified(listener: psycopg.Connection) -> list[dict]:
    return [json.loads(n.payload) for n in listener.notifies(timeout=0.5, stop_after=20)]


def test_schedule_changes_clear_next_fire_at_and_notify(
    conn: psycopg.Connection, db_url: str
) -> None:
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute("listen ceaseless_schedule")
        loop = make_loop(conn, triggers={"cron": "0 * * * *"})
        assert {"table": "loops", "id": str(loop)} in _notified(listener)
        conn.execute(
            "update ceaseless.loops set next_fire_at = now() + interval '1 hour' where id = %s",
            (loop,),
        )
        _notified(listener)
        # A change that is not the schedule keeps the slot.
        conn.execute("update ceaseless.loops set title = 'x' where id = %s", (loop,))
        assert loop_row(conn, loop)["next_fire_at"] is not None
        _set_triggers(conn, loop, {"cron": "30 * * * *"})
        assert loop_row(conn, loop)["next_fire_at"] is None
        assert {"table": "loops", "id": str(loop)} in _notified(listener)
        conn.execute("update ceaseless.loops set enabled = false where id = %s", (loop,))
        assert loop_row(conn, loop)["next_fire_at"] is None
        assert _notified(listener) == []
        conn.execute("update ceaseless.loops set enabled = true where id = %s", (loop,))
        assert {"table": "loops", "id": str(loop)} in _notified(listener)


def test_re_enabling_a_stopped_loop_continues_its_chain_and_counts_again(
    conn: psycopg.Connection,
) -> None:
    loop = make_loop(
        conn, triggers={"on_completion": True}, policy={"kind": "iters", "spec": {"n": 2}}
    )
    succeed(conn, run_loop(conn, loop), "one")
    succeed(conn, live(conn, loop), "two")
    row = loop_row(conn, loop)
    assert (row["enabled"], row["stopped_reason"]) == (False, "completed")
    # Re-enabling an on_completion loop starts the next iteration at once.
    conn.execute("update ceaseless.loops set enabled = true where id = %s", (loop,))
    row = loop_row(conn, loop)
    assert row["stopped_reason"] is None and row["stopped_at"] is None
    assert row["policy_from_iteration"] == 2
    third = live(conn, loop)
    assert "## Prior iteration (2)\n\ntwo" in iterations(conn, loop)[2]["task"]
    succeed(conn, third, "three")
    assert loop_row(conn, loop)["enabled"] is True
    succeed(conn, live(conn, loop), "four")
    chain = iterations(conn, loop)
    assert [r["iteration"] for r in chain] == [1, 2, 3, 4]
    assert [r["parent_run_id"] for r in chain[1:]] == [r["id"] for r in chain[:-1]]
    row = loop_row(conn, loop)
    assert (row["enabled"], row["stopped_reason"]) == (False, "completed")


def test_a_loop_with_a_live_iteration_cannot_be_deleted(conn: psycopg.Connection) -> None:
    loop = make_loop(conn)
    run = run_loop(conn, loop)
    with pytest.raises(psycopg.errors.Error) as info:
        conn.execute("delete from ceaseless.loops where id = %s", (loop,))
    assert info.value.sqlstate == "CE409"
    assert "cancel_topology_run" in (info.value.diag.message_hint or "")
    conn.execute("select ceaseless.cancel_topology_run(%s)", (run,))
    conn.execute("delete from ceaseless.loops where id = %s", (loop,))
    assert conn.execute("select count(*) from ceaseless.topology_runs").fetchone() == (0,)


def test_an_iteration_cannot_be_inserted_by_hand(conn: psycopg.Connection) -> None:
    loop = make_loop(conn)
    with pytest.raises(psycopg.errors.Error) as info:
        conn.execute(
            "insert into ceaseless.topology_runs (graph, task, loop_id, iteration) "
            "select graph, 'x', id, 7 from ceaseless.loops where id = %s",
            (loop,),
        )
    assert info.value.sqlstate == "CE422" and "run_loop" in str(info.value.diag.message_hint)
