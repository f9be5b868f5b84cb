"""Tracked repos: validation at INSERT/UPDATE, the quiet window, the interval floor,
due_repos (SKIP LOCKED, quiet and disabled repos left out, its plan), finish_repo_poll,
repo_status and row-level security."""

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

from tests.sql.plans import explained, nodes

# Early in the morning of Tue 2026-12-01 in UTC.
T0 = datetime(2026, 12, 1, 5, 0, tzinfo=UTC)


def make_repo(conn: psycopg.Connection, *, as_user: bool = False, **columns: Any) -> uuid.UUID:
    """Insert a valid GitHub repo, due since long before T0, with `columns` overriding.

    as_user: insert only what a user role may write (the poll schedule is the listener's).
    """
    values: dict[str, Any] = {
        "forge": "github",
        "owner": "octo-org",
        "repo": f"repo-{uuid.uuid4().hex[:8]}",
        "clone_url": "https://github.com/octo-org/hello.git",
        "default_branch": "main",
        "interval_seconds": 300,
        **({} if as_user else {"next_poll_at": T0 - timedelta(days=1)}),
        **columns,
    }
    names = ", ".join(values)
    marks = ", ".join(["%s"] * len(values))
    params = [json.dumps(v) if isinstance(v, dict) else v for v in values.values()]
    row = conn.execute(
        f"insert into ceaseless.tracked_repo ({names}) values ({marks}) returning id",  # type: ignore[arg-type]
        params,
    ).fetchone()
    assert row is not None
    return row[0]


def repo_row(conn: psycopg.Connection, repo_id: uuid.UUID) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            "select * from ceaseless.tracked_repo where id = %s", (repo_id,)
        ).fetchone()
    assert row is not None
    return row


def _refused(conn: psycopg.Connection, **columns: Any) -> str:
    with pytest.raises(psycopg.errors.Error) as info:
        make_repo(conn, **columns)
    assert info.value.sqlstate == "CE422", info.value
    return info.value.diag.message_primary or ""


def test_a_valid_github_repo_gets_its_defaults(conn: psycopg.Connection) -> None:
    row = repo_row(conn, make_repo(conn))
    assert row["api_url"] == "https://api.github.com"
    assert (row["discover_label"], row["plan_label"], row["implement_label"]) == (
        "ceaseless:discover",
        "ceaseless:plan",
        "ceaseless:implement",
    )
    assert row["allowed_authors"] == [] and row["quiet_timezone"] == "UTC"
    assert (row["user_id"],) == conn.execute("select current_user").fetchone()
    assert row["last_error"] is None and row["enabled"] is True


