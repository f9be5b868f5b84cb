"""The fake forge: honest answers, and refusal of anything GitHub's description refuses.

A plain urllib client stands in for the forge clients, so these tests check the
fake itself; the clients' own tests use the same `fake_forge` fixture.
"""

from __future__ import annotations

import json
import os
import re
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.forge import FakeForge, check_no_violations, wait_until
from tests.fakes.github_openapi import Description, DescriptionMissing, description_path

RUNNER = "token tok-runner"
LABELLER = "token tok-label"
# Read before any test changes HOME (pytester gives its inner run a HOME of its own).
DESCRIPTION = description_path()


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    raw: bytes

    def json(self) -> Any:
        return json.loads(self.raw)


def call(
    url: str,
    method: str = "GET",
    body: Any = None,
    token: str = RUNNER,
    headers: dict[str, str] | None = None,
    timeout: float = 5.0,
) -> Answer:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Authorization", token)
    request.add_header("Accept", "application/vnd.github+json")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return Answer(response.status, dict(response.headers), response.read())
    except urllib.error.HTTPError as e:
        return Answer(e.code, dict(e.headers), e.read())


def links(answer: Answer) -> dict[str, str]:
    found = re.findall(r'<([^>]+)>; rel="(\w+)"', answer.headers.get("Link", ""))
    return {rel: url for url, rel in found}


@pytest.fixture
def repo(fake_forge: FakeForge) -> Any:
    return fake_forge.add_repo("acme", "widgets")


def test_issue_list_filters_by_labels_and_state_with_description_fields(
    fake_forge: FakeForge, repo: Any
) -> None:
    fake_forge.add_issue(repo, "wanted", "body", labels=["plan", "extra"])
    fake_forge.add_issue(repo, "unlabelled")
    fake_forge.add_issue(repo, "closed", labels=["plan"], state="closed")

    answer = call(f"{fake_forge.url}/repos/acme/widgets/issues?labels=plan&state=open")

    assert answer.status == 200
    [issue] = answer.json()
    assert issue["title"] == "wanted"
    assert issue["number"] == 1
    assert issue["state"] == "open"
    assert issue["body"] == "body"
    assert issue["user"]["login"] == "octocat"
    assert [label["name"] for label in issue["labels"]] == ["plan", "extra"]
    assert "pull_request" not in issue
    everything = call(f"{fake_forge.url}/repos/acme/widgets/issues?state=all").json()
    assert [i["number"] for i in everything] == [3, 2, 1]


def test_pagination_follows_link_headers_across_three_pages(
    fake_forge: FakeForge, repo: Any
) -> None:
    for n in range(5):
        fake_forge.add_issue(repo, f"issue {n}", labels=["discover"])

    url: str | None = f"{fake_forge.url}/repos/acme/widgets/issues?labels=discover&per_page=2"
    seen: list[int] = []
    pages = 0
    while url:
        answer = call(url)
        assert answer.status == 200
        seen += [i["number"] for i in answer.json()]
        pages += 1
        url = links(answer).get("next")

    assert pages == 3
    assert seen == [5, 4, 3, 2, 1]
    last = links(answer)
    assert set(last) == {"prev", "first"}
    first = links(call(f"{fake_forge.url}/repos/acme/widgets/issues?labels=discover&per_page=2"))
    assert first["last"].endswith("page=3")


def test_if_none_match_with_the_current_etag_answers_304_until_something_changes(
    fake_forge: FakeForge, repo: Any
) -> None:
    issue = fake_forge.add_issue(repo, "watched", labels=["plan"])
    url = f"{fake_forge.url}/repos/acme/widgets/issues?labels=plan"
    etag = call(url).headers["ETag"]

    unchanged = call(url, headers={"If-None-Match": etag})
    assert unchanged.status == 304
    assert unchanged.raw == b""
    assert unchanged.headers["ETag"] == etag

    call(
        f"{fake_forge.url}/repos/acme/widgets/issues/{issue.number}/labels",
        "POST",
        {"labels": ["pending"]},
    )
    changed = call(url, headers={"If-None-Match": etag})
    assert changed.status == 200
    assert changed.headers["ETag"] != etag


def test_create_get_and_comments_of_an_issue(fake_forge: FakeForge, repo: Any) -> None:
    created = call(
        f"{fake_forge.url}/repos/acme/widgets/issues",
        "POST",
        {"title": "child", "body": "do it", "labels": ["implement"]},
    )
    assert created.status == 201
    number = created.json()["number"]
    assert created.json()["html_url"].endswith(f"/issues/{number}")

    fetched = call(f"{fake_forge.url}/repos/acme/widgets/issues/{number}").json()
    assert fetched["title"] == "child"
    assert [label["name"] for label in fetched["labels"]] == ["implement"]

    talked = fake_forge.add_issue(repo, "talked", comments=["first", "second"])
    comments = call(f"{fake_forge.url}/repos/acme/widgets/issues/{talked.number}/comments")
    assert [c["body"] for c in comments.json()] == ["first", "second"]
    assert call(f"{fake_forge.url}/repos/acme/widgets/issues/99").status == 404


