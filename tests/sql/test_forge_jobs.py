"""The forge lane's rules in SQL: issues into jobs (labels, admission, one live job per issue,
once per kind, the discover cooldown, routing), the verdict on a forge run (pull request, a
human, a plan's children), child issues into implement jobs, and the label mirror's queue."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.factories import claim_started, finish, make_agent
from tests.sql.plans import explained, nodes
from tests.sql.test_tracked_repo import make_repo

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def issue(number: int, *labels: str, author: str = "alice", title: str = "") -> dict[str, Any]:
    return {
        "number": number,
        "title": title or f"issue {number}",
        "author": author,
        "labels": list(labels),
        "html_url": f"https://github.com/o/r/issues/{number}",
    }


@pytest.fixture
def lanes(conn: psycopg.Connection) -> None:
    make_agent(conn, "claude_code", "noop", max_attempts=2)
    make_agent(conn, "opencode", "noop", max_attempts=2)


@pytest.fixture
def repo(conn: psycopg.Connection, lanes: None) -> uuid.UUID:
    return make_repo(conn, allowed_authors=["alice", "Bob"], tracking_issue=1)


def ingest(
    conn: psycopg.Connection, repo_id: uuid.UUID, issues: list[dict] | None, now: datetime = T0
) -> dict[int, tuple[str, str, uuid.UUID | None]]:
    rows = conn.execute(
        "select number, kind, decision, job_id from ceaseless.ingest_issues(%s, %s, %s)",
        (repo_id, None if issues is None else json.dumps(issues), now),
    ).fetchall()
    return {n: (kind, decision, job) for n, kind, decision, job in rows}


def job(conn: psycopg.Connection, job_id: uuid.UUID) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("select * from ceaseless.job where id = %s", (job_id,)).fetchone()
    assert row is not None
    return row


def run_job(
    conn: psycopg.Connection, job_id: uuid.UUID, outcome: str = "succeeded", **fields: Any
) -> str:
    """Claim the job (it must be the only one due) and finish its run as listener w1."""
    conn.execute(
        "update ceaseless.job set run_after = now() - interval '1 second' where id = %s", (job_id,)
    )
    runs = claim_started(conn, limit=100)
    assert job_id in runs, runs
    return finish(conn, runs[job_id], outcome, **fields)


def block(document: Any) -> str:
    return f"Done.\n\n```ceaseless\n{json.dumps(document)}\n```\n"


# -- intake --------------------------------------------------------------------------------------


def test_labelled_issues_become_one_job_each_with_their_kind_lane_and_payload(
    conn: psycopg.Connection, repo: uuid.UUID
) -> None:
    decided = ingest(
        conn,
        repo,
        [
            issue(1, "ceaseless:discover"),
            issue(2, "ceaseless:plan", "bug"),
            issue(3, "ceaseless:implement", author="BOB"),
            issue(4, "bug"),
        ],
    )
    assert {n: d[:2] for n, d in decided.items()} == {
        1: ("discover", "created"),
        2: ("plan", "created"),
        3: ("implement", "created"),
    }
    implement = job(conn, decided[3][2])  # type: ignore[arg-type]
    assert implement["agent"] == "claude_code" and implement["parent_job_id"] is None
    assert (implement["forge"], implement["number"], implement["state"]) == ("github", 3, "pending")
    forge = implement["payload"]["forge"]
    assert forge["branch"] == f"ceaseless/{implement['id']}"
    assert forge["default_branch"] == "main" and forge["title"] == "issue 3"
    assert "Implement issue #3" in implement["prompt"]
    assert job(conn, decided[1][2])["agent"] == "claude_code"  # type: ignore[arg-type]


def test_polling_again_creates_nothing_whether_the_listing_changed_or_not(
    conn: psycopg.Connection, repo: uuid.UUID
) -> None:
    listing = [issue(2, "ceaseless:plan")]
    first = ingest(conn, repo, listing)
    assert first[2][1] == "created"
    assert ingest(conn, repo, None)[2][1] == "live"  # a 304: the cached listing stands
    assert ingest(conn, repo, listing)[2][1] == "live"
    run_job(conn, first[2][2], final_message=block({"children": []}))  # type: ignore[arg-type]
    assert ingest(conn, repo, listing)[2][1] == "done"
    assert ingest(conn, repo, None)[2][1] == "done"
    (count,) = conn.execute("select count(*) from ceaseless.job").fetchone()  # type: ignore[misc]
    assert count == 1


def test_unadmitted_issues_get_nothing_until_an_allowed_author_labels_them(
    conn: psycopg.Connection, repo: uuid.UUID
) -> None:
    decided = ingest(conn, repo, [issue(5, "ceaseless:plan", author="mallory")])
    assert decided[5] == ("plan", "needs_labeller", None)
    # The forge says mallory labelled it herself: not admitted, and not asked again.
    noted = conn.execute(
        "select decision from ceaseless.note_labellers(%s, %s, %s)",
        (repo, json.dumps({"5": {"ceaseless:plan": "mallory"}}), T0),
    ).fetchall()
    assert noted == [("not_admitted",)]
    assert ingest(conn, repo, None)[5][1] == "not_admitted"
    # Relabelled by an allowed author (the labels changed, so who added them is asked again).
    ingest(conn, repo, [issue(5, "ceaseless:plan", "x", author="mallory")])
    noted = conn.execute(
        "select decision from ceaseless.note_labellers(%s, %s, %s)",
        (repo, json.dumps({"5": {"ceaseless:plan": "bob"}}), T0),
    ).fetchall()
    assert noted == [("created",)]


def test_events_that_name_nobody_leave_the_issue_unadmitted(
    conn: psycopg.Connection, repo: uuid.UUID
) -> None:
    ingest(conn, repo, [issue(6, "ceaseless:implement", author="mallory")])
    noted = conn.execute(
        "select decision from ceaseless.note_labellers(%s, '{\"6\": {}}', %s)", (repo, T0)
    ).fetchall()
    assert noted == [("not_admitted",)]


def test_an_empty_allowed_list_admits_nobody(conn: psycopg.Connection, lanes: None) -> None:
    repo_id = make_repo(conn)
    assert ingest(conn, repo_id, [issue(1, "ceaseless:plan")])[1][1] == "not_admitted"


def test_the_discover_label_counts_only_on_the_tracking_issue(
    conn: psycopg.Connection, repo: uuid.UUID
) -> None:
    decided = ingest(conn, repo, [issue(1, "ceaseless:discover"), issue(9, "ceaseless:discover")])
    assert set(decided) == {1}


def test_discover_recurs_after_its_cooldown_even_when_the_forge_answers_304(
    conn: psycopg.Connection, repo: uuid.UUID
) -> None:
    conn.execute(
        "update ceaseless.tracked_repo set discover_cooldown_secs = 600 where id = %s", (repo,)
    )
    first = ingest(conn, repo, [issue(1, "ceaseless:discover")])[1]
    conn.execute("update ceaseless.job set run_after = %s where id = %s", (T0, first[2]))
    runs = claim_started(conn, p_now=T0 + timedelta(seconds=1))
    conn.execute(
        "select * from ceaseless.finish_runs('w1', %s::jsonb, %s)",
        (
            json.dumps([{"run_id": str(runs[first[2]]), "outcome": "succeeded"}]),
            T0 + timedelta(seconds=5),
        ),  # type: ignore[index]
    )
    finished = T0 + timedelta(seconds=5)
    assert ingest(conn, repo, None, finished + timedelta(seconds=599))[1][1] == "cooldown"
    again = ingest(conn, repo, None, finished + timedelta(seconds=600))[1]
    assert again[1] == "created" and again[2] != first[2]


def test_a_missing_lane_is_named_not_crashed(conn: psycopg.Connection) -> None:
    repo_id = make_repo(conn, allowed_authors=["alice"])
    assert ingest(conn, repo_id, [issue(1, "ceaseless:plan")])[1][1] == "no_lane"


@pytest.mark.parametrize(
    ("listing", "field"),
    [
        ({"number": 1}, "ingest_issues.p_issues"),
        ([{"number": 0, "title": "t", "author": "a"}], "p_issues[1].number"),
        ([{"number": 1, "title": 5, "author": "a"}], "p_issues[1].title"),
        ([{"number": 1, "title": "t", "author": ""}], "p_issues[1].author"),
        (
            [issue(1), {"number": 2, "title": "t", "author": "a", "labels": "x"}],
            "p_issues[2].labels",
        ),
    ],
)
def test_a_listing_not_as_documented_is_refused_whole(
    conn: psycopg.Connection, repo: uuid.UUID, listing: Any, field: str
) -> None:
    ingest(conn, repo, [issue(3, "bug")])
    with pytest.raises(psycopg.errors.Error) as info:
        ingest(conn, repo, listing)
    assert info.value.sqlstate == "CE422" and field in str(info.value)
    (numbers,) = conn.execute(
        "select array_agg(number) from ceaseless.forge_issue where repo_id = %s", (repo,)
    ).fetchone()  # type: ignore[misc]
    assert numbers == [3]


def test_titles_from_strangers_are_bounded(conn: psycopg.Connection, repo: uuid.UUID) -> None:
    ingest(conn, repo, [issue(2, "ceaseless:plan", title="x" * 5000)])
    (title,) = conn.execute("select title from ceaseless.forge_issue").fetchone()  # type: ignore[misc]
    assert len(title) == 1000


def test_two_concurrent_ingests_create_one_job(db_url: str, repo: uuid.UUID) -> None:
    results: list[dict] = []
    barrier = threading.Barrier(4)

    def poll() -> None:
        with psycopg.connect(db_url, autocommit=True) as own:
            barrier.wait()
            results.append(
                ingest(own, repo, [issue(2, "ceaseless:plan"), issue(3, "ceaseless:implement")])
            )

    threads = [threading.Thread(target=poll) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    created = [d for r in results for d in r.values() if d[1] == "created"]
    assert len(created) == 2


# -- verdicts ------------------------------------------------------------------------------------


def test_an_implement_run_with_a_pull_request_is_delivered(
    conn: psycopg.Connection, repo: uuid.UUID
) -> None:
    job_id = ingest(conn, repo, [issue(3, "ceaseless:implement")])[3][2]
    branch = f"ceaseless/{job_id}"
    pr = {
        "pr_forge": "github", "pr_owner": "octo-org", "pr_repo": "r", "pr_number": 17,
        "pr_head_branch": branch, "pr_url": "https://github.com/octo-org/r/pull/17",
    }  # fmt: skip
    assert run_job(conn, job_id, final_message="Opened a PR.", **pr) == "delivered"  # type: ignore[arg-type]
    row = conn.execute(
        "select pr_forge, pr_owner, pr_repo, pr_number, pr_head_branch, pr_url "
        "from ceaseless.agent_run where job_id = %s",
        (job_id,),
    ).fetchone()
    assert row == tuple(pr.values())


def test_an_implement_run_without_a_pull_request_fails_with_the_reason_and_retries(
    conn: psycopg.Connection, repo: uuid.UUID
) -> None:
    job_id = ingest(conn, repo, [issue(3, "ceaseless:implement")])[3][2]
    assert run_job(conn, job_id, final_message="I opened PR #5, trust me.") == "pending"  # type: ignore[arg-type]
    row = job(conn, job_id)  # type: ignore[arg-type]
    assert f"no pull request with head branch ceaseless/{job_id}" in row["last_error"]
    (outcome,) = conn.execute(
        "select outcome from ceaseless.agent_run where job_id = %s", (job_id,)
    ).fetchone()  # type: ignore[misc]
    assert outcome == "failed"
    assert run_job(conn, job_id) == "failed"  # max_attempts 2


def test_a_run_that_needs_a_human_blocks_its_job_and_tells_someone(
    conn: psycopg.Connection, repo: uuid.UUID
) -> None:
    job_id = ingest(conn, repo, [issue(3, "ceaseless:implement")])[3][2]
    message = block({"needs_human": "Which database should the cache use?"})
    assert run_job(conn, job_id, final_message=message) == "blocked"  # type: ignore[arg-type]
    row = job(conn, job_id)  # type: ignore[arg-type]
    assert row["last_error"] == "needs a human: Which database should the cache use?"
    (outcome,) = conn.execute(
        "select outcome from ceaseless.agent_run where job_id = %s", (job_id,)
    ).fetchone()  # type: ignore[misc]
    assert outcome == "needs_human"
    subject, body = conn.execute(
        "select subject, body from ceaseless.notifications where source_id = %s", (job_id,)
    ).fetchone()  # type: ignore[misc]
    assert "asks for a human" in subject and "Which database" in body and "reply_job" in body


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("no block at all", "printed no children block"),
        ("```ceaseless\n{nope\n```", "not JSON"),
        (block([1, 2]), "must be a JSON object"),
        (block({"children": [], "shell": "rm -rf /"}), '"children" or "needs_human" only'),
        (block({"children": "two"}), "children must be a JSON array"),
        (block({"children": [{"title": ""}]}), "children[1].title must be 1 to 256"),
        (block({"children": [{"title": "a", "key": "a b"}]}), "children[1].key must be"),
        (
            block({"children": [{"title": "a", "key": "k"}, {"title": "b", "key": "k"}]}),
            "used twice",
        ),
        (block({"children": [{"title": "a", "extra": 1}]}), "key, title and body only"),
        (block({"children": [{"title": f"t{i}"} for i in range(21)]}), "at most 20"),
        (block({"needs_human": ""}), "needs_human must be a reason"),
    ],
)
def test_a_plan_with_a_bad_block_fails_naming_the_rule(
    conn: psycopg.Connection, repo: uuid.UUID, message: str, reason: str
) -> None:
    job_id = ingest(conn, repo, [issue(2, "ceaseless:plan")])[2][2]
    assert run_job(conn, job_id, final_message=message) == "pending"  # type: ignore[arg-type]
    assert reason in job(conn, job_id)["last_error"]  # type: ignore[arg-type]
    (children,) = conn.execute("select count(*) from ceaseless.forge_child_issue").fetchone()  # type: ignore[misc]
    assert children == 0


def test_the_last_block_counts(conn: psycopg.Connection, repo: uuid.UUID) -> None:
    job_id = ingest(conn, repo, [issue(2, "ceaseless:plan")])[2][2]
    message = block({"needs_human": "draft"}) + "On second thought:\n" + block({"children": []})
    assert run_job(conn, job_id, final_message=message) == "delivered"  # type: ignore[arg-type]


def test_non_forge_jobs_are_judged_only_on_a_question(
    conn: psycopg.Connection, lanes: None
) -> None:
    # Any job's agent may ask for a human; a children block means nothing
    # outside a plan run, and no pull request is looked for.
    from tests.factories import make_job

    asks = make_job(conn, agent="claude_code")
    assert run_job(conn, asks, final_message=block({"needs_human": "x"})) == "blocked"
    plans = make_job(conn, agent="claude_code")
    children = block({"children": [{"title": "a"}]})
    assert run_job(conn, plans, final_message=children) == "delivered"


# -- plan → children ----------------------------------------------------------------------------


def deliver_plan(conn: psycopg.Connection, repo: uuid.UUID, children: list[dict]) -> uuid.UUID:
    job_id = ingest(conn, repo, [issue(2, "ceaseless:plan")])[2][2]
    assert run_job(conn, job_id, final_message=block({"children": children})) == "delivered"  # type: ignore[arg-type]
    return job_id  # type: ignore[return-value]


CHILDREN = [
    {"key": "parser", "title": "Parse the config", "body": "Use tomllib."},
    {"title": "Document the config"},
]


def test_a_delivered_plan_queues_its_children_with_markers(
    conn: psycopg.Connection, repo: uuid.UUID
) -> None:
    plan = deliver_plan(conn, repo, CHILDREN)
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(
            "select * from ceaseless.child_issues_due(10, now() + interval '1 second') "
            "order by position"
        ).fetchall()
    assert [(r["key"], r["title"], r["parent_number"], r["attempts"]) for r in rows] == [
        ("parser", "Parse the config", 2, 1),
        (rows[1]["key"], "Document the config", 2, 1),
    ]
    assert rows[1]["key"].startswith("t-") and rows[0]["plan_job_id"] == plan
    assert rows[0]["marker"] == "<!-- ceaseless: child parser of #2 -->"
    # Handed out: nobody else gets them for 5 minutes.
    assert conn.execute("select * from ceaseless.child_issues_due(10)").fetchall() == []


def test_recorded_children_become_implement_jobs_on_the_opencode_lane(
    conn: psycopg.Connection, repo: uuid.UUID
) -> None:
    plan = deliver_plan(conn, repo, CHILDREN)
    children = conn.execute(
        "select id from ceaseless.child_issues_due(10, now() + interval '1 second') "
        "order by position"
    ).fetchall()
    jobs = []
    for (child_id,), number in zip(children, (40, 41), strict=True):
        url = f"https://github.com/o/r/issues/{number}"
        (job_id,) = conn.execute(
            "select ceaseless.record_child_issue(%s, %s, %s)", (child_id, number, url)
        ).fetchone()  # type: ignore[misc]
        again = conn.execute(
            "select ceaseless.record_child_issue(%s, %s, %s)", (child_id, number, url)
        ).fetchone()
        assert again == (job_id,)  # idempotent
        jobs.append(job(conn, job_id))
    assert [(j["kind"], j["agent"], j["parent_job_id"], j["number"]) for j in jobs] == [
        ("implement", "opencode", plan, 40),
        ("implement", "opencode", plan, 41),
    ]
    assert jobs[0]["payload"]["forge"]["title"] == "Parse the config"
    with pytest.raises(psycopg.errors.Error) as info:
        conn.execute("select ceaseless.record_child_issue(%s, 99, 'u')", (children[0][0],))
    assert info.value.sqlstate == "CE409"


def test_a_retried_plan_queues_no_duplicate_children(
    conn: psycopg.Connection, repo: uuid.UUID
) -> None:
    plan = deliver_plan(conn, repo, CHILDREN)
    conn.execute("select ceaseless.retry_job(%s)", (plan,))
    assert run_job(conn, plan, final_message=block({"children": CHILDREN})) == "delivered"
    # A new plan job for the same issue, as after an operator relabels it.
    second = conn.execute(
        "insert into ceaseless.job (forge, owner, repo, number, kind, agent, prompt) "
        "select forge, owner, repo, number, 'plan', 'claude_code', 'again' from ceaseless.job "
        "where id = %s returning id",
        (plan,),
    ).fetchone()[0]  # type: ignore[index]
    assert run_job(conn, second, final_message=block({"children": CHILDREN[::-1]})) == "delivered"
    (count,) = conn.execute("select count(*) from ceaseless.forge_child_issue").fetchone()  # type: ignore[misc]
    assert count == 2


def test_a_failed_creation_is_retried_later(conn: psycopg.Connection, repo: uuid.UUID) -> None:
    deliver_plan(conn, repo, CHILDREN[:1])
    now = datetime.now(UTC) + timedelta(seconds=1)
    (child_id,) = conn.execute(
        "select id from ceaseless.child_issues_due(1, %s)", (now,)
    ).fetchone()  # type: ignore[misc]
    (next_at,) = conn.execute(
        "select ceaseless.child_issue_failed(%s, 'HTTP 502 from POST /repos/o/r/issues', %s)",
        (child_id, now),
    ).fetchone()  # type: ignore[misc]
    assert next_at > now
    assert conn.execute("select id from ceaseless.child_issues_due(1, %s)", (now,)).fetchall() == []
    again = conn.execute(
        "select id, attempts from ceaseless.child_issues_due(1, %s)", (next_at,)
    ).fetchall()
    assert again == [(child_id, 2)]


def test_children_wait_in_the_governors_queue(conn: psycopg.Connection, repo: uuid.UUID) -> None:
    conn.execute("update ceaseless.agents set max_concurrent = 1 where name = 'opencode'")
    deliver_plan(conn, repo, CHILDREN)
    for (child_id,), number in zip(
        conn.execute(
            "select id from ceaseless.child_issues_due(10, now() + interval '1 second')"
        ).fetchall(),
        (40, 41),
        strict=True,
    ):
        conn.execute("select ceaseless.record_child_issue(%s, %s, 'u')", (child_id, number))
    conn.execute("update ceaseless.job set run_after = now() - interval '1 second'")
    started = claim_started(conn, limit=10)
    assert len(started) == 1
    with conn.cursor(row_factory=dict_row) as cur:
        usage = cur.execute(
            "select * from ceaseless.governor_usage where agent = 'opencode'"
        ).fetchone()
    assert usage is not None
    assert usage["live"] == 1 and usage["pending_due"] == 1 and usage["free_slots"] == 0, usage


# -- the label mirror's queue ---------------------------------------------------------------------


def test_labels_follow_the_state_and_a_failed_sync_changes_nothing(
    conn: psycopg.Connection, repo: uuid.UUID
) -> None:
    job_id = ingest(conn, repo, [issue(3, "ceaseless:implement")])[3][2]

    def due(now: datetime) -> list[tuple[Any, ...]]:
        return conn.execute(
            "select job_id, number, add_label, remove_label from ceaseless.labels_due(10, %s)",
            (now,),
        ).fetchall()

    now = datetime.now(UTC)
    assert due(now) == [(job_id, 3, "ceaseless:pending", None)]
    assert due(now) == []  # handed out for 60 s
    conn.execute("select ceaseless.labels_synced(%s, 'ceaseless:pending', null, %s)", (job_id, now))
    assert due(now + timedelta(minutes=5)) == []
    run_job(conn, job_id)  # no PR: failed once, back to pending
    assert due(now + timedelta(minutes=5)) == []  # pending again: already mirrored
    conn.execute("update ceaseless.job set run_after = now() - interval '1 second'")
    claim_started(conn)
    later = now + timedelta(minutes=5)
    assert due(later) == [(job_id, 3, "ceaseless:running", "ceaseless:pending")]
    conn.execute("select ceaseless.labels_sync_failed(%s, 'HTTP 500', %s)", (job_id, later))
    row = job(conn, job_id)  # type: ignore[arg-type]
    assert row["state"] == "running" and row["labels_error"] == "HTTP 500"
    assert due(later + timedelta(seconds=59)) == []
    assert len(due(later + timedelta(seconds=60))) == 1


def test_a_state_change_during_a_sync_stays_due(conn: psycopg.Connection, repo: uuid.UUID) -> None:
    job_id = ingest(conn, repo, [issue(3, "ceaseless:implement")])[3][2]
    now = datetime.now(UTC)
    conn.execute("select * from ceaseless.labels_due(10, %s)", (now,))
    conn.execute("update ceaseless.job set run_after = now() - interval '1 second'")
    claim_started(conn)  # moved to running while "pending" was being written
    conn.execute("select ceaseless.labels_synced(%s, 'ceaseless:pending', null, %s)", (job_id, now))
    rows = conn.execute("select add_label from ceaseless.labels_due(10, %s)", (now,)).fetchall()
    assert rows == [("ceaseless:running",)]


def test_the_index_predicate_agrees_with_the_state_label(conn: psycopg.Connection) -> None:
    (definition,) = conn.execute(
        "select pg_get_indexdef('ceaseless.job_labels_due_idx'::regclass)"
    ).fetchone()  # type: ignore[misc]
    for state in (
        "pending",
        "claimed",
        "running",
        "delivered",
        "blocked",
        "failed",
        "abandoned",
        "cancelled",
    ):
        (label,) = conn.execute("select ceaseless._forge_state_label(%s)", (state,)).fetchone()  # type: ignore[misc]
        if state in ("failed", "abandoned", "cancelled"):
            assert "ELSE 'ceaseless:failed'" in definition
        else:
            assert f"WHEN '{state}'::text THEN '{label}'::text" in definition


def test_labels_due_reads_only_the_jobs_out_of_date(
    conn: psycopg.Connection, repo: uuid.UUID
) -> None:
    conn.execute(
        "insert into ceaseless.job (forge, owner, repo, number, kind, agent, prompt, state, "
        "finished_at, labels_synced_label) "
        "select 'github', 'o', 'r', g, 'implement', 'claude_code', 'p', 'delivered', now(), "
        "'ceaseless:delivered' from generate_series(1, 5000) g"
    )
    ingest(conn, repo, [issue(3, "ceaseless:implement")])
    conn.execute("analyze ceaseless.job")
    with explained(conn) as plans:
        conn.execute("select * from ceaseless.labels_due(10)").fetchall()
    scans = [n for p in plans for n in nodes(p["Plan"]) if n.get("Relation Name") == "job"]
    assert scans and all(n["Node Type"] != "Seq Scan" for n in scans), scans
    assert any(n.get("Index Name") == "job_labels_due_idx" for n in scans), scans


# -- who sees what --------------------------------------------------------------------------------


def test_users_see_the_pipeline_of_their_own_repos_only(
    conn: psycopg.Connection, lanes: None, login_role: Callable[..., psycopg.Connection]
) -> None:
    alice = login_role("alice")
    bob = login_role("bob")
    (alice_name,) = alice.execute("select current_user").fetchone()  # type: ignore[misc]
    repo_id = make_repo(conn, allowed_authors=["alice"], user_id=alice_name)
    ingest(conn, repo_id, [issue(2, "ceaseless:plan")])
    assert [r[0] for r in alice.execute("select number from ceaseless.forge_pipeline")] == [2]
    assert [r[0] for r in alice.execute("select number from ceaseless.forge_issue")] == [2]
    assert bob.execute("select * from ceaseless.forge_pipeline").fetchall() == []
    assert bob.execute("select * from ceaseless.forge_issue").fetchall() == []
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.execute("select * from ceaseless.ingest_issues(%s, null)", (repo_id,))