@pytest.mark.parametrize(
    "columns",
    [
        {"forge": "gitea", "api_url": "https://gitea.example.com/api/v1", "owner": "my_org.x"},
        {"api_url": "https://ghe.example.com/api/v3"},
        {"clone_url": "git@github.com:octo-org/hello.git"},
        {"clone_url": "ssh://git@github.com/octo-org/hello.git"},
        {"clone_url": "/srv/git/hello.git"},
        {"clone_url": "file:///srv/git/hello.git"},
        {"default_branch": "release/v1.2"},
        {"quiet_from": "22:00", "quiet_until": "06:00", "quiet_timezone": "Europe/Berlin"},
        {"allowed_authors": ["alice", "bob-2"], "tracking_issue": 7},
        {"discover_label": "scan", "plan_label": "plan me", "implement_label": "build"},
    ],
)
def test_accepted_shapes(conn: psycopg.Connection, columns: dict[str, Any]) -> None:
    make_repo(conn, **columns)


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"forge": "gitlab"}, 'tracked_repo.forge: must be github or gitea; got "gitlab"'),
        ({"owner": "-octo"}, "tracked_repo.owner: must be a GitHub account name"),
        ({"owner": "a" * 40}, "tracked_repo.owner: must be a GitHub account name"),
        ({"owner": "my_org"}, "tracked_repo.owner: must be a GitHub account name"),
        (
            {"forge": "gitea", "api_url": "https://g.example/api/v1", "owner": "a b"},
            "tracked_repo.owner: must be a Gitea account name",
        ),
        ({"repo": ".."}, "tracked_repo.repo: must be a repository name"),
        ({"repo": "a/b"}, "tracked_repo.repo: must be a repository name"),
        ({"forge": "gitea", "owner": "o"}, "tracked_repo.api_url: a gitea repo needs its host"),
        ({"api_url": "api.github.com"}, "tracked_repo.api_url: must be an absolute http(s) URL"),
        (
            {"api_url": "https://user:pw@ghe.example.com/api/v3"},
            "tracked_repo.api_url: must be an absolute http(s) URL with no credentials",
        ),
        ({"api_url": "ftp://ghe.example.com"}, "tracked_repo.api_url: must be an absolute"),
        ({"api_url": "https://api.github.com/"}, "tracked_repo.api_url: must not end with /"),
        (
            {"clone_url": "https://x-access-token:ghp_abc@github.com/o/r.git"},
            "tracked_repo.clone_url: must not hold a password",
        ),
        ({"clone_url": "gopher://host/r.git"}, "tracked_repo.clone_url: a URL must use http"),
        ({"clone_url": "https://"}, "tracked_repo.clone_url: a URL needs a host and a path"),
        ({"clone_url": "hello.git"}, "tracked_repo.clone_url: must be a URL"),
        ({"clone_url": ""}, "tracked_repo.clone_url: must not be empty"),
        ({"default_branch": "my branch"}, "tracked_repo.default_branch: must be a git branch"),
        ({"default_branch": "a..b"}, "must not contain .."),
        ({"default_branch": "-x"}, "must not start with - or /"),
        ({"default_branch": "x.lock"}, "must not end with /, . or .lock"),
        ({"default_branch": "a//b"}, "must not contain //"),
        ({"default_branch": "a@{1}"}, "must not contain @{"),
        ({"default_branch": "a/.b"}, "no part may start with ."),
        ({"interval_seconds": 0}, "tracked_repo.interval_seconds: must be a positive number"),
        ({"quiet_from": "22:00"}, "tracked_repo.quiet_until: a quiet window needs both"),
        ({"quiet_until": "06:00"}, "tracked_repo.quiet_from: a quiet window needs both"),
        (
            {"quiet_from": "24:00", "quiet_until": "06:00"},
            'tracked_repo.quiet_from: must be HH:MM, 00:00 to 23:59; got "24:00"',
        ),
        (
            {"quiet_from": "22:00", "quiet_until": "6:00"},
            'tracked_repo.quiet_until: must be HH:MM, 00:00 to 23:59; got "6:00"',
        ),
        (
            {"quiet_from": "22:00", "quiet_until": "22:00"},
            "tracked_repo.quiet_until: must differ from quiet_from",
        ),
        (
            {"quiet_timezone": "Mars/Olympus"},
            'tracked_repo.quiet_timezone: unknown time zone "Mars/Olympus"',
        ),
        ({"discover_label": " \t"}, "tracked_repo.discover_label: must not be blank"),
        ({"plan_label": " plan"}, "tracked_repo.plan_label: must be at most 50 characters"),
        ({"plan_label": "p" * 51}, "tracked_repo.plan_label: must be at most 50 characters"),
        (
            {"implement_label": "Ceaseless:Plan"},
            "tracked_repo.implement_label: must differ from plan_label",
        ),
        ({"allowed_authors": ["alice", "ALICE"]}, "tracked_repo.allowed_authors: must not name"),
        ({"allowed_authors": ["al ice"]}, "tracked_repo.allowed_authors: each entry must be"),
        ({"allowed_authors": [None]}, "tracked_repo.allowed_authors: each entry must be"),
        ({"tracking_issue": 0}, "tracked_repo.tracking_issue: must be a positive issue number"),
        ({"discover_cooldown_secs": -1}, "tracked_repo.discover_cooldown_secs: must be zero"),
    ],
)
def test_every_rule_names_field_rule_and_value(
    conn: psycopg.Connection, columns: dict[str, Any], message: str
) -> None:
    assert message in _refused(conn, **columns)


def test_an_update_is_validated_and_bookkeeping_is_not(conn: psycopg.Connection) -> None:
    repo = make_repo(conn)
    with pytest.raises(psycopg.errors.Error, match=r"tracked_repo\.default_branch"):
        conn.execute(
            "update ceaseless.tracked_repo set default_branch = 'a b' where id = %s", (repo,)
        )
    conn.execute(
        "update ceaseless.tracked_repo set last_etag = 'W/\"1\"', next_poll_at = now() "
        "where id = %s",
        (repo,),
    )
    assert repo_row(conn, repo)["last_etag"] == 'W/"1"'