def test_labels_are_added_set_and_removed_and_every_token_is_recorded(
    fake_forge: FakeForge, repo: Any
) -> None:
    issue = fake_forge.add_issue(repo, "labelled", labels=["plan"])
    base = f"{fake_forge.url}/repos/acme/widgets/issues/{issue.number}/labels"

    added = call(base, "POST", {"labels": ["ceaseless:pending"]}, token=LABELLER)
    assert [label["name"] for label in added.json()] == ["plan", "ceaseless:pending"]
    set_ = call(base, "PUT", {"labels": ["plan", "ceaseless:running"]}, token=LABELLER)
    assert [label["name"] for label in set_.json()] == ["plan", "ceaseless:running"]
    removed = call(f"{base}/ceaseless%3Arunning", "DELETE", token=LABELLER)
    assert removed.status == 200
    assert issue.labels == ["plan"]

    path = base[len(fake_forge.url) :]
    label_calls = [r for r in fake_forge.requests if r.path.startswith(path)]
    assert len(label_calls) == 3
    assert {r.authorization for r in label_calls} == {LABELLER}
    assert label_calls[0].body == {"labels": ["ceaseless:pending"]}
    [removal] = fake_forge.requests_to("DELETE", "/labels/ceaseless:running")
    assert removal.authorization == LABELLER


def test_pull_requests_are_found_by_head_and_listed_among_issues(
    fake_forge: FakeForge, repo: Any
) -> None:
    fake_forge.add_issue(repo, "the issue")
    created = call(
        f"{fake_forge.url}/repos/acme/widgets/pulls",
        "POST",
        {"title": "the fix", "head": "ceaseless/job-1", "base": "main", "body": "Fixes #1"},
    )
    assert created.status == 201
    pull = created.json()
    assert pull["number"] == 2
    assert pull["head"]["ref"] == "ceaseless/job-1"
    assert pull["base"]["ref"] == "main"
    assert pull["html_url"].endswith("/pull/2")

    url = f"{fake_forge.url}/repos/acme/widgets/pulls"
    [found] = call(f"{url}?head=acme:ceaseless/job-1&state=all").json()
    assert found["number"] == 2
    assert found["state"] == "open"
    assert call(f"{url}?head=acme:ceaseless/job-2").json() == []
    again = call(url, "POST", {"title": "again", "head": "ceaseless/job-1", "base": "main"})
    assert again.status == 422

    issues = call(f"{fake_forge.url}/repos/acme/widgets/issues").json()
    assert [("pull_request" in i) for i in issues] == [True, False]


@pytest.mark.parametrize(
    ("method", "path", "body", "reason"),
    [
        ("GET", "/repos/acme/widgets/issues?per_page=many", None, "'many' is not an integer"),
        ("GET", "/repos/acme/widgets/issues?labelz=plan", None, "'labelz' is not declared"),
        ("GET", "/repos/acme/widgets/pulls?state=merged", None, "is not one of"),
        ("POST", "/repos/acme/widgets/issues", {"title": "t", "body": 5}, "5 is not of type"),
        ("POST", "/repos/acme/widgets/issues", {"body": "no title"}, "'title' is a required"),
        ("POST", "/repos/acme/widgets/pulls", {"head": "b", "base": "m", "draft": 1}, "draft"),
        ("GET", "/repos/acme/widgets/issue", None, "no operation GET"),
        ("PATCH", "/repos/acme/widgets/pulls", {"title": "x"}, "no operation PATCH"),
    ],
)
def test_a_request_the_description_refuses_is_answered_400_and_fails_the_test(
    fake_forge: FakeForge, repo: Any, method: str, path: str, body: Any, reason: str
) -> None:
    answer = call(f"{fake_forge.url}{path}", method, body)

    assert answer.status == 400
    assert reason in answer.json()["message"]
    assert len(fake_forge.violations) == 1
    assert reason in fake_forge.violations[0]
    with pytest.raises(pytest.fail.Exception, match="broke GitHub's API description"):
        check_no_violations(fake_forge)
    fake_forge.violations.clear()  # seen and asserted: let the fixture's own check pass


