"""A plain job that fails for good reaches a person: INSERT → listener → agent → Slack or Discord.

The agent is the fake that exits 3; the lane sends its notifications to a sink of the format
of a local stand-in for Slack's or Discord's incoming webhook (chat_stubs), which refuses
what they refuse.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import psycopg
import pytest

from tests.e2e import chat_stubs
from tests.e2e.support import FAKES, ListenerProcess, scalar, wait_until
from tests.factories import make_agent, make_job


@pytest.mark.parametrize("fmt", ["slack", "discord"])
def test_a_plain_job_that_fails_for_good_is_announced_in_the_chat(
    conn: psycopg.Connection,
    db_url: str,
    start_listener: Callable[..., ListenerProcess],
    fmt: str,
) -> None:
    judge = chat_stubs.slack if fmt == "slack" else chat_stubs.discord
    with chat_stubs.serve(judge) as stub:
        conn.execute(
            "update ceaseless.settings set value = %s where key = 'notification_sinks'",
            (
                json.dumps(
                    {
                        "default": {"type": "log"},
                        "chat": {"type": "webhook", "url": stub.url, "format": fmt},
                    }
                ),
            ),
        )
        make_agent(
            conn,
            "worker",
            "command",
            [str(FAKES / "fake_agent")],
            env={"FAKE_AGENT_MODE": "fail"},
            max_attempts=1,
            notify_channel="chat",
        )
        start_listener()
        job = make_job(conn, agent="worker", prompt="fix the build")

        wait_until(
            lambda: (
                scalar(
                    db_url,
                    "select status from ceaseless.notifications where source_id = %s",
                    (job,),
                )
                == "delivered"
            ),
            60,
            "the failure was never delivered",
        )

    assert scalar(db_url, "select state from ceaseless.job where id = %s", (job,)) == "failed"
    [document] = stub.accepted
    text = document["text"] if fmt == "slack" else document["content"]
    assert f"job {job} failed: agent worker" in text
    assert "fake_agent: simulated failure" in text
    assert f"select ceaseless.retry_job('{job}');" in text
