"""NOTIFY payloads: ids and states, one notification per statement and group."""

from __future__ import annotations

import json

import psycopg

from tests.factories import claim, make_agent, make_job, make_jobs


def _drain(listener: psycopg.Connection) -> list[tuple[str, dict[str, object]]]:
    return [(n.channel, json.loads(n.payload)) for n in listener.notifies(timeout=0.3)]


def test_single_insert_announces_the_job_id_kind_and_state(db_url: str) -> None:
    with (
        psycopg.connect(db_url, autocommit=True) as listener,
        psycopg.connect(db_url, autocommit=True) as conn,
    ):
        make_agent(conn)
        listener.execute("listen ceaseless_job")
        job = make_job(conn)
        assert _drain(listener) == [
            (
                "ceaseless_job",
                {
                    "id": str(job),
                    "kind": "task",
                    "agent": "noop",
                    "state": "pending",
                    "old_state": None,
                },
            )
        ]


def test_bulk_insert_sends_one_notification(db_url: str) -> None:
    with (
        psycopg.connect(db_url, autocommit=True) as listener,
        psycopg.connect(db_url, autocommit=True) as conn,
    ):
        make_agent(conn)
        listener.execute("listen ceaseless_job")
        make_jobs(conn, 2000)
        messages = _drain(listener)
        assert len(messages) == 1
        assert messages[0][1]["count"] == 2000 and messages[0][1]["id"] is None


def test_state_changes_announce_old_and_new_state_but_lease_extensions_do_not(
    db_url: str,
) -> None:
    with (
        psycopg.connect(db_url, autocommit=True) as listener,
        psycopg.connect(db_url, autocommit=True) as conn,
    ):
        make_agent(conn)
        job = make_job(conn)
        listener.execute("listen ceaseless_job")
        claim(conn)
        conn.execute("select ceaseless.extend_leases('w1', %s)", ([job],))
        assert [payload for _, payload in _drain(listener)] == [
            {
                "id": str(job),
                "kind": "task",
                "agent": "noop",
                "state": "claimed",
                "old_state": "pending",
            }
        ]


def test_agent_registry_change_announces_config(db_url: str) -> None:
    with (
        psycopg.connect(db_url, autocommit=True) as listener,
        psycopg.connect(db_url, autocommit=True) as conn,
    ):
        listener.execute("listen ceaseless_config")
        make_agent(conn)
        conn.execute("update ceaseless.settings set value = '30' where key = 'lease_secs'")
        assert _drain(listener) == [
            ("ceaseless_config", {"table": "agents"}),
            ("ceaseless_config", {"table": "settings"}),
        ]


def test_run_start_and_finish_announce_on_ceaseless_run(db_url: str) -> None:
    with (
        psycopg.connect(db_url, autocommit=True) as listener,
        psycopg.connect(db_url, autocommit=True) as conn,
    ):
        make_agent(conn)
        make_job(conn)
        listener.execute("listen ceaseless_run")
        run = conn.execute(
            "select run_id from ceaseless.claim_jobs('w1', 10, p_start => true)"
        ).fetchone()
        assert run is not None
        conn.execute(
            "select ceaseless.finish_runs('w1', %s::jsonb)",
            (json.dumps([{"run_id": str(run[0]), "outcome": "succeeded"}]),),
        )
        assert [payload for _, payload in _drain(listener)] == [
            {"id": str(run[0]), "table": "agent_run", "status": "running"},
            {"id": str(run[0]), "table": "agent_run", "status": "succeeded"},
        ]


def test_a_claim_or_finish_that_moves_nothing_announces_nothing(db_url: str) -> None:
    with (
        psycopg.connect(db_url, autocommit=True) as listener,
        psycopg.connect(db_url, autocommit=True) as conn,
    ):
        make_agent(conn)
        listener.execute("listen ceaseless_run")
        listener.execute("listen ceaseless_job")
        # Each statement inside runs once with no rows: the claim's update and
        # the insert of its runs, the finish's updates, the sweep's updates.
        conn.execute("select * from ceaseless.claim_jobs('w1', 10, p_start => true)")
        conn.execute("select * from ceaseless.claim_jobs('w1', 10)")
        conn.execute("select ceaseless.finish_runs('w1', '[]'::jsonb)")
        conn.execute("select ceaseless.expire_leases()")
        conn.execute("select ceaseless.release_jobs('w1', '{}'::uuid[])")
        assert _drain(listener) == []
