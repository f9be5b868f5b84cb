"""A reply and a raised ceiling from a job's dashboard page, in a real headless Chromium served
by a real listener: the fake claude that asked for help is resumed with `--resume=<its session>`
and the reply as its prompt (its own record of its argv and stdin), and the audit row names the
dashboard user beside the listener. A forged post of either does nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from uuid import UUID

import psycopg
from playwright.sync_api import Browser, expect

from tests.e2e.support import FAKES, ListenerProcess, wait_until
from tests.e2e.test_dashboard import (
    USER,
    _csrf,
    _get,
    _no_traceback,
    _page,
    _post,
    _served,
    _shot,
    browser,  # noqa: F401 (a fixture)
)
from tests.e2e.test_dashboard_actions import ACTOR, _click, _job_state, _not_reloaded
from tests.factories import make_agent, make_job


def _claude(conn: psycopg.Connection, log: Path, **env: str) -> None:
    make_agent(
        conn,
        "claude",
        "claude_code",
        [str(FAKES / "fake_claude")],
        env={"FAKE_CLAUDE_ARGV_LOG": str(log), **env},
    )
    conn.commit()


def _becomes(conn: psycopg.Connection, job: UUID, state: str) -> None:
    def reached() -> bool:
        conn.rollback()
        return _job_state(conn, job) == state

    wait_until(reached, 30, lambda: f"job {job} never became {state}")


def test_a_reply_from_the_job_page_resumes_the_agent_s_session_with_it(
    conn: psycopg.Connection,
    browser: Browser,  # noqa: F811
    start_listener: Callable[..., ListenerProcess],
    tmp_path: Path,
) -> None:
    log = tmp_path / "claude.jsonl"
    _claude(conn, log, FAKE_CLAUDE_MODE="needs_human_unless_resumed")
    with (
        _served(start_listener) as (base, listener),
        _page(browser, listener) as (page, console),
    ):
        job = make_job(conn, "claude", prompt="Migrate the database.")
        conn.commit()
        _becomes(conn, job, "blocked")
        page.goto(f"{base}/jobs/{job}")
        expect(page.locator("main .facts .state")).to_have_text("blocked")
        expect(page.locator("article.run .final-message")).to_contain_text("needs_human")
        page.locator("#reply textarea[name=reply]").fill("Use the staging database.")
        _shot(page, "job-reply")
        _click(page, "#reply", "reply")
        expect(page.locator("#notice")).to_have_text(
            f"replied by dashboard:{USER}: the job resumes its session with the reply"
        )
        _not_reloaded(page)
        _becomes(conn, job, "delivered")
        page.reload()
        expect(page.locator("article.run pre.reply")).to_have_text("Use the staging database.")
        assert console.errors == []

    asked, resumed = [json.loads(line) for line in log.read_text().splitlines()]
    assert f"--resume={asked['session_id']}" in resumed["argv"]
    assert resumed["stdin"] == "Use the staging database."
    role = conn.execute("select current_user").fetchone()[0]  # type: ignore[index]
    assert conn.execute(
        "select action, worker, detail ->> 'replied_by' from ceaseless.audit_log "
        "where entity_id = %s and action = 'reply'",
        (job,),
    ).fetchall() == [("reply", ACTOR, f"{role} {ACTOR}")]
    _no_traceback(listener)


def test_raising_the_ceiling_from_the_job_page_resumes_a_job_that_spent_it(
    conn: psycopg.Connection,
    browser: Browser,  # noqa: F811
    start_listener: Callable[..., ListenerProcess],
    tmp_path: Path,
) -> None:
    log = tmp_path / "claude.jsonl"
    _claude(conn, log, FAKE_CLAUDE_COST="0.10")
    with (
        _served(start_listener) as (base, listener),
        _page(browser, listener) as (page, console),
    ):
        job = make_job(conn, "claude", prompt="Long work.", max_cost_usd=0.05)
        conn.commit()
        _becomes(conn, job, "blocked")
        page.goto(f"{base}/jobs/{job}")
        expect(page.locator("#ceiling")).to_contain_text("0.05")
        # Below what was spent: raise_job_budget's own words.
        page.locator("#reply input[name=usd]").fill("0.07")
        _click(page, "#reply", "raise-budget")
        expect(page.locator("#notice")).to_contain_text(
            f"raise_job_budget.usd: must be above what job {job} has spent (0.100000 USD)"
        )
        page.locator("#reply input[name=usd]").fill("1")
        _click(page, "#reply", "raise-budget")
        expect(page.locator("#notice")).to_have_text(f"ceiling raised by dashboard:{USER}")
        _becomes(conn, job, "delivered")
        assert len(console.errors) == 1  # the 422 of the refused raise
    asked, resumed = [json.loads(line) for line in log.read_text().splitlines()]
    assert f"--resume={asked['session_id']}" in resumed["argv"]
    _no_traceback(listener)


def test_a_forged_reply_or_raise_does_nothing(
    conn: psycopg.Connection,
    start_listener: Callable[..., ListenerProcess],
    tmp_path: Path,
) -> None:
    log = tmp_path / "claude.jsonl"
    _claude(conn, log, FAKE_CLAUDE_MODE="needs_human_unless_resumed")
    with _served(start_listener) as (base, listener):
        job = make_job(conn, "claude", prompt="Migrate.", max_cost_usd=5)
        conn.commit()
        _becomes(conn, job, "blocked")
        auth = listener.auth()
        token = _csrf(_get(base, f"/jobs/{job}", auth)[1])
        for path, fields in (
            (f"/jobs/{job}/reply", {"reply": "forged"}),
            (f"/jobs/{job}/raise-budget", {"usd": "100"}),
        ):
            for form, headers in (
                (fields, {"Origin": base}),
                ({**fields, "csrf": token}, {"Origin": "http://evil.example"}),
            ):
                status, _ = _post(base, path, form, {**auth, **headers})
                assert status == 403, path
            status, _ = _post(base, path, {**fields, "csrf": token}, {"Origin": base})
            assert status == 401, path
        conn.rollback()
        assert _job_state(conn, job) == "blocked"
        assert conn.execute(
            "select reply, max_cost_usd from ceaseless.job where id = %s", (job,)
        ).fetchone() == (None, 5)