def test_a_long_bad_value_is_shown_bounded(conn: psycopg.Connection) -> None:
    message = _refused(conn, clone_url="x" * 5000)
    assert "(5002 characters)" in message and len(message) < 450


def _quiet(conn: psycopg.Connection, repo: uuid.UUID, at: datetime) -> bool:
    row = conn.execute(
        "select ceaseless._repo_quiet_at(r, %s) from ceaseless.tracked_repo r where id = %s",
        (at, repo),
    ).fetchone()
    assert row is not None
    return bool(row[0])


def test_quiet_window_inside_and_outside(conn: psycopg.Connection) -> None:
    repo = make_repo(conn, quiet_from="09:00", quiet_until="17:30")
    day = datetime(2026, 12, 1, tzinfo=UTC)
    assert not _quiet(conn, repo, day + timedelta(hours=8, minutes=59))
    assert _quiet(conn, repo, day + timedelta(hours=9))
    assert _quiet(conn, repo, day + timedelta(hours=17, minutes=29))
    assert not _quiet(conn, repo, day + timedelta(hours=17, minutes=30))
    assert not _quiet(conn, make_repo(conn), day + timedelta(hours=12))


def test_quiet_window_crossing_midnight(conn: psycopg.Connection) -> None:
    repo = make_repo(conn, quiet_from="22:00", quiet_until="06:00")
    day = datetime(2026, 12, 1, tzinfo=UTC)
    assert _quiet(conn, repo, day + timedelta(hours=23))
    assert _quiet(conn, repo, day + timedelta(minutes=30))
    assert _quiet(conn, repo, day + timedelta(hours=5, minutes=59))
    assert not _quiet(conn, repo, day + timedelta(hours=6))
    assert not _quiet(conn, repo, day + timedelta(hours=21, minutes=59))


def test_quiet_window_keeps_its_local_hours_across_a_dst_change(
    conn: psycopg.Connection,
) -> None:
    # New York, 01:00-03:00 local. Winter is UTC-5, summer UTC-4; the clocks
    # went forward on 2026-03-08 at 02:00 local.
    repo = make_repo(
        conn, quiet_from="01:00", quiet_until="03:00", quiet_timezone="America/New_York"
    )
    winter = datetime(2026, 3, 7, 6, 30, tzinfo=UTC)  # 01:30 EST
    summer = datetime(2026, 3, 9, 5, 30, tzinfo=UTC)  # 01:30 EDT
    assert _quiet(conn, repo, winter) and _quiet(conn, repo, summer)
    # 07:30 UTC is 02:30 EST (quiet) before the change and 03:30 EDT after.
    assert _quiet(conn, repo, datetime(2026, 3, 7, 7, 30, tzinfo=UTC))
    assert not _quiet(conn, repo, datetime(2026, 3, 9, 7, 30, tzinfo=UTC))
    # The change day itself: 06:30 UTC is 01:30 EST (quiet); 07:00 UTC is
    # 03:00 EDT, the window's end (02:00-03:00 never happened).
    assert _quiet(conn, repo, datetime(2026, 3, 8, 6, 30, tzinfo=UTC))
    assert not _quiet(conn, repo, datetime(2026, 3, 8, 7, 0, tzinfo=UTC))


