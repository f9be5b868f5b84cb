"""The poller against the fake forge and a real database: issues in, jobs out, failures recorded.

Each test runs poll rounds as the listener's loop does (due_repos, then each
due repo polled at once; tests/forge/loops_support.py), so what is asserted
is the database's decision and the forge requests the poller made.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time

import psycopg
import pytest

from tests.e2e.support import ROOT, run_cli
from tests.fakes.forge import FakeForge
from tests.forge.loops_support import (
    RUNNER_TOKEN,
    add_repo,
    in_about,
    jobs_of,
    make_due,
    poll_due,
    repo_row,
    set_tokens,
)

PLAN = "ceaseless:plan"
IMPLEMENT = "ceaseless:implement"


@pytest.fixture(autouse=True)
def _tokens(
    monkeypatch: pytest.MonkeyPatch, conn: psycopg.Connection, fake_forge: FakeForge
) -> None:
    set_tokens(monkeypatch, conn, fake_forge)


def decisions(report: object) -> list[tuple[int, str, str]]:
    return [(d.number, d.kind, d.decision) for d in report.decisions]  # type: ignore[attr-defined]


def test_labelled_issue_by_allowed_author_becomes_one_job_and_polling_again_adds_none(
    db_url: str, conn: psycopg.Connection, fake_forge: FakeForge
) -> None:
    repo_id = add_repo(conn, fake_forge)
    forge_repo = fake_forge.repo("acme", "widgets")
    fake_forge.add_issue(forge_repo, "Plan the flux", "body", labels=[PLAN], user="alice")

    first = poll_due(db_url)["acme/widgets"]
    assert first.error is None and not first.not_modified
    assert decisions(first) == [(1, "plan", "created")]
    assert first.decisions[0].job_id is not None
    assert jobs_of(conn, "widgets") == [(1, "plan", "pending")]
    row = repo_row(conn, repo_id)
    assert row["last_etag"] and row["last_error"] is None and row["last_polled_at"]
    lo, hi = in_about(60)
    assert lo <= row["next_poll_at"] <= hi

    # Nothing changed on the forge: a conditional request, a 304, no job.
    make_due(conn, repo_id)
    second = poll_due(db_url)["acme/widgets"]
    assert second.error is None and second.not_modified
    listed = fake_forge.requests_to("GET", "/repos/acme/widgets/issues")
    assert len(listed) == 2
    assert listed[0].authorization == f"Bearer {RUNNER_TOKEN}"
    assert jobs_of(conn, "widgets") == [(1, "plan", "pending")]
    assert all(d.decision != "created" for d in second.decisions)

    # Another issue changes the listing (200, new ETag); the labelled one is unchanged.
    fake_forge.add_issue(forge_repo, "Just a question", user="alice")
    make_due(conn, repo_id)
    third = poll_due(db_url)["acme/widgets"]
    assert third.error is None and not third.not_modified
    assert (1, "plan", "live") in decisions(third)
    assert jobs_of(conn, "widgets") == [(1, "plan", "pending")]
    assert repo_row(conn, repo_id)["last_etag"] != row["last_etag"]


def test_unlabelled_and_unadmitted_issues_create_nothing(
    db_url: str, conn: psycopg.Connection, fake_forge: FakeForge
) -> None:
    add_repo(conn, fake_forge)
    forge_repo = fake_forge.repo("acme", "widgets")
    fake_forge.add_issue(forge_repo, "No label", user="alice", labels=["bug"])
    fake_forge.add_issue(forge_repo, "Stranger's plan", labels=[PLAN], user="mallory")

    report = poll_due(db_url)["acme/widgets"]
    assert report.error is None
    assert decisions(report) == [(2, "plan", "not_admitted")]
    assert jobs_of(conn, "widgets") == []
    # The stranger's issue was looked up (who added the label?) and still refused.
    assert len(fake_forge.requests_to("GET", "/issues/2/events")) == 1
    assert fake_forge.requests_to("GET", "/issues/1/events") == []


@pytest.mark.parametrize("forge", ["github", "gitea"])
def test_a_strangers_issue_labelled_by_an_allowed_author_is_admitted(
    db_url: str, conn: psycopg.Connection, fake_forge: FakeForge, forge: str
) -> None:
    add_repo(conn, fake_forge, forge=forge)
    forge_repo = fake_forge.repo("acme", "widgets")
    issue = fake_forge.add_issue(forge_repo, "Please implement", user="mallory")
    fake_forge.label_issue(forge_repo, issue, "bug", by="mallory")
    fake_forge.label_issue(forge_repo, issue, IMPLEMENT, by="alice")

    report = poll_due(db_url)["acme/widgets"]
    assert report.error is None, report.error
    assert decisions(report) == [(1, "implement", "created")]
    assert jobs_of(conn, "widgets") == [(1, "implement", "pending")]
    which = "/issues/1/timeline" if forge == "gitea" else "/issues/1/events"
    assert len(fake_forge.requests_to("GET", which)) == 1


def test_pagination_is_followed_across_three_pages(
    db_url: str, conn: psycopg.Connection, fake_forge: FakeForge
) -> None:
    add_repo(conn, fake_forge)
    forge_repo = fake_forge.repo("acme", "widgets")
    # The oldest issues come last (sort=updated, newest first): on page 3.
    fake_forge.add_issue(forge_repo, "Oldest, labelled", labels=[PLAN], user="alice")
    for n in range(240):
        fake_forge.add_issue(forge_repo, f"Noise {n}", user="alice")
    fake_forge.add_issue(forge_repo, "Newest, labelled", labels=[IMPLEMENT], user="alice")

    report = poll_due(db_url)["acme/widgets"]
    assert report.error is None
    assert sorted(decisions(report)) == [(1, "plan", "created"), (242, "implement", "created")]
    pages = fake_forge.requests_to("GET", "/repos/acme/widgets/issues")
    assert [r.query.get("page", ["1"])[0] for r in pages] == ["1", "2", "3"]


def test_a_rate_limited_repo_is_deferred_to_the_reset_while_another_polls(
    db_url: str, conn: psycopg.Connection, fake_forge: FakeForge
) -> None:
    limited = add_repo(conn, fake_forge, "limited")
    fine = add_repo(conn, fake_forge, "fine")
    reset = int(time.time()) + 900
    fake_forge.repo("acme", "limited").rate_limit = (403, reset, 900)
    fake_forge.add_issue(fake_forge.repo("acme", "fine"), "Plan", labels=[PLAN], user="alice")

    reports = poll_due(db_url)
    assert reports["acme/fine"].error is None
    assert jobs_of(conn, "fine") == [(1, "plan", "pending")]
    assert reports["acme/limited"].error is not None
    row = repo_row(conn, limited)
    assert row["last_error"].startswith("rate limited: ")
    assert abs(row["next_poll_at"].timestamp() - reset) <= 2
    assert repo_row(conn, fine)["last_error"] is None

    # Not due again before the reset, however often the loop asks.
    assert "acme/limited" not in poll_due(db_url)


def test_failing_and_hanging_repos_are_recorded_and_retried_and_others_still_poll(
    db_url: str, conn: psycopg.Connection, fake_forge: FakeForge
) -> None:
    ids = {name: add_repo(conn, fake_forge, name) for name in ("down", "hung", "garbled", "ok")}
    fake_forge.repo("acme", "down").fail = True
    fake_forge.repo("acme", "hung").hang = True
    fake_forge.repo("acme", "garbled").bad_json = True
    for name in ids:
        fake_forge.add_issue(fake_forge.repo("acme", name), "Plan", labels=[PLAN], user="alice")

    started = time.monotonic()
    reports = poll_due(db_url, timeout=2.0)
    assert time.monotonic() - started < 10
    assert reports["acme/ok"].error is None
    assert jobs_of(conn, "ok") == [(1, "plan", "pending")]
    errors = {name: repo_row(conn, ids[name])["last_error"] for name in ids}
    assert "HTTP 500" in errors["down"]
    assert errors["hung"] and ("2 s" in errors["hung"])
    assert "not JSON" in errors["garbled"]
    assert errors["ok"] is None
    for name in ("down", "hung", "garbled"):
        lo, hi = in_about(60)
        assert lo <= repo_row(conn, ids[name])["next_poll_at"] <= hi
        assert jobs_of(conn, name) == []

    # Later the forge is back: the retry succeeds and clears the error.
    fake_forge.release()
    for name in ("down", "hung", "garbled"):
        repo = fake_forge.repo("acme", name)
        repo.fail = repo.hang = repo.bad_json = False
    make_due(conn, *ids.values())
    again = poll_due(db_url, timeout=5.0)
    for name in ("down", "hung", "garbled"):
        assert again[f"acme/{name}"].error is None
        assert repo_row(conn, ids[name])["last_error"] is None
        assert jobs_of(conn, name) == [(1, "plan", "pending")]


def test_no_token_in_errors_or_log_lines(
    db_url: str,
    conn: psycopg.Connection,
    fake_forge: FakeForge,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ids = [add_repo(conn, fake_forge, "down"), add_repo(conn, fake_forge, "ok")]
    fake_forge.repo("acme", "down").fail = True
    fake_forge.add_issue(fake_forge.repo("acme", "ok"), "Plan", labels=[PLAN], user="alice")
    caplog.set_level(logging.DEBUG, logger="ceaseless")
    monkeypatch.setattr(logging.getLogger("ceaseless"), "propagate", True)
    poll_due(db_url)
    events = [r.getMessage() for r in caplog.records]
    assert "forge.poll_failed" in events and "forge.polled" in events
    text = caplog.text + repr([getattr(r, "fields", {}) for r in caplog.records])
    assert RUNNER_TOKEN not in text
    for repo_id in ids:
        assert RUNNER_TOKEN not in str(repo_row(conn, repo_id))


def _cli(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(db_url, "repo", *args)


def test_repo_poll_polls_now_and_prints_the_decisions(
    db_url: str, conn: psycopg.Connection, fake_forge: FakeForge
) -> None:
    repo_id = add_repo(conn, fake_forge)
    # Not due for an hour: `repo poll` polls anyway, because it was asked.
    conn.execute(
        "update ceaseless.tracked_repo set next_poll_at = now() + interval '1 hour' where id = %s",
        (repo_id,),
    )
    forge_repo = fake_forge.repo("acme", "widgets")
    fake_forge.add_issue(forge_repo, "Plan", labels=[PLAN], user="alice")
    fake_forge.add_issue(forge_repo, "Stranger", labels=[PLAN], user="mallory")

    result = _cli(db_url, "poll", "acme/widgets")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "acme/widgets: 2 labelled issue(s)"
    assert lines[1].split() == ["issue", "kind", "decision", "job"]
    job = conn.execute("select id from ceaseless.job where number = 1").fetchone()
    assert job is not None
    assert f"1      plan  created       {job[0]}" in result.stdout
    assert "2      plan  not_admitted" in result.stdout
    assert lines[-1].startswith("next poll: ")
    assert RUNNER_TOKEN not in result.stdout + result.stderr

    # For scripts: one JSON document (the listing is unchanged now: a 304).
    as_json = _cli(db_url, "poll", "acme/widgets", "--output", "json")
    assert as_json.returncode == 0, as_json.stderr
    document = json.loads(as_json.stdout)
    assert document["poll"]["repo"] == "acme/widgets" and document["poll"]["not_modified"]
    assert {(d["issue"], d["decision"]) for d in document["decisions"]} == {
        (1, "live"),
        (2, "not_admitted"),
    }

    # A failing forge: exit 1, one line naming the call, the error on the repo row.
    forge_repo.fail = True
    failed = _cli(db_url, "poll", str(repo_id))
    assert failed.returncode == 1
    assert failed.stderr.startswith("error: acme/widgets: GET ") and "HTTP 500" in failed.stderr
    assert "Traceback" not in failed.stderr
    assert "HTTP 500" in repo_row(conn, repo_id)["last_error"]


def test_repo_poll_help_explains_the_decisions() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "listener", "repo", "poll", "--help"],
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    for word in ("created", "not_admitted", "cooldown", "quiet window", "--timeout"):
        assert word in result.stdout
