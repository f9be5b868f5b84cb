"""Secrets stay secret: agents.env values, sink headers and URLs, webhook secrets.

Each test creates rows holding a distinct secret string, fails validation on
them and updates them, then searches everything a person or a log could read
afterwards: audit_log, NOTIFY payloads, every field of the errors, the server
log, and the CLI's output.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from listener.database.embedded import EmbeddedServer
from tests.e2e.support import run_cli
from tests.factories import make_agent, make_routine

API_KEY = "sk-ant-SEKRIT-api-key-0001"
BEARER = "Bearer SEKRIT-bearer-0002"
HOOK_PATH = "SEKRIT-hook-path-0003"
WEBHOOK_SECRET = "SEKRIT-webhook-secret-0004"
SECRETS = [API_KEY, BEARER, HOOK_PATH, WEBHOOK_SECRET]


def _leaks(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


def _error_text(error: psycopg.Error) -> str:
    diag = error.diag
    return " ".join(
        str(part)
        for part in (
            error,
            diag.message_primary,
            diag.message_detail,
            diag.message_hint,
            diag.context,
            diag.internal_query,
        )
        if part
    )


@pytest.fixture
def refused(conn: psycopg.Connection) -> Callable[..., str]:
    """Run a statement that must fail; return every text of its error."""

    def run(query: str, params: Any = None) -> str:
        with pytest.raises(psycopg.Error) as error, conn.transaction():
            conn.execute(query, params)
        return _error_text(error.value)

    return run


@pytest.fixture
def server_log(embedded_home: Path | None) -> Iterator[Callable[[], str]]:
    """What the server wrote to its log during the test (embedded server only)."""
    home = embedded_home
    path: Path | None = EmbeddedServer(home).log_file if home else None
    start = path.stat().st_size if path and path.exists() else 0

    def read() -> str:
        if path is None or not path.exists():
            return ""
        with path.open("rb") as log:
            log.seek(start)
            return log.read().decode("utf-8", "replace")

    yield read


def _sinks() -> str:
    return json.dumps(
        {
            "default": {"type": "log"},
            "slack": {
                "type": "webhook",
                "url": f"https://hooks.example.com/services/{HOOK_PATH}",
                "headers": {"Authorization": BEARER},
            },
        }
    )


def test_audit_rows_and_notify_payloads_never_hold_a_secret(
    conn: psycopg.Connection, db_url: str
) -> None:
    with psycopg.connect(db_url, autocommit=True) as listening:
        listening.execute("listen ceaseless_config")
        make_agent(conn, "claude", "command", ["claude"], env={"ANTHROPIC_API_KEY": API_KEY})
        conn.execute(
            "update ceaseless.agents set env = env || %s, max_concurrent = 3 where name = 'claude'",
            (json.dumps({"OTHER": API_KEY}),),
        )
        conn.execute(
            "update ceaseless.settings set value = %s where key = 'notification_sinks'",
            (_sinks(),),
        )
        make_agent(conn)
        make_routine(conn, "hook", "webhook", {"path": "deploys", "secret": WEBHOOK_SECRET})
        conn.execute(
            "update ceaseless.routines set trigger_config = trigger_config || %s",
            (json.dumps({"secret": WEBHOOK_SECRET + "-rotated"}),),
        )
        conn.execute("delete from ceaseless.routines")
        conn.execute("delete from ceaseless.agents where name = 'claude'")
        conn.commit()
        payloads = [n.payload for n in listening.notifies(timeout=1, stop_after=50)]

    assert payloads and not _leaks(" ".join(payloads))
    audit = conn.execute("select string_agg(to_jsonb(a)::text, ' ') from ceaseless.audit_log a")
    text = audit.fetchone()[0]  # type: ignore[index]
    assert "ANTHROPIC_API_KEY" in text and "hooks.example.com" in text  # recorded, but hidden
    assert not _leaks(text), text


def test_constraint_errors_on_secret_bearing_rows_do_not_print_the_row(
    conn: psycopg.Connection, refused: Callable[..., str], server_log: Callable[[], str]
) -> None:
    env = json.dumps({"ANTHROPIC_API_KEY": API_KEY})
    insert_agent = (
        "insert into ceaseless.agents (name, adapter, argv, env, {column}) "
        "values ('claude', 'command', '{{claude}}', %s, %s)"
    )
    errors = [
        refused(insert_agent.format(column="max_concurrent"), (env, 0)),
        refused(insert_agent.format(column="timeout_secs"), (env, None)),
        refused(insert_agent.format(column="window_secs"), (env, -5)),
        refused(insert_agent.format(column="adapter"), (env, "no-such-adapter")),
        refused(
            "insert into ceaseless.agents (name, adapter, argv, env) "
            "values ('claude', 'command', '{}', %s)",
            (env,),
        ),
    ]
    make_agent(conn, "claude", "command", ["claude"], env={"ANTHROPIC_API_KEY": API_KEY})
    errors.append(refused("update ceaseless.agents set kill_grace_secs = -1 where name = 'claude'"))
    conn.execute(
        "update ceaseless.settings set value = %s where key = 'notification_sinks'", (_sinks(),)
    )
    errors.append(
        refused(
            "update ceaseless.settings set value = null, description = %s "
            "where key = 'notification_sinks'",
            ("x",),
        )
    )
    make_agent(conn)
    make_routine(conn, "hook", "webhook", {"path": "deploys", "secret": WEBHOOK_SECRET})
    errors += [
        refused("update ceaseless.routines set cooldown_secs = -1"),
        refused("update ceaseless.routines set max_concurrent = 0"),
        refused("update ceaseless.routines set dedup_window_secs = 0"),
        refused(
            "update ceaseless.routines set trigger_config = %s",
            (json.dumps({"path": "a/b", "secret": WEBHOOK_SECRET}),),
        ),
        refused(
            "update ceaseless.routines set trigger_config = %s",
            (json.dumps({"path": "deploys", "secret": "SEKRIT"}),),
        ),
    ]
    for error in errors:
        assert error and not _leaks(error), error
    assert "max_concurrent_positive" in errors[0] and "timeout_secs" in errors[1]
    assert not _leaks(server_log())


def test_the_cli_never_prints_a_secret(db_url: str, conn: psycopg.Connection) -> None:
    outputs = [
        run_cli(
            db_url,
            "agent",
            "add",
            "claude",
            "--adapter",
            "command",
            "--env",
            f"ANTHROPIC_API_KEY={API_KEY}",
            "--max-concurrent",
            "0",
            "--",
            "claude",
        ),
        run_cli(
            db_url,
            "agent",
            "add",
            "claude",
            "--adapter",
            "command",
            "--env",
            f"ANTHROPIC_API_KEY={API_KEY}",
            "--",
            "claude",
        ),
        run_cli(db_url, "agent", "list"),
        run_cli(
            db_url,
            "routine",
            "add",
            "hook",
            "--agent",
            "claude",
            "--prompt",
            "p",
            "--webhook",
            "deploys",
            "--secret",
            WEBHOOK_SECRET,
        ),
        run_cli(
            db_url,
            "routine",
            "add",
            "hook2",
            "--agent",
            "claude",
            "--prompt",
            "p",
            "--webhook",
            "deploys2",
            "--secret",
            "SEKRIT",
            "--cooldown",
            "-1",
        ),
        run_cli(db_url, "routine", "list"),
    ]
    assert outputs[1].returncode == 0, outputs[1].stderr
    assert outputs[0].returncode != 0 and outputs[4].returncode != 0
    for output in outputs:
        assert not _leaks(output.stdout + output.stderr), output


def test_failed_statements_with_literal_secrets_stay_out_of_the_server_log(
    conn: psycopg.Connection, db_url: str, server_log: Callable[[], str], embedded_home: Path | None
) -> None:
    # The way the docs use the API: literals in the SQL text, as psql sends them. A
    # statement that fails is logged with its ERROR; its text must not be (a server
    # logs it at log_min_error_statement, `error` by default).
    make_agent(conn)
    statements = [
        "insert into ceaseless.agents (name, adapter, argv, env, max_concurrent) values "
        f"""('claude', 'command', '{{claude}}', '{{"ANTHROPIC_API_KEY": "{API_KEY}"}}', 0)""",
        "insert into ceaseless.routines (name, trigger_type, trigger_config, action_type, "
        "action_config, agent) values ('hook', 'webhook', "
        f"""'{{"path": "a/b", "secret": "{WEBHOOK_SECRET}"}}', 'lightweight', """
        """'{"prompt": "p"}', 'noop')""",
        "update ceaseless.settings set value = "
        f"""'{{"slack": {{"type": "webhook", "url": "https://h.example/{HOOK_PATH}", """
        f""""headers": {{"Authorization": "{BEARER}"}}}}}}', description = 'x' || 1 / 0 """
        "where key = 'notification_sinks'",
        # A typo in the JSON: PostgreSQL's error quotes the document in its CONTEXT.
        "insert into ceaseless.agents (name, adapter, argv, env) values "
        f"""('claude', 'command', '{{claude}}', '{{"ANTHROPIC_API_KEY": "{API_KEY}}}')""",
    ]
    psql = shutil.which("psql")
    for sql in statements:
        with pytest.raises(psycopg.Error):
            conn.execute(sql)
        if psql:
            subprocess.run([psql, db_url, "-c", sql], capture_output=True, check=False)
    log = server_log()
    if embedded_home is not None:
        assert "ERROR:" in log  # the errors were logged: this is the right log
    assert not _leaks(log), log
