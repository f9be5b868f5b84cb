"""Label mirroring against the fake forge: a job's state as a label, by the label identity only.

Jobs move through their states by the SQL API (claim_jobs, finish_runs), as a
listener moves them; the label rounds run as the listener's label loop does
(tests/forge/loops_support.py). The last test runs a real listener, whose label
loop follows the job's NOTIFY.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from tests.e2e.support import ListenerProcess, wait_until
from tests.factories import claim_started, finish
from tests.fakes.forge import FakeForge, Recorded
from tests.forge.loops_support import (
    LABEL_TOKEN,
    RUNNER_TOKEN,
    add_lanes,
    add_repo,
    labels_round,
    poll_due,
    set_tokens,
)

IMPLEMENT = "ceaseless:implement"


@pytest.fixture(autouse=True)
def _tokens(
    monkeypatch: pytest.MonkeyPatch, conn: psycopg.Connection, fake_forge: FakeForge
) -> None:
    set_tokens(monkeypatch, conn, fake_forge)


def label_calls(fake_forge: FakeForge) -> list[Recorded]:
    return [
        r
        for r in fake_forge.requests
        if "/labels" in r.path and r.method in ("POST", "PUT", "DELETE")
    ]


def new_jobs(
    db_url: str, conn: psycopg.Connection, fake_forge: FakeForge, forge: str, count: int
) -> list[uuid.UUID]:
    """`count` implement issues by an allowed author, polled into jobs (issue n → job n)."""
    add_repo(conn, fake_forge, forge=forge)
    for n in range(count):
        fake_forge.add_issue(
            fake_forge.repo("acme", "widgets"), f"Do {n}", labels=[IMPLEMENT], user="alice"
        )
    report = poll_due(db_url)["acme/widgets"]
    assert report.error is None, report.error
    by_number = {d.number: d.job_id for d in report.decisions}
    return [by_number[n + 1] for n in range(count)]  # type: ignore[misc]


def labels_of(fake_forge: FakeForge, number: int) -> list[str]:
    return list(fake_forge.repo("acme", "widgets").issues[number].labels)


def state(conn: psycopg.Connection, job_id: uuid.UUID) -> str:
    row = conn.execute("select state from ceaseless.job where id = %s", (job_id,)).fetchone()
    assert row is not None
    return row[0]


@pytest.mark.parametrize("forge", ["github", "gitea"])
def test_labels_follow_a_job_from_pending_through_running_to_delivered(
    db_url: str, conn: psycopg.Connection, fake_forge: FakeForge, forge: str
) -> None:
    (job_id,) = new_jobs(db_url, conn, fake_forge, forge, 1)

    assert labels_round(db_url) == 1
    assert labels_of(fake_forge, 1) == [IMPLEMENT, "ceaseless:pending"]
    assert labels_round(db_url) == 0  # mirrored: nothing due

    runs = claim_started(conn)
    assert state(conn, job_id) == "running"
    assert labels_round(db_url) == 1
    assert labels_of(fake_forge, 1) == [IMPLEMENT, "ceaseless:running"]

    pr = {
        "pr_forge": forge,
        "pr_owner": "acme",
        "pr_repo": "widgets",
        "pr_number": 7,
        "pr_head_branch": f"ceaseless/{job_id}",
        "pr_url": "https://github.com/acme/widgets/pull/7",
    }
    assert finish(conn, runs[job_id], "succeeded", final_message="PR opened.", **pr) == "delivered"
    assert labels_round(db_url) == 1
    assert labels_of(fake_forge, 1) == [IMPLEMENT, "ceaseless:delivered"]

    synced = conn.execute(
        "select labels_synced_at, labels_error from ceaseless.job where id = %s", (job_id,)
    ).fetchone()
    assert synced is not None and synced[0] is not None and synced[1] is None
    # Every label write was the label identity's; the runner only read.
    calls = label_calls(fake_forge)
    assert len(calls) >= 5  # 3 additions, 2 removals (Gitea also looks label ids up)
    scheme = "token" if forge == "gitea" else "Bearer"
    assert {c.authorization for c in calls} == {f"{scheme} {LABEL_TOKEN}"}
    label_lookups = [r for r in fake_forge.requests if r.path.endswith("/labels")]
    assert all(RUNNER_TOKEN not in (r.authorization or "") for r in label_lookups)
    # On the forge, the labels' history names the label identity.
    issue = fake_forge.repo("acme", "widgets").issues[1]
    mirrored = [
        e for e in issue.events if e["label"].startswith("ceaseless:") and e["label"] != IMPLEMENT
    ]
    assert mirrored and {e["actor"] for e in mirrored} == {"ceaseless-labels"}


def test_failed_and_blocked_jobs_are_labelled_so(
    db_url: str, conn: psycopg.Connection, fake_forge: FakeForge
) -> None:
    add_lanes(conn)
    conn.execute("update ceaseless.agents set max_attempts = 1 where name = 'claude_code'")
    failing, blocking = new_jobs(db_url, conn, fake_forge, "github", 2)
    assert labels_round(db_url) == 2

    runs = claim_started(conn)
    assert finish(conn, runs[failing], "succeeded", final_message="I opened a PR.") == "failed"
    human = '```ceaseless\n{"needs_human": "Which database?"}\n```'
    assert finish(conn, runs[blocking], "succeeded", final_message=human) == "blocked"

    assert labels_round(db_url) == 2
    assert labels_of(fake_forge, 1) == [IMPLEMENT, "ceaseless:failed"]
    assert labels_of(fake_forge, 2) == [IMPLEMENT, "ceaseless:blocked"]


def test_a_sync_failure_leaves_the_job_alone_and_is_retried(
    db_url: str, conn: psycopg.Connection, fake_forge: FakeForge
) -> None:
    (job_id,) = new_jobs(db_url, conn, fake_forge, "github", 1)
    before = conn.execute(
        "select state, updated_at, attempts from ceaseless.job where id = %s", (job_id,)
    ).fetchone()
    fake_forge.repo("acme", "widgets").fail = True

    assert labels_round(db_url) == 0
    row = conn.execute(
        "select state, updated_at, attempts, labels_error, labels_retry_at, labels_synced_at "
        "from ceaseless.job where id = %s",
        (job_id,),
    ).fetchone()
    assert row is not None
    assert row[:3] == before
    assert "HTTP 500" in row[3] and row[5] is None
    assert row[4] > datetime.now(UTC) + timedelta(seconds=30)
    assert labels_round(db_url) == 0  # not before its retry time

    fake_forge.repo("acme", "widgets").fail = False
    conn.execute(
        "update ceaseless.job set labels_retry_at = now() - interval '1 second' where id = %s",
        (job_id,),
    )
    assert labels_round(db_url) == 1
    assert labels_of(fake_forge, 1) == [IMPLEMENT, "ceaseless:pending"]
    row = conn.execute(
        "select state, labels_error, labels_synced_at from ceaseless.job where id = %s",
        (job_id,),
    ).fetchone()
    assert row is not None and row[0] == "pending" and row[1] is None and row[2] is not None


def test_without_a_label_token_nothing_is_written_with_the_runners(
    db_url: str, conn: psycopg.Connection, fake_forge: FakeForge, monkeypatch: pytest.MonkeyPatch
) -> None:
    (job_id,) = new_jobs(db_url, conn, fake_forge, "github", 1)
    monkeypatch.delenv("CEASELESS_GITHUB_LABEL_TOKEN")

    assert labels_round(db_url) == 0
    assert label_calls(fake_forge) == []
    error = conn.execute(
        "select labels_error from ceaseless.job where id = %s", (job_id,)
    ).fetchone()
    assert error is not None and "no label token" in error[0]


def test_a_listener_polls_and_mirrors_labels_as_the_job_moves(
    db_url: str, conn: psycopg.Connection, fake_forge: FakeForge
) -> None:
    add_repo(conn, fake_forge)
    fake_forge.add_issue(fake_forge.repo("acme", "widgets"), "Do", labels=[IMPLEMENT], user="alice")

    # A tick far longer than the test: what follows each move is the NOTIFY
    # of the job's change. --kind task: the job is moved here, not run there.
    listener = ListenerProcess(db_url, "--poll-interval", "60", "--kind", "task").ready()

    def shows(label: str) -> None:
        wait_until(
            lambda: label in labels_of(fake_forge, 1),
            15,
            lambda: json.dumps(listener.lines[-20:], default=str),
        )

    try:
        shows("ceaseless:pending")
        # Recorded too: until then the mirror holds the job's row a moment,
        # and a claim (SKIP LOCKED) would pass it by.
        listener.wait_for_event("forge.label_synced")
        (job_id,) = [row[0] for row in conn.execute("select id from ceaseless.job").fetchall()]
        runs = claim_started(conn)
        assert list(runs) == [job_id]
        shows("ceaseless:running")
        listener.wait_for_event("forge.label_synced", count=2)
        pr = {
            "pr_forge": "github",
            "pr_owner": "acme",
            "pr_repo": "widgets",
            "pr_number": 9,
            "pr_head_branch": f"ceaseless/{job_id}",
            "pr_url": "https://github.com/acme/widgets/pull/9",
        }
        assert finish(conn, runs[job_id], "succeeded", final_message="PR.", **pr) == "delivered"
        shows("ceaseless:delivered")
        listener.wait_for_event("forge.label_synced", count=3)
    finally:
        assert listener.stop() == 0
    assert labels_of(fake_forge, 1) == [IMPLEMENT, "ceaseless:delivered"]
    assert len(listener.events("forge.polled")) == 1
    synced = [line["label"] for line in listener.events("forge.label_synced")]
    assert synced == ["ceaseless:pending", "ceaseless:running", "ceaseless:delivered"]
    assert {c.authorization for c in label_calls(fake_forge)} == {f"Bearer {LABEL_TOKEN}"}
    assert not any(RUNNER_TOKEN in json.dumps(line) for line in listener.lines)
