"""The dashboard's actions in a real headless Chromium, served by a real listener.

Each button (cancel and retry a job, run a routine or a loop now, enable and disable
them, pause and resume a lane) is clicked; the page shows what changed without a
reload, the database's refusals as it phrased them, and an audit row names the
dashboard user beside the listener. A forged post of each does nothing. Also: a
routine's own page (its runs with replies, what needs attention, skips by reason, the
last error, the next fires), times in the viewer's zone, a job's attempts that agree
with its runs, and a run's page that follows its stream to the end.

With CEASELESS_DASHBOARD_SCREENSHOTS=DIR the tests save screenshots of the pages they
change there (docs/dashboard/ holds the ones in the docs).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import psycopg
from playwright.sync_api import Browser, Page, expect

from tests.e2e.support import ListenerProcess, wait_until
from tests.e2e.test_dashboard import (
    USER,
    _awaiting,
    _csrf,
    _gated_run,
    _get,
    _no_traceback,
    _page,
    _post,
    _served,
    _shot,
    browser,  # noqa: F401 (a fixture)
    echo,  # noqa: F401 (a fixture)
)
from tests.factories import claim_started, finish, make_agent, make_job, make_routine
from tests.sql.loops import make_loop
from tests.sql.topology import graph, node, run_row

# What the dashboard's audit rows carry beside the listener's role: the
# listener's worker id (the fixture's first) and the dashboard user.
ACTOR = f"listener-1 dashboard:{USER}"


def _audited(conn: psycopg.Connection, entity: str, key: object, **where: str) -> list[Any]:
    """The audit rows of an entity (by id, or by key for a lane) written by the dashboard."""
    column = "entity_key" if entity == "lane" else "entity_id"
    extra = "".join(f" and {name} = %({name})s" for name in where)
    return conn.execute(
        f"select action, new_state from ceaseless.audit_log where entity = %(entity)s "
        f"and {column} = %(key)s and worker = %(worker)s{extra} order by id",
        {"entity": entity, "key": key, "worker": ACTOR, **where},
    ).fetchall()


def _job_state(conn: psycopg.Connection, job: UUID) -> str:
    return conn.execute("select state from ceaseless.job where id = %s", (job,)).fetchone()[0]


def _click(page: Page, scope: str, button: str) -> None:
    page.evaluate("window.__notReloaded = true")
    page.locator(scope).locator(f"button.{button}").click()
    # The page is busy until the action's answer is shown and the page re-rendered in place
    # (dashboard.js): what is typed next goes into the fresh form, as a person's would.
    expect(page.locator("body")).not_to_have_attribute("aria-busy", "true", timeout=30_000)


def _not_reloaded(page: Page) -> None:
    assert page.evaluate("window.__notReloaded") is True


def _only_refusals(errors: list[str], *statuses: int) -> None:
    """Chromium logs every answer of 400 and more as a console error: the refusals the test
    provoked must be all there is, one line each."""
    refused = [
        e for e in errors if e.startswith("Failed to load resource: the server responded with")
    ]
    assert len(refused) == len(errors), errors
    assert [int(re.findall(r"status of (\d+)", e)[0]) for e in refused] == list(statuses)


def test_cancel_and_retry_a_job_from_its_page(
    conn: psycopg.Connection,
    browser: Browser,  # noqa: F811
    start_listener: Callable[..., ListenerProcess],
) -> None:
    # A lane nobody claims from: the job stays where the buttons put it.
    make_agent(conn, "claude", "command", ["cat"], enabled=False)
    job = make_job(conn, "claude", prompt="Rewrite the flaky retry test.")
    with (
        _served(start_listener) as (base, listener),
        _page(browser, listener) as (page, console),
    ):
        page.goto(f"{base}/jobs/{job}")
        expect(page.locator("main .facts")).to_contain_text("pending")
        _click(page, "#actions", "cancel")
        expect(page.locator("#notice")).to_have_text(f"cancelled by dashboard:{USER}")
        expect(page.locator("main .facts .state")).to_have_text("cancelled")
        _not_reloaded(page)
        # Cancelling again: cancel_job's own words.
        _click(page, "#actions", "cancel")
        expect(page.locator("#notice")).to_contain_text(
            f"cancel_job: job {job} is already cancelled"
        )
        expect(page.locator("#notice")).to_have_class("error")
        _click(page, "#actions", "retry")
        expect(page.locator("#notice")).to_have_text(f"retried by dashboard:{USER}")
        expect(page.locator("main .facts .state")).to_have_text("pending")
        _not_reloaded(page)
        _shot(page, "job-actions")
        _only_refusals(console.errors, 409)
    assert _job_state(conn, job) == "pending"
    assert _audited(conn, "job", job, action="state") == [
        ("state", "cancelled"),
        ("state", "pending"),
    ]
    _no_traceback(listener)


def test_run_disable_and_enable_a_routine_from_the_routines_page(
    conn: psycopg.Connection,
    echo: str,  # noqa: F811
    browser: Browser,  # noqa: F811
    start_listener: Callable[..., ListenerProcess],
) -> None:
    routine = make_routine(conn, "disk-check", agent="echo")
    with (
        _served(start_listener) as (base, listener),
        _page(browser, listener) as (page, console),
    ):
        page.goto(f"{base}/routines")
        row = 'tr[data-routine="disk-check"]'
        _click(page, row, "run")
        expect(page.locator("#notice")).to_have_text(f"fired by dashboard:{USER}: running")
        expect(page.locator(row)).to_contain_text("running")
        _click(page, row, "disable")
        expect(page.locator("#notice")).to_have_text(f"disabled by dashboard:{USER}")
        expect(page.locator(f"{row} td").nth(1)).to_have_text("no")
        expect(page.locator(row).locator("button.enable")).to_have_count(1)
        # A disabled routine's fire is refused by SQL, and says so.
        _click(page, row, "run")
        expect(page.locator("#notice")).to_have_text(
            f"fired by dashboard:{USER}: skipped (disabled)"
        )
        _click(page, row, "enable")
        expect(page.locator("#notice")).to_have_text(f"enabled by dashboard:{USER}")
        expect(page.locator(f"{row} td").nth(1)).to_have_text("yes")
        _not_reloaded(page)
        assert console.errors == []
    assert _audited(conn, "routine", routine) == [("update", "disabled"), ("update", "enabled")]
    fired = conn.execute(
        "select id, status from ceaseless.routine_runs where routine_id = %s order by started_at",
        (routine,),
    ).fetchall()
    assert [status for _, status in fired][1:] == ["skipped"]
    for run_id, _ in fired:
        assert _audited(conn, "routine_run", run_id, action="insert") != []
    _no_traceback(listener)


def test_run_disable_and_enable_a_loop_from_its_page(
    conn: psycopg.Connection,
    echo: str,  # noqa: F811
    browser: Browser,  # noqa: F811
    start_listener: Callable[..., ListenerProcess],
) -> None:
    loop = make_loop(
        conn,
        title="docs gardener",
        triggers={"on_completion": False},
        policy={"kind": "iters", "spec": {"n": 5}},
        g=graph([node("A", "echo")]),
    )
    with (
        _served(start_listener) as (base, listener),
        _page(browser, listener) as (page, console),
    ):
        page.goto(f"{base}/loops/{loop}")
        _click(page, "#actions", "run")
        expect(page.locator("#notice")).to_contain_text(f"fired by dashboard:{USER}: ")
        expect(page.locator("#chain li[data-run]")).to_have_count(1)
        expect(page.locator("#chain li[data-run]").first).to_contain_text("#1")
        _click(page, "#actions", "disable")
        expect(page.locator("#notice")).to_have_text(f"disabled by dashboard:{USER}")
        expect(page.locator("main .facts dd").first).to_have_text("no")
        _click(page, "#actions", "enable")
        expect(page.locator("#notice")).to_have_text(f"enabled by dashboard:{USER}")
        expect(page.locator("main .facts dd").first).to_have_text("yes")
        _not_reloaded(page)
        # From the list too.
        page.goto(f"{base}/loops")
        page.evaluate("window.__notReloaded = true")
        page.locator(f'tr[data-loop="{loop}"] button.disable').click()
        expect(page.locator(f'tr[data-loop="{loop}"] td').nth(2)).to_have_text("no")
        _not_reloaded(page)
        assert console.errors == []
    run = conn.execute(
        "select id from ceaseless.topology_runs where loop_id = %s", (loop,)
    ).fetchone()[0]
    assert _audited(conn, "topology_run", run, action="insert") != []
    assert [state for _, state in _audited(conn, "loop", loop)] == [
        "disabled",
        "enabled",
        "disabled",
    ]
    _no_traceback(listener)


def test_pause_and_resume_a_lane_from_the_lanes_page(
    conn: psycopg.Connection,
    echo: str,  # noqa: F811
    browser: Browser,  # noqa: F811
    start_listener: Callable[..., ListenerProcess],
) -> None:
    with (
        _served(start_listener) as (base, listener),
        _page(browser, listener) as (page, console),
    ):
        page.goto(f"{base}/lanes")
        row = page.locator('tr[data-lane="echo"]')
        page.evaluate("window.__notReloaded = true")
        # SQL refuses an end that is not in the future, in its words.
        row.locator('input[name="reason"]').fill("provider incident")
        row.locator('input[name="minutes"]').fill("0")
        row.locator("button.pause").click()
        expect(page.locator("#notice")).to_contain_text(
            "lane_pauses.paused_until: must be after now"
        )
        # The page re-renders after an action: type into the fresh form, not the one it replaces.
        expect(page.locator("body")).not_to_have_attribute("aria-busy", "true")
        row.locator('input[name="reason"]').fill("provider incident")
        row.locator('input[name="minutes"]').fill("45")
        row.locator("button.pause").click()
        expect(page.locator("#notice")).to_contain_text(f"paused by dashboard:{USER} until ")
        expect(row).to_contain_text("provider incident")
        expect(row).to_have_class("held")
        _shot(page, "lanes-paused")
        # Jobs wait while it is paused, and run once it is resumed.
        job = make_job(conn, "echo", prompt="waits for the lane")
        row.locator("button.resume").click()
        expect(page.locator("#notice")).to_have_text(f"resumed by dashboard:{USER}")
        expect(row.locator("button.pause")).to_have_count(1)
        expect(row).not_to_contain_text("provider incident")
        _not_reloaded(page)
        wait_until(lambda: _job_state(conn, job) == "delivered", 30)
        _only_refusals(console.errors, 422)
    assert _audited(conn, "lane", "echo") == [("pause", "paused"), ("resume", "open")]
    paused = conn.execute(
        "select detail ->> 'reason' from ceaseless.audit_log where entity = 'lane' "
        "and action = 'pause'"
    ).fetchall()
    assert paused == [("provider incident",)]
    _no_traceback(listener)


def test_a_forged_post_of_any_action_does_nothing(
    conn: psycopg.Connection,
    echo: str,  # noqa: F811
    start_listener: Callable[..., ListenerProcess],
) -> None:
    make_agent(conn, "claude", "command", ["cat"], enabled=False)
    job = make_job(conn, "claude")
    routine = make_routine(conn, "nightly", agent="echo")
    loop = make_loop(conn, g=graph([node("A", "echo")]), triggers={"on_completion": False})
    with _served(start_listener) as (base, listener):
        auth = listener.auth()
        token = _csrf(_get(base, "/lanes", auth)[1])
        paths = [
            (f"/jobs/{job}/cancel", {}),
            (f"/jobs/{job}/retry", {}),
            (f"/routines/{routine}/run", {}),
            (f"/routines/{routine}/disable", {}),
            (f"/loops/{loop}/run", {}),
            (f"/loops/{loop}/disable", {}),
            ("/lanes/echo/pause", {"reason": "forged", "minutes": "60"}),
            ("/lanes/echo/resume", {}),
        ]
        for path, fields in paths:
            for form, headers in (
                (fields, {"Origin": base}),  # no CSRF token: another site's form
                ({**fields, "csrf": "x" * len(token)}, {"Origin": base}),
                ({**fields, "csrf": token}, {"Origin": "http://evil.example"}),
                ({**fields, "csrf": token}, {}),
                ({**fields, "csrf": token}, {"Origin": base, "Sec-Fetch-Site": "cross-site"}),
            ):
                status, text = _post(base, path, form, {**auth, **headers})
                assert status == 403, (path, headers, status, text)
            # Without the listener's token, even the right form and Origin are refused.
            status, _ = _post(base, path, {**fields, "csrf": token}, {"Origin": base})
            assert status == 401, path
        assert _job_state(conn, job) == "pending"
        assert conn.execute(
            "select count(*) from ceaseless.routine_runs where routine_id = %s", (routine,)
        ).fetchone() == (0,)
        assert conn.execute(
            "select count(*) from ceaseless.topology_runs where loop_id = %s", (loop,)
        ).fetchone() == (0,)
        assert conn.execute(
            "select r.enabled and l.enabled from ceaseless.routines r, ceaseless.loops l "
            "where r.id = %s and l.id = %s",
            (routine, loop),
        ).fetchone() == (True,)
        assert conn.execute("select count(*) from ceaseless.lane_pauses").fetchone() == (0,)
        assert conn.execute(
            "select count(*) from ceaseless.audit_log where worker like '%%dashboard:%%'"
        ).fetchone() == (0,)
        # The same post from the dashboard's own page does it; a plain form is sent back.
        status, _ = _post(
            base,
            f"/jobs/{job}/cancel",
            {"csrf": token, "next": f"/jobs/{job}"},
            {**auth, "Origin": base},
        )
        assert status == 303
        assert _job_state(conn, job) == "cancelled"
    _no_traceback(listener)


def _routine_with_history(conn: psycopg.Connection) -> UUID:
    """A routine with an attention run (its reply), a failed run and skips, made before any
    listener runs, through the SQL API and the factories (no listener claims them)."""
    make_agent(conn, "checker", "command", ["cat"])
    routine = make_routine(
        conn,
        "disk-check",
        "cron",
        {"schedule": "*/15 * * * *", "timezone": "Europe/Berlin"},
        agent="checker",
        max_concurrent=1,
    )
    replies = [("succeeded", {"final_message": "/var is 93% full: prune the build cache"})]
    replies.append(("failed", {"error": "exit status 2: df: /srv: No such file"}))
    for outcome, fields in replies:
        conn.execute("select ceaseless.run_routine(%s)", (routine,))
        # A second fire while the first runs: skipped for its max_concurrent.
        conn.execute("select ceaseless.run_routine(%s)", (routine,))
        started = claim_started(conn, p_agents=["checker"])
        for run in started.values():
            conn.execute(
                "update ceaseless.job set max_attempts = 1 where id = (select job_id "
                "from ceaseless.agent_run where id = %s)",
                (run,),
            )
            finish(conn, run, outcome, exit_status=0 if outcome == "succeeded" else 2, **fields)
    return routine


def test_a_routines_page_shows_its_runs_replies_attention_skips_last_error_and_next_fires(
    conn: psycopg.Connection,
    browser: Browser,  # noqa: F811
    start_listener: Callable[..., ListenerProcess],
) -> None:
    routine = _routine_with_history(conn)
    statuses = conn.execute(
        "select status from ceaseless.routine_runs where routine_id = %s order by started_at",
        (routine,),
    ).fetchall()
    assert sorted(s for (s,) in statuses) == ["attention", "failed", "skipped", "skipped"]
    with _served(start_listener) as (base, listener):
        # The listener computes the next fire of the cron routine.
        wait_until(
            lambda: conn.execute(
                "select next_fire_at is not null from ceaseless.routines where id = %s",
                (routine,),
            ).fetchone()[0],
            30,
        )
        with _page(browser, listener) as (page, console):
            page.goto(f"{base}/routines")
            row = page.locator('tr[data-routine="disk-check"]')
            # The routine's own last_error is NULL: the error is its failed run's.
            expect(row.locator("td.last-error")).to_contain_text("df: /srv: No such file")
            row.locator("a", has_text="disk-check").click()
            expect(page).to_have_url(f"{base}/routines/{routine}")
            main = page.locator("main")
            expect(main.locator("#attention")).to_contain_text(
                "/var is 93% full: prune the build cache"
            )
            expect(main.locator("#skips")).to_have_text("concurrency: 2")
            expect(main.locator("#last-error")).to_contain_text("df: /srv: No such file")
            expect(main.locator("#next-fires time")).to_have_count(5)
            runs = main.locator("#routine-runs tr[data-run]")
            expect(runs).to_have_count(4)
            expect(
                main.locator("#routine-runs td.reply").filter(has_text="93% full")
            ).to_have_count(1)
            # Every finished run has its duration.
            durations = main.locator("#routine-runs td.duration").all_inner_texts()
            assert [d for d in durations if re.fullmatch(r"\d+s", d)], durations
            _shot(page, "routine")
            assert console.errors == []
    _no_traceback(listener)


def test_times_are_shown_in_the_viewers_zone_with_utc_on_hover(
    conn: psycopg.Connection,
    browser: Browser,  # noqa: F811
    start_listener: Callable[..., ListenerProcess],
) -> None:
    make_agent(conn, "claude", "command", ["cat"], enabled=False)
    at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    job = make_job(conn, "claude", run_after=at)
    with _served(start_listener) as (base, listener):
        context = browser.new_context(timezone_id="Asia/Tokyo", locale="en-GB")
        page = context.new_page()
        try:
            page.goto(listener.events("http.listening")[0]["sign_in"])
            page.goto(f"{base}/jobs/{job}")
            shown = page.locator("main .facts time").first
            # 03:04:05 UTC is 12:04:05 in Tokyo.
            expect(shown).to_contain_text("12:04:05")
            expect(shown).to_contain_text("02/01/2030")
            expect(shown).to_have_attribute("title", "2030-01-02 03:04:05 UTC")
            expect(shown).to_have_attribute("datetime", "2030-01-02T03:04:05+00:00")
        finally:
            context.close()


def test_a_jobs_attempts_agree_with_the_runs_it_lists(
    conn: psycopg.Connection,
    browser: Browser,  # noqa: F811
    start_listener: Callable[..., ListenerProcess],
) -> None:
    make_agent(conn, "claude", "command", ["cat"])
    job = make_job(conn, "claude", prompt="needs a login")
    (run,) = claim_started(conn).values()
    state = finish(conn, run, "auth_failed", exit_status=1, error="Invalid API key · /login")
    assert state == "blocked"
    with (
        _served(start_listener) as (base, listener),
        _page(browser, listener) as (page, console),
    ):
        page.goto(f"{base}/jobs/{job}")
        expect(page.locator("main article.run")).to_have_count(1)
        expect(page.locator("main article.run h3")).to_contain_text("Attempt 1")
        # One run listed, one run counted: the refunded attempt is said, not hidden.
        expect(page.locator("#attempts")).to_contain_text("1 run · 0 counted")
        assert console.errors == []


def test_a_run_page_follows_its_stream_to_the_end_after_approve_and_says_what_reject_did(
    conn: psycopg.Connection,
    echo: str,  # noqa: F811
    browser: Browser,  # noqa: F811
    start_listener: Callable[..., ListenerProcess],
) -> None:
    with _served(start_listener) as (base, listener):
        run = _gated_run(conn)
        _awaiting(conn, run)
        with _page(browser, listener) as (page, console):
            page.goto(f"{base}/runs/{run}")
            expect(page.locator("#live")).to_have_text("live")
            expect(page.locator("#approvals-section")).to_be_visible()
            page.evaluate("window.__notReloaded = true")
            page.locator('#run-approvals .gate[data-node="review"] button.approve').click()
            expect(page.locator("#notice")).to_have_text(f"review: approved by dashboard:{USER}")
            expect(page.locator("#live")).to_have_text("finished: succeeded", timeout=30_000)
            review = page.locator('#nodes tr[data-node="review"]')
            expect(review).to_contain_text(f"approved by dashboard:{USER}")
            expect(review.locator("a[href^='/jobs/']")).to_have_count(1)
            expect(page.locator('#nodes tr[data-node="ship"] .cell-state')).to_have_text(
                "succeeded"
            )
            expect(page.locator("#run-finished time")).to_have_count(1)
            expect(page.locator("#approvals-section")).to_be_hidden()
            _not_reloaded(page)
            _shot(page, "run-approved")
            # A reload shows the same, and no empty heading.
            page.reload()
            expect(page.locator("#approvals-section")).to_be_hidden()
            expect(page.locator("#run-finished time")).to_have_count(1)
            expect(page.locator('#nodes tr[data-node="review"]')).to_contain_text(
                f"approved by dashboard:{USER}"
            )
            # Reject on another run's page: the page says so, and the run fails.
            rejected = _gated_run(conn)
            _awaiting(conn, rejected)
            page.goto(f"{base}/runs/{rejected}")
            expect(page.locator("#live")).to_have_text("live")
            page.locator('#run-approvals .gate[data-node="review"] button.reject').click()
            expect(page.locator("#notice")).to_have_text(f"review: rejected by dashboard:{USER}")
            expect(page.locator("#run-status")).to_have_text("failed", timeout=30_000)
            expect(page.locator('#nodes tr[data-node="review"]')).to_contain_text(
                f"rejected by dashboard:{USER}"
            )
            expect(page.locator("#approvals-section")).to_be_hidden()
            assert console.errors == []
    assert run_row(conn, rejected)["status"] == "failed"
    approvals = conn.execute(
        "select a.topology_run_id, l.new_state from ceaseless.audit_log l "
        "join ceaseless.approvals a on a.id = l.entity_id "
        "where l.entity = 'approval' and l.worker = %s order by l.id",
        (ACTOR,),
    ).fetchall()
    assert approvals == [(run, "approved"), (rejected, "rejected")]
    _no_traceback(listener)
