"""Bad input is refused at INSERT with an error naming the field, the rule and the value."""

from __future__ import annotations

import psycopg
import pytest

from tests.factories import make_agent, make_job


def _refused(conn: psycopg.Connection, sql: str, params: tuple[object, ...] = ()) -> psycopg.Error:
    with pytest.raises(psycopg.Error) as error:
        conn.execute(sql, params)
    return error.value


def test_unknown_job_kind_names_the_field_and_value(conn: psycopg.Connection) -> None:
    make_agent(conn)
    error = _refused(
        conn, "insert into ceaseless.job (kind, agent, prompt) values ('dance', 'noop', 'p')"
    )
    assert error.diag.constraint_name == "job_kind_check"
    assert "dance" in (error.diag.message_detail or "")


def test_process_agent_with_empty_argv_is_refused(conn: psycopg.Connection) -> None:
    error = _refused(
        conn, "insert into ceaseless.agents (name, adapter, argv) values ('c', 'command', '{}')"
    )
    assert error.diag.constraint_name == "argv_not_empty_for_process_adapters"


def test_negative_timeout_is_refused(conn: psycopg.Connection) -> None:
    error = _refused(
        conn, "insert into ceaseless.agents (name, adapter, timeout_secs) values ('n', 'noop', -5)"
    )
    assert error.diag.constraint_name == "timeout_secs_positive"
    assert "-5" in (error.diag.message_detail or "")


def test_half_a_claim_is_refused(conn: psycopg.Connection) -> None:
    make_agent(conn)
    job = make_job(conn)
    error = _refused(
        conn, "update ceaseless.job set state = 'claimed', claimed_by = 'w1' where id = %s", (job,)
    )
    assert error.diag.constraint_name == "claim_complete"


def test_pending_job_holding_a_claim_is_refused(conn: psycopg.Connection) -> None:
    make_agent(conn)
    job = make_job(conn)
    error = _refused(
        conn,
        "update ceaseless.job set claimed_by = 'w1', claim_expires_at = now() where id = %s",
        (job,),
    )
    assert error.diag.constraint_name == "pending_holds_no_claim"


def test_pull_request_reference_with_three_of_six_fields_is_refused(
    conn: psycopg.Connection,
) -> None:
    make_agent(conn)
    job = make_job(conn)
    error = _refused(
        conn,
        "insert into ceaseless.agent_run (job_id, agent, adapter, worker, attempt, "
        "pr_forge, pr_owner, pr_repo) values (%s, 'noop', 'noop', 'w', 1, 'github', 'o', 'r')",
        (job,),
    )
    assert error.diag.constraint_name == "pull_request_complete"


def test_forge_job_without_an_issue_is_refused(conn: psycopg.Connection) -> None:
    make_agent(conn)
    error = _refused(
        conn, "insert into ceaseless.job (kind, agent, prompt) values ('plan', 'noop', 'p')"
    )
    assert error.diag.constraint_name == "issue_ref_required_for_forge_kinds"


def test_partial_issue_reference_is_refused(conn: psycopg.Connection) -> None:
    make_agent(conn)
    error = _refused(
        conn,
        "insert into ceaseless.job (kind, agent, prompt, forge, owner) "
        "values ('task', 'noop', 'p', 'github', 'o')",
    )
    assert error.diag.constraint_name == "issue_ref_complete"


def test_job_for_an_unknown_agent_is_refused(conn: psycopg.Connection) -> None:
    error = _refused(
        conn, "insert into ceaseless.job (kind, agent, prompt) values ('task', 'ghost', 'p')"
    )
    assert isinstance(error, psycopg.errors.ForeignKeyViolation)
    assert "ghost" in (error.diag.message_detail or "")


def test_second_live_job_with_one_dedup_key_is_refused(conn: psycopg.Connection) -> None:
    make_agent(conn)
    make_job(conn, dedup_key="nightly")
    error = _refused(
        conn,
        "insert into ceaseless.job (kind, agent, prompt, dedup_key) "
        "values ('task', 'noop', 'p', 'nightly')",
    )
    assert error.diag.constraint_name == "job_live_dedup_idx"
    assert "nightly" in (error.diag.message_detail or "")


def test_agent_env_must_map_names_to_strings(conn: psycopg.Connection) -> None:
    error = _refused(
        conn, "insert into ceaseless.agents (name, adapter, env) values ('e', 'noop', '{\"N\": 5}')"
    )
    assert error.diag.constraint_name == "env_is_object_of_strings"


def test_one_bad_row_in_a_bulk_insert_stores_nothing(conn: psycopg.Connection) -> None:
    make_agent(conn)
    _refused(
        conn,
        "insert into ceaseless.job (kind, agent, prompt) "
        "values ('task', 'noop', 'p'), ('nope', 'noop', 'p')",
    )
    assert conn.execute("select count(*) from ceaseless.job").fetchone() == (0,)