def test_valid_requests_leave_nothing_for_the_check(fake_forge: FakeForge, repo: Any) -> None:
    fake_forge.add_issue(repo, "x", labels=["plan"])
    call(f"{fake_forge.url}/repos/acme/widgets/issues?labels=plan&state=open&per_page=100&page=1")
    call(f"{fake_forge.url}/repos/acme/widgets/issues/1/labels", "PUT", {"labels": ["a"]})

    assert fake_forge.violations == []
    check_no_violations(fake_forge)


def test_the_fixture_fails_a_test_whose_client_broke_the_description(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CEASELESS_GITHUB_OPENAPI", str(DESCRIPTION))
    # The inner run imports tests.* from this checkout, installed editable or not.
    checkout = str(Path(__file__).resolve().parents[2])
    paths = [checkout, os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    pytester.makeconftest("from tests.conftest import github_description, fake_forge\n")
    pytester.makepyfile(
        """
        import urllib.request, urllib.error

        def test_sloppy_client(fake_forge):
            fake_forge.add_repo("acme", "widgets")
            try:
                urllib.request.urlopen(fake_forge.url + "/repos/acme/widgets/issues?per_page=x")
            except urllib.error.HTTPError as e:
                assert e.code == 400
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*broke GitHub's API description*", "*'x' is not an integer*"])


def test_a_failing_repo_answers_500_and_the_others_still_answer(fake_forge: FakeForge) -> None:
    broken = fake_forge.add_repo("acme", "broken")
    fake_forge.add_repo("acme", "fine")
    broken.fail = True

    assert call(f"{fake_forge.url}/repos/acme/broken/issues").status == 500
    assert call(f"{fake_forge.url}/repos/acme/fine/issues").status == 200


def test_a_hanging_repo_times_the_client_out(fake_forge: FakeForge, repo: Any) -> None:
    repo.hang = True
    with pytest.raises((TimeoutError, socket.timeout, urllib.error.URLError)):
        call(f"{fake_forge.url}/repos/acme/widgets/issues", timeout=0.3)
    assert wait_until(lambda: len(fake_forge.requests) == 1)
    fake_forge.release()


@pytest.mark.parametrize("status", [403, 429])
def test_a_rate_limited_repo_answers_with_the_rate_limit_headers(
    fake_forge: FakeForge, repo: Any, status: int
) -> None:
    repo.rate_limit = (status, 1_900_000_000, 60)

    answer = call(f"{fake_forge.url}/repos/acme/widgets/issues")

    assert answer.status == status
    assert answer.headers["x-ratelimit-remaining"] == "0"
    assert answer.headers["x-ratelimit-reset"] == "1900000000"
    assert answer.headers["Retry-After"] == "60"


def test_a_bad_json_repo_answers_200_with_a_body_that_does_not_parse(
    fake_forge: FakeForge, repo: Any
) -> None:
    repo.bad_json = True
    answer = call(f"{fake_forge.url}/repos/acme/widgets/issues")
    assert answer.status == 200
    with pytest.raises(json.JSONDecodeError):
        answer.json()


def test_gitea_serves_the_same_shapes_under_api_v1(fake_forge: FakeForge, repo: Any) -> None:
    for n in range(3):
        fake_forge.add_issue(repo, f"g{n}", labels=["plan"])
    pending = fake_forge.label(repo, "ceaseless:pending")
    api = f"{fake_forge.gitea_url}/repos/acme/widgets"

    page = call(f"{api}/issues?labels=plan&state=open&type=issues&limit=2")
    assert page.status == 200
    assert page.headers["X-Total-Count"] == "3"
    assert [i["number"] for i in page.json()] == [3, 2]
    assert "next" in links(page)

    labels = call(f"{api}/issues/1/labels", "POST", {"labels": [pending.id]}, token=LABELLER)
    assert [label["name"] for label in labels.json()] == ["plan", "ceaseless:pending"]
    assert call(f"{api}/issues/1/labels/{pending.id}", "DELETE", token=LABELLER).status == 204
    assert repo.issues[1].labels == ["plan"]

    call(f"{api}/pulls", "POST", {"title": "fix", "head": "ceaseless/job-9", "base": "main"})
    # Gitea's route is /pulls/{base}/*: the head branch may hold slashes.
    found = call(f"{api}/pulls/main/ceaseless/job-9")
    assert found.json()["head"]["ref"] == "ceaseless/job-9"
    assert call(f"{api}/pulls/main/ceaseless/job-8").status == 404

    refused = call(f"{api}/issues?per_page=2")
    assert refused.status == 400
    assert "per_page" in fake_forge.violations[0]
    fake_forge.violations.clear()


def test_a_missing_description_fails_loudly(tmp_path: Path) -> None:
    with pytest.raises(DescriptionMissing, match="bin/fetch-github-openapi"):
        Description.load(tmp_path / "absent.json")


def test_the_description_is_github_and_indexes_the_operations_the_clients_use(
    github_description: Description,
) -> None:
    for method, path in [
        ("GET", "/repos/o/r/issues"),
        ("POST", "/repos/o/r/issues"),
        ("GET", "/repos/o/r/issues/1"),
        ("GET", "/repos/o/r/issues/1/comments"),
        ("POST", "/repos/o/r/issues/1/labels"),
        ("PUT", "/repos/o/r/issues/1/labels"),
        ("DELETE", "/repos/o/r/issues/1/labels/x"),
        ("GET", "/repos/o/r/pulls"),
        ("POST", "/repos/o/r/pulls"),
    ]:
        assert github_description.operation(method, path) is not None, (method, path)
    found = github_description.operation("GET", "/repos/o/r/issues/comments")
    assert found is not None
    assert found[0].template == "/repos/{owner}/{repo}/issues/comments"


def test_each_token_acts_as_its_login_and_an_unknown_token_gets_401(
    fake_forge: FakeForge, repo: Any
) -> None:
    api = f"{fake_forge.url}/repos/acme/widgets"
    created = call(f"{api}/issues", "POST", {"title": "by the bot"}, token="Bearer tok-runner")
    assert created.json()["user"]["login"] == "ceaseless-bot"
    number = created.json()["number"]
    call(f"{api}/issues/{number}/labels", "POST", {"labels": ["x"]}, token="Bearer tok-label")
    [event] = call(f"{api}/issues/{number}/events").json()
    assert (event["event"], event["actor"]["login"]) == ("labeled", "ceaseless-labels")

    assert call(f"{api}/issues", token="Bearer tok-stolen").status == 401
    assert call(f"{api}/issues", token="Basic tok-runner").status == 401
    anonymous = urllib.request.Request(f"{api}/issues", data=b'{"title": "t"}', method="POST")
    anonymous.add_header("Content-Type", "application/json")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(anonymous, timeout=5)
    assert refused.value.code == 401
    with urllib.request.urlopen(f"{api}/issues", timeout=5) as read:  # anonymous reads work
        assert read.status == 200


def test_label_events_and_gitea_timeline_name_who_added_and_removed_each_label(
    fake_forge: FakeForge, repo: Any
) -> None:
    issue = fake_forge.add_issue(repo, "labelled", labels=["plan"], user="mallory")
    fake_forge.unlabel_issue(issue, "plan", by="mallory")
    fake_forge.label_issue(repo, issue, "plan", by="alice")

    events = call(f"{fake_forge.url}/repos/acme/widgets/issues/1/events?per_page=100").json()
    assert [(e["event"], e["label"]["name"], e["actor"]["login"]) for e in events] == [
        ("labeled", "plan", "mallory"),
        ("unlabeled", "plan", "mallory"),
        ("labeled", "plan", "alice"),
    ]
    timeline = call(f"{fake_forge.gitea_url}/repos/acme/widgets/issues/1/timeline?limit=50")
    assert [(e["type"], e["body"], e["user"]["login"]) for e in timeline.json()] == [
        ("label", "1", "mallory"),
        ("label", "", "mallory"),
        ("label", "1", "alice"),
    ]
    assert call(f"{fake_forge.url}/repos/acme/widgets/issues/9/events").status == 404


def test_issue_list_sorts_by_updated_or_created_in_either_direction(
    fake_forge: FakeForge, repo: Any
) -> None:
    for n in range(3):
        fake_forge.add_issue(repo, f"i{n}")
    repo.issues[1].updated_at = "2099-01-01T00:00:00Z"  # the oldest issue changed last
    repo.issues[2].state = "closed"
    api = f"{fake_forge.url}/repos/acme/widgets/issues"

    def numbers(query: str) -> list[int]:
        return [i["number"] for i in call(f"{api}?{query}").json()]

    assert numbers("sort=updated&direction=desc") == [1, 3]
    assert numbers("sort=created&direction=asc") == [1, 3]
    assert numbers("state=all") == [3, 2, 1]
    assert numbers("state=all&sort=updated&direction=asc") == [2, 3, 1]
    assert numbers("state=closed") == [2]


def test_a_label_is_created_on_either_side(fake_forge: FakeForge, repo: Any) -> None:
    api = f"{fake_forge.gitea_url}/repos/acme/widgets/labels"
    created = call(api, "POST", {"name": "ceaseless:running", "color": "#00ff00"})
    assert created.status == 201
    assert created.json()["color"] == "00ff00"
    assert call(api, "POST", {"name": "ceaseless:running", "color": "#00ff00"}).status == 422
    github = call(f"{fake_forge.url}/repos/acme/widgets/labels", "POST", {"name": "other"})
    assert github.status == 201
    assert {lb["name"] for lb in call(api).json()} == {"ceaseless:running", "other"}