def _interval_secs(conn: psycopg.Connection, repo: uuid.UUID) -> int:
    row = conn.execute(
        "select extract(epoch from ceaseless._repo_interval(r))::integer "
        "from ceaseless.tracked_repo r where id = %s",
        (repo,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_the_interval_is_clamped_at_use_and_stored_as_asked(conn: psycopg.Connection) -> None:
    fast = make_repo(conn, interval_seconds=5)
    slow = make_repo(conn, interval_seconds=600)
    assert repo_row(conn, fast)["interval_seconds"] == 5
    assert _interval_secs(conn, fast) == 60 and _interval_secs(conn, slow) == 600
    conn.execute(
        "update ceaseless.settings set value = '900' where key = 'forge_min_interval_secs'"
    )
    assert _interval_secs(conn, fast) == 900 and _interval_secs(conn, slow) == 900
    # Handed out at T0, the repo is next due one clamped interval later.
    assert [r[0] for r in conn.execute("select id from ceaseless.due_repos(%s)", (T0,))]
    assert repo_row(conn, fast)["next_poll_at"] == T0 + timedelta(seconds=900)


def test_a_shorter_interval_brings_the_next_poll_forward(conn: psycopg.Connection) -> None:
    far = datetime.now(UTC) + timedelta(days=1)
    repo = make_repo(conn, interval_seconds=86400, next_poll_at=far)
    conn.execute("update ceaseless.tracked_repo set interval_seconds = 120 where id = %s", (repo,))
    soon = repo_row(conn, repo)["next_poll_at"]
    assert soon <= datetime.now(UTC) + timedelta(seconds=120)
    conn.execute("update ceaseless.tracked_repo set interval_seconds = 600 where id = %s", (repo,))
    assert repo_row(conn, repo)["next_poll_at"] == soon


def _due(c: psycopg.Connection, at: datetime = T0, limit: int = 10) -> set[uuid.UUID]:
    return {r[0] for r in c.execute("select id from ceaseless.due_repos(%s, %s)", (at, limit))}


def test_due_repos_leaves_out_quiet_disabled_and_not_yet_due_repos(
    conn: psycopg.Connection,
) -> None:
    due = make_repo(conn)
    quiet = make_repo(conn, quiet_from="22:00", quiet_until="06:00")  # T0 is 05:00 UTC
    quiet_in_tokyo = make_repo(
        conn, quiet_from="13:00", quiet_until="15:00", quiet_timezone="Asia/Tokyo"
    )  # T0 is 14:00 there
    make_repo(conn, enabled=False)
    make_repo(conn, next_poll_at=T0 + timedelta(seconds=1))
    assert _due(conn) == {due}
    # Handed out once: not again before its next interval, even at the same now.
    assert _due(conn) == set()
    # After the quiet window ends (06:00 UTC; 15:00 in Tokyo) both are due.
    assert _due(conn, T0 + timedelta(hours=1, minutes=1)) >= {quiet, quiet_in_tokyo}


def test_due_repos_honours_its_limit_oldest_first(conn: psycopg.Connection) -> None:
    repos = [make_repo(conn, next_poll_at=T0 - timedelta(minutes=10 - i)) for i in range(5)]
    assert _due(conn, limit=2) == set(repos[:2])
    assert _due(conn, limit=10) == set(repos[2:])


def test_two_connections_never_get_the_same_repo(conn: psycopg.Connection, db_url: str) -> None:
    repos = {make_repo(conn) for _ in range(6)}
    with psycopg.connect(db_url) as a, psycopg.connect(db_url) as b:
        # a holds its repos (open transaction, as a poller that polls before
        # committing); b skips them instead of waiting, and gets the rest.
        first = _due(a, limit=3)
        second = _due(b, limit=10)
        assert len(first) == 3 and first.isdisjoint(second)
        assert first | second == repos
        a.commit()
        b.commit()
        # Committed: neither gets any of them again within the interval.
        assert _due(a) == set() and _due(b) == set()


def test_many_concurrent_callers_hand_each_repo_out_once(
    conn: psycopg.Connection, db_url: str
) -> None:
    repos = {make_repo(conn) for _ in range(40)}
    got: list[uuid.UUID] = []
    lock = threading.Lock()

    def poll() -> None:
        with psycopg.connect(db_url, autocommit=True) as c:
            for _ in range(10):
                ids = [r[0] for r in c.execute("select id from ceaseless.due_repos(%s, 3)", (T0,))]
                with lock:
                    got.extend(ids)

    threads = [threading.Thread(target=poll) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == sorted(repos)


def test_finish_repo_poll_records_success_errors_and_deferrals(conn: psycopg.Connection) -> None:
    repo = make_repo(conn)

    def finish(**kw: Any) -> datetime:
        row = conn.execute(
            "select ceaseless.finish_repo_poll(%(id)s, %(now)s, %(etag)s, %(error)s, %(next)s)",
            {"id": repo, "now": T0, "etag": None, "error": None, "next": None, **kw},
        ).fetchone()
        assert row is not None
        return row[0]

    assert finish(etag='"abc"') == T0 + timedelta(seconds=300)
    row = repo_row(conn, repo)
    assert (row["last_polled_at"], row["last_etag"], row["last_error"]) == (T0, '"abc"', None)

    assert finish(error="HTTP 500 from GET /repos/o/r/issues" + "!" * 2000) == T0 + timedelta(
        seconds=300
    )
    row = repo_row(conn, repo)
    assert row["last_etag"] == '"abc"' and row["last_error_at"] == T0
    assert row["last_error"].startswith("HTTP 500") and len(row["last_error"]) == 1000

    # A rate limit defers the repo to its reset; an earlier time never hastens it.
    later = T0 + timedelta(hours=1)
    assert finish(error="rate limited", next=later) == later
    assert finish(etag='"def"', next=T0) == T0 + timedelta(seconds=300)
    row = repo_row(conn, repo)
    assert (row["last_etag"], row["last_error"], row["last_error_at"]) == ('"def"', None, None)

    with pytest.raises(psycopg.errors.Error) as info:
        conn.execute("select ceaseless.finish_repo_poll(gen_random_uuid(), %s)", (T0,))
    assert info.value.sqlstate == "CE404"


def test_due_repos_walks_the_due_index(conn: psycopg.Connection) -> None:
    # Many repos not due yet, a few due: the plan reads the index in due order.
    conn.execute(
        "insert into ceaseless.tracked_repo (forge, owner, repo, clone_url, default_branch, "
        "interval_seconds, next_poll_at) "
        "select 'github', 'o', 'r' || g, '/srv/git/r.git', 'main', 300, %s + g * interval '1 s' "
        "from generate_series(1, 5000) g",
        (T0,),
    )
    for _ in range(3):
        make_repo(conn)
    conn.execute("analyze ceaseless.tracked_repo")
    with explained(conn) as plans, conn.transaction(force_rollback=True):
        assert len(_due(conn)) == 3
    plan = next(p["Plan"] for p in plans if "with due as" in p["Query Text"])
    scans = [n for n in nodes(plan) if n.get("Index Name") == "tracked_repo_due_idx"]
    assert scans, json.dumps(plan)[:2000]
    assert not [n for n in nodes(plan) if n["Node Type"] == "Seq Scan"], json.dumps(plan)[:2000]
    assert all(n.get("Actual Rows", 0) <= 3 for n in scans)


def test_repo_status_shows_schedule_quiet_interval_error_and_live_jobs(
    conn: psycopg.Connection,
) -> None:
    from tests.factories import make_agent

    make_agent(conn)
    repo = make_repo(conn, owner="octo", repo="hello", interval_seconds=10)
    conn.execute(
        "insert into ceaseless.job (kind, agent, prompt, forge, owner, repo, number) values "
        "('plan', 'noop', 'p', 'github', 'octo', 'hello', 1), "
        "('plan', 'noop', 'p', 'github', 'octo', 'hello', 2), "
        "('plan', 'noop', 'p', 'github', 'octo', 'other', 1)"
    )
    conn.execute("select ceaseless.finish_repo_poll(%s, %s, null, 'timeout')", (repo, T0))
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("select * from ceaseless.repo_status where id = %s", (repo,)).fetchone()
    assert row is not None
    assert row["live_jobs"] == 2 and row["quiet_now"] is False
    assert (row["interval_used_secs"], row["interval_asked_secs"]) == (60, 10)
    assert (row["last_error"], row["last_polled_at"]) == ("timeout", T0)
    assert row["next_poll_at"] == T0 + timedelta(seconds=60)


def test_a_user_sees_and_changes_only_its_own_repos(
    conn: psycopg.Connection, login_role: Callable[[str], psycopg.Connection]
) -> None:
    alice, bob = login_role("alice"), login_role("bob")
    alices = make_repo(
        alice,
        as_user=True,
        repo="alices",
        quiet_from="22:00",
        quiet_until="06:00",
        quiet_timezone="Europe/Berlin",
    )
    bobs = make_repo(bob, as_user=True, repo="bobs")
    assert [r[0] for r in alice.execute("select id from ceaseless.tracked_repo")] == [alices]
    assert [r[0] for r in alice.execute("select id from ceaseless.repo_status")] == [alices]
    assert (
        alice.execute(
            "update ceaseless.tracked_repo set enabled = false where id = %s", (bobs,)
        ).rowcount
        == 0
    )
    assert alice.execute("delete from ceaseless.tracked_repo where id = %s", (bobs,)).rowcount == 0
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        make_repo(alice, as_user=True, user_id="somebody_else")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.execute("select * from ceaseless.due_repos()")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        alice.execute("select ceaseless.finish_repo_poll(%s)", (alices,))
    assert {r[0] for r in conn.execute("select id from ceaseless.repo_status")} == {alices, bobs}
