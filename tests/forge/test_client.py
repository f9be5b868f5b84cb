"""The forge client against the fake forge, on its GitHub and its Gitea side.

Every GitHub-side request the client makes here is checked by the fake against
GitHub's official description; a request that breaks it fails the test.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest

from listener.forge import client as forge_client
from listener.forge.client import (
    Comment,
    ForgeClient,
    ForgeError,
    ForgeRepo,
    Issue,
    PullRequest,
    RateLimited,
)
from tests.fakes.forge import FakeForge, Repo, wait_until

T = TypeVar("T")
FORGES = ["github", "gitea"]
RUNNER = "tok-runner"
LABELLER = "tok-label"


def client(
    fake_forge: FakeForge, forge: str, token: str | None = RUNNER, timeout: float = 10.0
) -> ForgeClient:
    api = fake_forge.gitea_url if forge == "gitea" else fake_forge.url
    return ForgeClient(ForgeRepo(forge, api, "acme", "widgets"), token, timeout=timeout)


def run(forge: ForgeClient, call: Callable[[ForgeClient], Awaitable[T]]) -> T:
    async def go() -> T:
        async with forge:
            return await call(forge)

    return asyncio.run(go())


def page_size(forge: str) -> int:
    return forge_client.GITEA_PAGE if forge == "gitea" else forge_client.GITHUB_PAGE


@pytest.fixture
def repo(fake_forge: FakeForge) -> Repo:
    return fake_forge.add_repo("acme", "widgets")


def issue_calls(fake_forge: FakeForge) -> list[Any]:
    return [r for r in fake_forge.requests if r.method == "GET" and r.path.endswith("/issues")]


@pytest.mark.parametrize("forge", FORGES)
def test_listing_follows_link_across_three_pages_and_drops_pull_requests(
    fake_forge: FakeForge, repo: Repo, forge: str
) -> None:
    count = 2 * page_size(forge) + 1
    for n in range(count):
        fake_forge.add_issue(repo, f"issue {n}", labels=["ceaseless:plan"], user="alice")
    fake_forge.add_pull(repo, "ceaseless/some-job")
    fake_forge.add_issue(repo, "closed", state="closed")

    listing = run(client(fake_forge, forge), lambda f: f.list_open_issues(None))

    assert listing.issues is not None
    assert len(listing.issues) == count
    assert {i["title"] for i in listing.issues} == {f"issue {n}" for n in range(count)}
    first = listing.issues[0]
    assert set(first) == {"number", "title", "author", "labels", "html_url", "updated_at"}
    assert first["author"] == "alice"
    assert first["labels"] == ["ceaseless:plan"]
    assert first["html_url"].endswith(f"/issues/{first['number']}")
    calls = issue_calls(fake_forge)
    assert [c.query.get("page") for c in calls] == [None, ["2"], ["3"]]
    assert listing.etag is not None


def test_paging_stops_at_the_page_bound(
    fake_forge: FakeForge, repo: Repo, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(forge_client, "MAX_PAGES", 2)
    monkeypatch.setattr(forge_client, "GITEA_PAGE", 1)
    for n in range(5):
        fake_forge.add_issue(repo, f"issue {n}")

    listing = run(client(fake_forge, "gitea"), lambda f: f.list_open_issues(None))

    # The two most recently listed pages; the rest are left out, not waited for.
    assert listing.issues is not None
    assert [i["number"] for i in listing.issues] == [5, 4]
    assert len(issue_calls(fake_forge)) == 2


@pytest.mark.parametrize("forge", FORGES)
def test_pull_requests_listed_among_issues_are_dropped(
    fake_forge: FakeForge, repo: Repo, forge: str
) -> None:
    fake_forge.add_issue(repo, "an issue")
    fake_forge.add_pull(repo, "ceaseless/job-1")

    listing = run(client(fake_forge, forge), lambda f: f.list_open_issues(None))

    assert listing.issues is not None
    assert [i["title"] for i in listing.issues] == ["an issue"]


def test_github_listing_asks_for_open_issues_most_recently_updated_first(
    fake_forge: FakeForge, repo: Repo
) -> None:
    for n in range(3):
        fake_forge.add_issue(repo, f"i{n}")
    repo.issues[1].updated_at = "2099-01-01T00:00:00Z"

    listing = run(client(fake_forge, "github"), lambda f: f.list_open_issues(None))

    assert listing.issues is not None
    assert [i["number"] for i in listing.issues] == [1, 3, 2]
    [call] = issue_calls(fake_forge)
    assert call.query == {
        "state": ["open"],
        "sort": ["updated"],
        "direction": ["desc"],
        "per_page": ["100"],
    }


@pytest.mark.parametrize("forge", FORGES)
def test_a_304_for_the_etag_gives_no_issues_and_a_change_lists_them_again(
    fake_forge: FakeForge, repo: Repo, forge: str
) -> None:
    issue = fake_forge.add_issue(repo, "watched", labels=["ceaseless:plan"])
    first = run(client(fake_forge, forge), lambda f: f.list_open_issues(None))
    assert first.etag

    unchanged = run(client(fake_forge, forge), lambda f: f.list_open_issues(first.etag))

    assert unchanged.issues is None
    assert unchanged.etag == first.etag
    assert issue_calls(fake_forge)[-1].query.get("page") is None
    fake_forge.label_issue(repo, issue, "ceaseless:implement", by="alice")
    changed = run(client(fake_forge, forge), lambda f: f.list_open_issues(first.etag))
    assert changed.issues is not None
    assert changed.issues[0]["labels"] == ["ceaseless:plan", "ceaseless:implement"]
    assert changed.etag != first.etag


@pytest.mark.parametrize("forge", FORGES)
@pytest.mark.parametrize("status", [403, 429])
def test_a_rate_limit_raises_rate_limited_with_retry_at_from_retry_after(
    fake_forge: FakeForge, repo: Repo, forge: str, status: int
) -> None:
    reset = int((datetime.now(UTC) + timedelta(hours=1)).timestamp())
    repo.rate_limit = (status, reset, 120)
    before = datetime.now(UTC)

    with pytest.raises(RateLimited) as raised:
        run(client(fake_forge, forge), lambda f: f.list_open_issues(None))

    assert raised.value.status == status
    # Retry-After wins over the reset time when both are given.
    assert before + timedelta(seconds=119) <= raised.value.retry_at
    assert raised.value.retry_at <= datetime.now(UTC) + timedelta(seconds=121)
    assert raised.value.retry_at.tzinfo is not None
    assert "/repos/acme/widgets/issues" in str(raised.value)


@pytest.mark.parametrize("forge", FORGES)
@pytest.mark.parametrize("status", [403, 429])
def test_a_rate_limit_without_retry_after_waits_for_x_ratelimit_reset(
    fake_forge: FakeForge, repo: Repo, forge: str, status: int
) -> None:
    reset = int((datetime.now(UTC) + timedelta(minutes=30)).timestamp())
    repo.rate_limit = (status, reset, None)

    with pytest.raises(RateLimited) as raised:
        run(client(fake_forge, forge), lambda f: f.issue(1))

    assert raised.value.retry_at == datetime.fromtimestamp(reset, UTC)


def test_a_403_without_rate_limit_headers_is_no_rate_limit() -> None:
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert forge_client._retry_at(403, {}, now) is None  # a permission problem
    assert forge_client._retry_at(403, {"x-ratelimit-remaining": "12"}, now) is None
    # A 429 that names no time: GitHub's advice is to wait a minute.
    assert forge_client._retry_at(429, {}, now) == now + timedelta(seconds=60)
    http_date = {"Retry-After": "Tue, 01 Dec 2026 12:05:00 GMT"}
    assert forge_client._retry_at(429, http_date, now) == now + timedelta(minutes=5)


def test_an_anonymous_write_is_a_plain_forge_error(fake_forge: FakeForge, repo: Repo) -> None:
    with pytest.raises(ForgeError) as raised:
        run(client(fake_forge, "github", token=None), lambda f: f.create_issue("t", "b"))
    assert not isinstance(raised.value, RateLimited)
    assert raised.value.status == 401
    assert str(raised.value) == "POST /repos/acme/widgets/issues: HTTP 401: Requires authentication"


@pytest.mark.parametrize("forge", FORGES)
def test_a_server_error_names_method_path_and_status_and_never_the_token(
    fake_forge: FakeForge, repo: Repo, forge: str
) -> None:
    repo.fail = True

    with pytest.raises(ForgeError) as raised:
        run(client(fake_forge, forge), lambda f: f.list_open_issues('W/"old"'))

    assert raised.value.status == 500
    message = str(raised.value)
    assert message.startswith("GET ")
    assert "/repos/acme/widgets/issues: HTTP 500" in message
    assert RUNNER not in message and RUNNER not in repr(raised.value)
    assert "per_page" not in message and "limit=" not in message  # no query string


@pytest.mark.parametrize("forge", FORGES)
def test_a_body_that_is_not_json_is_a_forge_error_without_status(
    fake_forge: FakeForge, repo: Repo, forge: str
) -> None:
    repo.bad_json = True

    with pytest.raises(ForgeError) as raised:
        run(client(fake_forge, forge), lambda f: f.list_open_issues(None))

    assert raised.value.status is None
    assert "/repos/acme/widgets/issues" in str(raised.value)
    assert "not JSON" in str(raised.value)
    assert RUNNER not in str(raised.value)


@pytest.mark.parametrize("forge", FORGES)
def test_a_forge_that_hangs_times_out_within_the_deadline(
    fake_forge: FakeForge, repo: Repo, forge: str
) -> None:
    repo.hang = True
    started = time.monotonic()

    with pytest.raises(ForgeError) as raised:
        run(client(fake_forge, forge, timeout=0.3), lambda f: f.comments(1))

    elapsed = time.monotonic() - started
    assert elapsed < 5
    assert raised.value.status is None
    assert "/repos/acme/widgets/issues/1/comments: no answer within 0.3 s" in str(raised.value)
    assert RUNNER not in str(raised.value)
    assert wait_until(lambda: len(fake_forge.requests) == 1)
    fake_forge.release()


def test_a_step_past_its_deadline_fails_as_a_forge_error_naming_the_step() -> None:
    with pytest.raises(ForgeError) as raised:
        asyncio.run(forge_client.within(0.05, "the label change", asyncio.sleep(5)))

    assert raised.value.status is None
    assert str(raised.value) == "the label change took longer than 0.05 s and was given up"


def test_a_step_within_its_deadline_returns_its_result() -> None:
    assert (
        asyncio.run(forge_client.within(5, "creating the issue", asyncio.sleep(0, "done")))
        == "done"
    )


@pytest.mark.parametrize("forge", FORGES)
def test_an_unknown_token_is_refused_and_not_named(
    fake_forge: FakeForge, repo: Repo, forge: str
) -> None:
    with pytest.raises(ForgeError) as raised:
        run(client(fake_forge, forge, token="tok-secret-value"), lambda f: f.issue(1))

    assert raised.value.status == 401
    assert "Bad credentials" in str(raised.value)
    assert "tok-secret-value" not in str(raised.value)


@pytest.mark.parametrize(("forge", "scheme"), [("github", "Bearer"), ("gitea", "token")])
def test_the_authorization_header_uses_each_forges_scheme(
    fake_forge: FakeForge, repo: Repo, forge: str, scheme: str
) -> None:
    fake_forge.add_issue(repo, "x")
    run(client(fake_forge, forge), lambda f: f.issue(1))
    run(client(fake_forge, forge, token=None), lambda f: f.issue(1))

    assert [r.authorization for r in fake_forge.requests] == [f"{scheme} {RUNNER}", None]


def test_a_refused_connection_is_a_forge_error_without_status() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    closed = ForgeClient(ForgeRepo("gitea", f"http://127.0.0.1:{port}/api/v1", "a", "b"), RUNNER)

    with pytest.raises(ForgeError) as raised:
        run(closed, lambda f: f.issue(1))

    assert raised.value.status is None
    assert str(raised.value).startswith("GET /api/v1/repos/a/b/issues/1: connection failed")
    assert RUNNER not in str(raised.value)


def test_a_link_to_another_host_is_not_followed_with_the_token(fake_forge: FakeForge) -> None:
    async def call(f: ForgeClient) -> Any:
        return await f._call("GET", "http://203.0.113.9/repos/acme/widgets/issues?page=2")

    with pytest.raises(ForgeError, match="another host"):
        run(client(fake_forge, "github"), call)
    assert fake_forge.requests == []


@pytest.mark.parametrize("forge", FORGES)
def test_issue_and_its_comments(fake_forge: FakeForge, repo: Repo, forge: str) -> None:
    fake_forge.add_issue(
        repo,
        "Fix the flux",
        "It is broken.",
        labels=["ceaseless:implement"],
        user="alice",
        comments=["first", "second"],
    )
    empty = fake_forge.add_issue(repo, "no body")

    issue = run(client(fake_forge, forge), lambda f: f.issue(1))
    comments = run(client(fake_forge, forge), lambda f: f.comments(1))

    assert issue == Issue(
        number=1,
        title="Fix the flux",
        body="It is broken.",
        author="alice",
        labels=["ceaseless:implement"],
        html_url=issue.html_url,
        state="open",
    )
    assert issue.html_url.endswith("/issues/1")
    assert [(c.author, c.body) for c in comments] == [("alice", "first"), ("alice", "second")]
    assert all(isinstance(c, Comment) and c.created_at for c in comments)
    assert run(client(fake_forge, forge), lambda f: f.issue(empty.number)).body == ""
    assert run(client(fake_forge, forge), lambda f: f.comments(empty.number)) == []
    with pytest.raises(ForgeError) as missing:
        run(client(fake_forge, forge), lambda f: f.issue(99))
    assert missing.value.status == 404


@pytest.mark.parametrize("forge", FORGES)
def test_labellers_name_whoever_most_recently_added_each_label(
    fake_forge: FakeForge, repo: Repo, forge: str
) -> None:
    issue = fake_forge.add_issue(repo, "by a stranger", labels=["ceaseless:plan"], user="mallory")
    fake_forge.unlabel_issue(issue, "ceaseless:plan", by="mallory")
    fake_forge.label_issue(repo, issue, "ceaseless:plan", by="alice")
    fake_forge.label_issue(repo, issue, "ceaseless:implement", by="bob")
    fake_forge.label_issue(repo, issue, "unrelated", by="carol")

    found = run(
        client(fake_forge, forge),
        lambda f: f.labellers(1, ["ceaseless:plan", "ceaseless:implement", "ceaseless:discover"]),
    )

    assert found == {"ceaseless:plan": "alice", "ceaseless:implement": "bob"}
    path = "/timeline" if forge == "gitea" else "/events"
    assert len(fake_forge.requests_to("GET", path)) == 1


@pytest.mark.parametrize("forge", FORGES)
def test_a_created_issue_is_found_again_by_its_marker(
    fake_forge: FakeForge, repo: Repo, forge: str
) -> None:
    fake_forge.add_issue(repo, "older", "no marker here")
    marker = "<!-- ceaseless:child 0f1e2d3c k1 -->"

    created = run(
        client(fake_forge, forge), lambda f: f.create_issue("Child one", "Do it.\n\n" + marker)
    )
    fake_forge.add_issue(repo, "newer", "nothing")
    fake_forge.add_pull(repo, "ceaseless/x", body=marker)  # a PR quoting it is no issue
    repo.issues[created.number].state = "closed"  # closed issues count too

    found = run(client(fake_forge, forge), lambda f: f.find_issue_with_marker(marker))
    absent = run(client(fake_forge, forge), lambda f: f.find_issue_with_marker("<!-- other -->"))

    assert created.author == "ceaseless-bot"
    assert created.title == "Child one"
    assert created.body.endswith(marker)
    assert found is not None
    assert found.number == created.number
    assert found.state == "closed"
    assert absent is None


@pytest.mark.parametrize("forge", FORGES)
def test_labels_are_added_and_removed_with_the_label_identity(
    fake_forge: FakeForge, repo: Repo, forge: str
) -> None:
    issue = fake_forge.add_issue(repo, "work", labels=["ceaseless:plan"], user="alice")
    labeller = client(fake_forge, forge, token=LABELLER)

    async def mirror(f: ForgeClient) -> None:
        await f.add_label(1, "ceaseless:pending")
        await f.add_label(1, "ceaseless:running")
        await f.remove_label(1, "ceaseless:pending")
        await f.remove_label(1, "ceaseless:pending")  # already gone: fine
        await f.remove_label(1, "ceaseless:never-existed")  # nowhere at all: fine

    run(labeller, mirror)

    assert issue.labels == ["ceaseless:plan", "ceaseless:running"]
    assert [(e["added"], e["label"], e["actor"]) for e in issue.events[1:]] == [
        (True, "ceaseless:pending", "ceaseless-labels"),
        (True, "ceaseless:running", "ceaseless-labels"),
        (False, "ceaseless:pending", "ceaseless-labels"),
    ]
    scheme = "token" if forge == "gitea" else "Bearer"
    assert {r.authorization for r in fake_forge.requests} == {f"{scheme} {LABELLER}"}
    assert repo.labels["ceaseless:running"].color == "ededed"


@pytest.mark.parametrize("forge", FORGES)
def test_pull_by_head_finds_the_pull_request_or_none(
    fake_forge: FakeForge, repo: Repo, forge: str
) -> None:
    fake_forge.add_issue(repo, "the issue")
    fake_forge.add_pull(repo, "ceaseless/other-job")
    pull = fake_forge.add_pull(repo, "ceaseless/3f2a-job", "main", state="closed")

    found = run(client(fake_forge, forge), lambda f: f.pull_by_head("ceaseless/3f2a-job", "main"))
    absent = run(client(fake_forge, forge), lambda f: f.pull_by_head("ceaseless/nothing", "main"))

    assert found == PullRequest(
        number=pull.number,
        head_branch="ceaseless/3f2a-job",
        html_url=found.html_url if found else "",
        state="closed",
    )
    assert found is not None and found.html_url.endswith(f"/pull/{pull.number}")
    assert absent is None
    if forge == "github":
        [call, _] = fake_forge.requests_to("GET", "/pulls")
        assert call.query == {"head": ["acme:ceaseless/3f2a-job"], "state": ["all"]}


def test_an_unknown_forge_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown forge 'gitlab'"):
        ForgeClient(ForgeRepo("gitlab", "https://gitlab.example", "a", "b"), None)


def test_a_client_does_not_show_its_token() -> None:
    forge = ForgeClient(ForgeRepo("github", "https://api.github.com", "a", "b"), "tok-hidden")
    assert "tok-hidden" not in repr(forge)
