"""lane_pauses: a rate limit pauses a lane without touching the agent registry."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID

import psycopg
import pytest

from listener.database.migrate import migrate, sql_root
from tests.factories import (
    claim,
    claim_started,
    finish,
    make_agent,
    make_job,
    make_jobs,
    pause_lane,
)


def _pause(conn: psycopg.Connection, agent: str = "noop") -> tuple[datetime, str] | None:
    row = conn.execute(
        "select paused_until, reason from ceaseless.lane_pauses where agent = %s", (agent,)
    ).fetchone()
    return None if row is None else (row[0], row[1])


def _rate_limited(conn: psycopg.Connection, run: UUID, reset: datetime) -> str:
    return finish(conn, run, "rate_limited", rate_limit_reset_at=reset.isoformat())


def test_rate_limited_finish_pauses_the_lane_without_touching_the_agent_registry(
    db_url: str,
) -> None:
    with (
        psycopg.connect(db_url, autocommit=True) as listener,
        psycopg.connect(db_url, autocommit=True) as conn,
    ):
        make_agent(conn)
        job = make_job(conn)
        run = claim_started(conn)[job]
        registry = conn.execute(
            "select to_jsonb(a) from ceaseless.agents a where name = 'noop'"
        ).fetchone()
        audited = conn.execute(
            "select count(*) from ceaseless.audit_log where entity = 'agents'"
        ).fetchone()
        listener.execute("listen ceaseless_config")
        reset = datetime.now(UTC) + timedelta(hours=1)

        assert _rate_limited(conn, run, reset) == "pending"

        # Every listener would reload its registry on this, for nothing.
        assert [n.payload for n in listener.notifies(timeout=0.5)] == []
        assert (
            conn.execute(
                "select count(*) from ceaseless.audit_log where entity = 'agents'"
            ).fetchone()
            == audited
        )
        assert (
            conn.execute(
                "select to_jsonb(a) from ceaseless.agents a where name = 'noop'"
            ).fetchone()
            == registry
        )
        assert _pause(conn) == (reset, "rate limit")


def test_claim_skips_a_paused_lane_until_the_pause_passes(conn: psycopg.Connection) -> None:
    make_agent(conn, "paused")
    make_agent(conn, "other")
    job = make_job(conn, agent="paused")
    run = claim_started(conn)[job]
    reset = datetime.now(UTC) + timedelta(minutes=10)
    _rate_limited(conn, run, reset)
    waiting = make_job(conn, agent="paused")
    elsewhere = make_job(conn, agent="other")

    assert claim(conn) == [elsewhere]
    assert claim(conn, p_now=reset - timedelta(seconds=1)) == []
    assert set(claim(conn, p_now=reset + timedelta(seconds=1))) == {job, waiting}


def test_a_pause_is_only_ever_lengthened_by_a_later_rate_limit(conn: psycopg.Connection) -> None:
    make_agent(conn, max_concurrent=3)
    make_jobs(conn, 3)
    first, second, third = claim_started(conn).values()
    now = datetime.now(UTC)

    _rate_limited(conn, first, now + timedelta(hours=1))
    _rate_limited(conn, second, now + timedelta(minutes=30))
    assert _pause(conn) == (now + timedelta(hours=1), "rate limit")
    _rate_limited(conn, third, now + timedelta(hours=2))
    assert _pause(conn) == (now + timedelta(hours=2), "rate limit")


def test_one_batch_pauses_each_lane_until_its_latest_reset(conn: psycopg.Connection) -> None:
    make_agent(conn, "a")
    make_agent(conn, "b")
    for agent in ("a", "a", "b"):
        make_job(conn, agent=agent)
    runs = conn.execute(
        "select agent, run_id from ceaseless.claim_jobs('w1', 10, p_start => true) order by agent"
    ).fetchall()
    now = datetime.now(UTC)
    resets = [now + timedelta(minutes=20), now + timedelta(minutes=40), now + timedelta(hours=1)]
    batch = [
        {"run_id": str(run), "outcome": "rate_limited", "rate_limit_reset_at": reset.isoformat()}
        for (_, run), reset in zip(runs, resets, strict=True)
    ]
    conn.execute("select ceaseless.finish_runs('w1', %s::jsonb)", (json.dumps(batch),))
    pauses = conn.execute(
        "select agent, paused_until from ceaseless.lane_pauses order by agent"
    ).fetchall()
    assert pauses == [("a", resets[1]), ("b", resets[2])]


def test_a_reset_time_already_past_pauses_nothing(conn: psycopg.Connection) -> None:
    make_agent(conn)
    job = make_job(conn)
    run = claim_started(conn)[job]
    _rate_limited(conn, run, datetime.now(UTC) - timedelta(seconds=5))
    assert _pause(conn) is None


def test_an_operator_pauses_and_resumes_a_lane_with_a_row(conn: psycopg.Connection) -> None:
    make_agent(conn)
    job = make_job(conn)
    pause_lane(conn, "noop", datetime.now(UTC) + timedelta(days=1), "provider maintenance")
    assert claim(conn) == []
    conn.execute("delete from ceaseless.lane_pauses where agent = 'noop'")
    assert claim(conn) == [job]


def test_a_due_job_of_a_paused_lane_is_stuck_with_the_pause_as_its_reason(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    job = make_job(conn, run_after=datetime.now(UTC) - timedelta(minutes=10))
    pause_lane(conn, "noop", datetime.now(UTC) + timedelta(hours=1), "rate limit")
    reason = conn.execute("select reason from ceaseless.stuck_jobs where id = %s", (job,))
    assert reason.fetchone() == ("due, but its lane is paused (rate limit)",)


def test_a_pause_follows_its_agent_when_renamed_and_goes_when_it_is_deleted(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn, "before")
    until = datetime.now(UTC) + timedelta(hours=1)
    pause_lane(conn, "before", until, "rate limit")
    conn.execute("update ceaseless.agents set name = 'after' where name = 'before'")
    assert _pause(conn, "after") == (until, "rate limit")
    conn.execute("delete from ceaseless.agents where name = 'after'")
    assert conn.execute("select count(*) from ceaseless.lane_pauses").fetchone() == (0,)


@pytest.mark.parametrize("reason", ["", None, " \t\u3000"])
def test_a_pause_must_say_why(conn: psycopg.Connection, reason: str | None) -> None:
    make_agent(conn)
    with pytest.raises(psycopg.errors.IntegrityError):
        pause_lane(conn, "noop", datetime.now(UTC) + timedelta(hours=1), reason)


def test_migration_moves_registry_pauses_into_lane_pauses(
    empty_db_url: str, tmp_path: Path
) -> None:
    (lane_pauses,) = (sql_root() / "db").glob("*_lane_pauses_*.sql")
    version = int(lane_pauses.name[:4])
    shutil.copytree(sql_root() / "db", tmp_path / "db")
    (tmp_path / "functions").mkdir()
    later = [p for p in (tmp_path / "db").glob("*.sql") if int(p.name[:4]) >= version]
    for path in later:
        path.rename(path.with_suffix(".later"))
    migrate(empty_db_url, root=tmp_path)

    until = datetime.now(UTC) + timedelta(hours=1)
    with psycopg.connect(empty_db_url, autocommit=True) as conn:
        conn.execute(
            "insert into ceaseless.agents (name, adapter, paused_until) "
            "values ('paused', 'noop', %s), ('free', 'noop', null)",
            (until,),
        )
        # Stand-ins for the views that read the column before this migration:
        # it must drop them (without cascade), or the column cannot go.
        conn.execute(
            "create view ceaseless.governor_usage as "
            "select name as agent, paused_until from ceaseless.agents"
        )
        conn.execute(
            "create view ceaseless.stuck_jobs as "
            "select j.id, a.paused_until from ceaseless.job j "
            "join ceaseless.agents a on a.name = j.agent"
        )
    for path in later:
        path.with_suffix(".later").rename(path)
    shutil.rmtree(tmp_path / "functions")
    shutil.copytree(sql_root() / "functions", tmp_path / "functions")
    migrate(empty_db_url, root=tmp_path)

    with psycopg.connect(empty_db_url) as conn:
        pauses = conn.execute(
            "select agent, paused_until, reason from ceaseless.lane_pauses"
        ).fetchall()
        assert pauses == [("paused", until, "rate limit")]
        column = conn.execute(
            "select count(*) from information_schema.columns "
            "where table_schema = 'ceaseless' and table_name = 'agents' "
            "and column_name = 'paused_until'"
        ).fetchone()
        assert column == (0,)
        usage = conn.execute(
            "select agent, free_slots, paused_until from ceaseless.governor_usage order by agent"
        ).fetchall()
        assert usage == [("free", 4, None), ("paused", 0, until)]
