"""A fake GitHub- and Gitea-compatible forge on loopback, honest by construction.

Started by the ``fake_forge`` fixture (tests/conftest.py) on 127.0.0.1 with a
port of its own; it holds repositories, issues, labels, comments and pull
requests in memory and answers the calls the forge clients make:

    GET    /repos/{owner}/{repo}/issues                     list (labels, state, sort, direction,
                                                            per_page, page)
    POST   /repos/{owner}/{repo}/issues                     create
    GET    /repos/{owner}/{repo}/issues/{number}            get
    GET    /repos/{owner}/{repo}/issues/{number}/comments   list comments
    GET    /repos/{owner}/{repo}/issues/{number}/events     "labeled" / "unlabeled" events
    POST   /repos/{owner}/{repo}/issues/{number}/labels     add labels
    PUT    /repos/{owner}/{repo}/issues/{number}/labels     set labels
    DELETE /repos/{owner}/{repo}/issues/{number}/labels/{name}
    GET    /repos/{owner}/{repo}/labels                     the repository's labels
    POST   /repos/{owner}/{repo}/labels                     create a label
    GET    /repos/{owner}/{repo}/pulls                      list (head, state, base, per_page, page)
    POST   /repos/{owner}/{repo}/pulls                      create

What a test can rely on:
- every GitHub-side request is checked against GitHub's official description
  (tests/fakes/github_openapi.py) before it is served; one that breaks it gets
  400 with the reasons and is kept in ``violations``, which the fixture turns
  into a failed test at teardown;
- every answer of the fake is checked against the description as well (the
  fields it sends, not the ones it leaves out), so the fake cannot teach a
  client a shape GitHub does not have;
- lists page with ``Link`` headers (first, prev, next, last) and carry a weak
  ``ETag``; ``If-None-Match`` with the current tag answers 304 with no body;
- as on GitHub, the issue list includes pull requests (marked by a
  ``pull_request`` field) and issues and pull requests share one number sequence;
- ``requests`` records every request (method, path, query, Authorization
  header, JSON body), so a test can say which token set a label;
- ``tokens`` maps a token to a login (``tok-runner`` is ``ceaseless-bot``,
  ``tok-label`` is ``ceaseless-labels``): issues, pull requests and label
  events created with a token carry its login; an unknown token is answered
  401 (either scheme, ``Bearer`` or ``token``); no Authorization header reads
  anonymously and may not write;
- label changes are recorded as events with their actor (``label_issue`` and
  ``unlabel_issue`` let a test say who labelled an issue), served as GitHub's
  issue events and as Gitea's timeline (type ``label``, body ``"1"`` added);
- controls per repository: ``fail`` (500), ``hang`` (no answer until the
  fake stops or ``release`` is called), ``delay`` (seconds each answer
  waits, a slow forge), ``rate_limit`` (403 or 429 with
  ``x-ratelimit-remaining: 0``, ``x-ratelimit-reset`` and ``Retry-After``) and
  ``bad_json`` (200 with a body that is not JSON), and ``private`` (a request
  without a token is answered 404, as GitHub hides a private repository).

Gitea is served under ``/api/v1`` with the same shapes (its API mirrors
GitHub's for these calls). What differs, and is handled: Gitea pages with
``limit`` where GitHub has ``per_page`` and sends ``X-Total-Count``; its
label calls take label ids (add and set also take names, as Gitea 1.20+ does)
and remove a label by id; it has no ``head`` filter on the pull list, so a
client looks a pull request up with ``GET /repos/{owner}/{repo}/pulls/{base}/{head}``
(the head may hold slashes: Gitea's route is ``/pulls/{base}/*``); who added a
label is in ``GET /repos/{owner}/{repo}/issues/{number}/timeline``.
Gitea requests are checked only for undeclared query parameters: there is no
official Gitea description in this suite.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

import pytest

from tests.fakes.github_openapi import Description

GITEA_PREFIX = "/api/v1"

# Query parameters the Gitea routes accept; anything else is a client bug.
_GITEA_QUERY = {
    ("GET", "issues"): {"state", "labels", "type", "page", "limit", "q", "since"},
    ("GET", "pulls"): {"state", "page", "limit", "sort"},
}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Label:
    id: int
    name: str
    color: str = "ededed"
    description: str | None = None


@dataclass
class Issue:
    number: int
    title: str
    body: str | None
    user: str
    labels: list[str] = field(default_factory=list)
    state: str = "open"
    comments: list[dict[str, Any]] = field(default_factory=list)
    created_at: str = field(default_factory=_now)
    updated_at: str = field(default_factory=_now)
    pull: dict[str, Any] | None = None  # head / base / draft for a pull request
    # Label additions and removals, oldest first: {"id", "added", "label", "actor", "created_at"}.
    events: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Repo:
    owner: str
    name: str
    id: int
    default_branch: str = "main"
    issues: dict[int, Issue] = field(default_factory=dict)
    labels: dict[str, Label] = field(default_factory=dict)
    # Controls (see the module docstring).
    fail: bool = False
    hang: bool = False
    delay: float = 0.0
    bad_json: bool = False
    # Private: an anonymous request is answered 404, as GitHub hides a private repository.
    private: bool = False
    # status, reset epoch, retry-after seconds (None: no Retry-After header)
    rate_limit: tuple[int, int, int | None] | None = None


@dataclass(frozen=True)
class Recorded:
    """One request as the fake received it."""

    method: str
    path: str
    query: dict[str, list[str]]
    authorization: str | None
    body: Any
    gitea: bool


class FakeForge:
    """The server and its state; thread-safe, started and stopped by the fixture."""

    def __init__(self, description: Description, user: str = "ceaseless-bot") -> None:
        self.description = description
        self.user = user
        # Token -> login: who a request with ``Authorization: Bearer|token <token>``
        # acts as. An unknown token is answered 401; no header at all reads
        # anonymously and may not write.
        self.tokens: dict[str, str] = {
            "tok-runner": "ceaseless-bot",
            "tok-label": "ceaseless-labels",
        }
        self.repos: dict[tuple[str, str], Repo] = {}
        self.requests: list[Recorded] = []
        self.violations: list[str] = []
        self._lock = threading.RLock()
        self._released = threading.Event()
        self._ids = iter(range(1000, 10**9))
        handler = type("Handler", (_Handler,), {"forge": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # -- lifecycle -----------------------------------------------------------
    @property
    def url(self) -> str:
        """GitHub's API root on this fake (what a tracked repo's api_url holds)."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def gitea_url(self) -> str:
        return self.url + GITEA_PREFIX

    def start(self) -> FakeForge:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def release(self) -> None:
        """Let hung requests go (they answer 504, as a gateway that gave up would)."""
        self._released.set()

    # -- state for tests -----------------------------------------------------
    def _next_id(self) -> int:
        return next(self._ids)

    def add_repo(self, owner: str, name: str, default_branch: str = "main") -> Repo:
        with self._lock:
            repo = Repo(owner, name, self._next_id(), default_branch)
            self.repos[(owner.lower(), name.lower())] = repo
            return repo

    def repo(self, owner: str, name: str) -> Repo:
        return self.repos[(owner.lower(), name.lower())]

    def label(self, repo: Repo, name: str) -> Label:
        with self._lock:
            if name not in repo.labels:
                repo.labels[name] = Label(self._next_id(), name)
            return repo.labels[name]

    def add_issue(
        self,
        repo: Repo,
        title: str,
        body: str | None = None,
        labels: list[str] | None = None,
        user: str = "octocat",
        state: str = "open",
        comments: list[str] | None = None,
    ) -> Issue:
        with self._lock:
            for name in labels or []:
                self.label(repo, name)
            issue = Issue(len(repo.issues) + 1, title, body, user, [], state)
            self._set_labels(issue, list(labels or []), user)
            for text in comments or []:
                issue.comments.append(self._comment(repo, issue, text, user))
            repo.issues[issue.number] = issue
            return issue

    def add_pull(
        self,
        repo: Repo,
        head: str,
        base: str = "main",
        *,
        title: str | None = None,
        body: str | None = None,
        user: str = "ceaseless-bot",
        draft: bool = False,
        state: str = "open",
    ) -> Issue:
        """A pull request from branch ``head`` (of this repo) into ``base``."""
        with self._lock:
            issue = self.add_issue(repo, title or head, body, user=user, state=state)
            issue.pull = {
                "head": head,
                "base": base,
                "draft": draft,
                "head_sha": hashlib.sha1(f"{repo.id}:{head}".encode()).hexdigest(),
            }
            return issue

    def label_issue(self, repo: Repo, issue: Issue, name: str, by: str) -> None:
        """Add a label to an issue as ``by`` did (a "labeled" event names them)."""
        with self._lock:
            self.label(repo, name)
            if name not in issue.labels:
                self._set_labels(issue, [*issue.labels, name], by)

    def unlabel_issue(self, issue: Issue, name: str, by: str) -> None:
        """Remove a label as ``by`` did (an "unlabeled" event)."""
        with self._lock:
            self._set_labels(issue, [n for n in issue.labels if n != name], by)

    def _set_labels(self, issue: Issue, names: list[str], actor: str) -> None:
        """The issue's labels become ``names``; each addition and removal is an event."""
        for added, changed in (
            (False, [n for n in issue.labels if n not in names]),
            (True, [n for n in names if n not in issue.labels]),
        ):
            for name in changed:
                issue.events.append(
                    {
                        "id": self._next_id(),
                        "added": added,
                        "label": name,
                        "actor": actor,
                        "created_at": _now(),
                    }
                )
        if names != issue.labels:
            issue.labels = names
            issue.updated_at = _now()

    def _comment(self, repo: Repo, issue: Issue, text: str, user: str) -> dict[str, Any]:
        cid = self._next_id()
        api = f"{self.url}/repos/{repo.owner}/{repo.name}"
        return {
            "id": cid,
            "node_id": f"IC_{cid}",
            "url": f"{api}/issues/comments/{cid}",
            "html_url": f"https://github.com/{repo.owner}/{repo.name}/issues/{issue.number}#c{cid}",
            "body": text,
            "user": self._user(user),
            "created_at": _now(),
            "updated_at": _now(),
            "issue_url": f"{api}/issues/{issue.number}",
            "author_association": "NONE",
        }

    def requests_to(self, method: str, path_suffix: str) -> list[Recorded]:
        """The recorded requests with this method whose path ends so."""
        return [r for r in self.requests if r.method == method and r.path.endswith(path_suffix)]

    # -- JSON shapes (fields named as in GitHub's description) ---------------
    def _user(self, login: str) -> dict[str, Any]:
        uid = int(hashlib.sha1(login.encode()).hexdigest()[:6], 16)
        return {
            "login": login,
            "id": uid,
            "node_id": f"U_{uid}",
            "type": "User",
            "site_admin": False,
            "url": f"{self.url}/users/{login}",
            "html_url": f"https://github.com/{login}",
        }

    def _label_json(self, repo: Repo, label: Label) -> dict[str, Any]:
        return {
            "id": label.id,
            "node_id": f"LA_{label.id}",
            "url": f"{self.url}/repos/{repo.owner}/{repo.name}/labels/{quote(label.name)}",
            "name": label.name,
            "description": label.description,
            "color": label.color,
            "default": False,
        }

    def _issue_json(self, repo: Repo, issue: Issue) -> dict[str, Any]:
        api = f"{self.url}/repos/{repo.owner}/{repo.name}"
        html = f"https://github.com/{repo.owner}/{repo.name}"
        kind = "pull" if issue.pull else "issues"
        doc: dict[str, Any] = {
            "id": repo.id * 100000 + issue.number,
            "node_id": f"I_{repo.id}_{issue.number}",
            "url": f"{api}/issues/{issue.number}",
            "repository_url": api,
            "labels_url": f"{api}/issues/{issue.number}/labels{{/name}}",
            "comments_url": f"{api}/issues/{issue.number}/comments",
            "events_url": f"{api}/issues/{issue.number}/events",
            "html_url": f"{html}/{kind}/{issue.number}",
            "number": issue.number,
            "state": issue.state,
            "title": issue.title,
            "body": issue.body,
            "user": self._user(issue.user),
            "labels": [self._label_json(repo, repo.labels[n]) for n in issue.labels],
            "assignee": None,
            "assignees": [],
            "milestone": None,
            "locked": False,
            "comments": len(issue.comments),
            "closed_at": None,
            "created_at": issue.created_at,
            "updated_at": issue.updated_at,
            "author_association": "NONE",
        }
        if issue.pull:
            doc["pull_request"] = {
                "url": f"{api}/pulls/{issue.number}",
                "html_url": f"{html}/pull/{issue.number}",
                "diff_url": f"{html}/pull/{issue.number}.diff",
                "patch_url": f"{html}/pull/{issue.number}.patch",
                "merged_at": None,
            }
        return doc

    def _event_json(self, repo: Repo, issue: Issue, event: dict[str, Any]) -> dict[str, Any]:
        """A GitHub issue event ("labeled" / "unlabeled")."""
        label = self.label(repo, event["label"])
        return {
            "id": event["id"],
            "node_id": f"LE_{event['id']}",
            "url": f"{self.url}/repos/{repo.owner}/{repo.name}/issues/events/{event['id']}",
            "actor": self._user(event["actor"]),
            "event": "labeled" if event["added"] else "unlabeled",
            "commit_id": None,
            "commit_url": None,
            "created_at": event["created_at"],
            "performed_via_github_app": None,
            "label": {"name": label.name, "color": label.color},
        }

    def _timeline_json(self, repo: Repo, issue: Issue, event: dict[str, Any]) -> dict[str, Any]:
        """A Gitea timeline comment of type "label": body "1" added it, "" removed it."""
        html = f"https://gitea.example/{repo.owner}/{repo.name}/issues/{issue.number}"
        return {
            "id": event["id"],
            "type": "label",
            "body": "1" if event["added"] else "",
            "user": self._user(event["actor"]),
            "label": self._label_json(repo, self.label(repo, event["label"])),
            "created_at": event["created_at"],
            "updated_at": event["created_at"],
            "html_url": f"{html}#issuecomment-{event['id']}",
            "issue_url": html,
        }

    def _pull_json(self, repo: Repo, issue: Issue) -> dict[str, Any]:
        assert issue.pull is not None
        api = f"{self.url}/repos/{repo.owner}/{repo.name}"
        doc = self._issue_json(repo, issue)
        pull = {k: doc[k] for k in ("number", "state", "title", "body", "user", "labels")}
        pull |= {
            "id": doc["id"],
            "node_id": f"PR_{repo.id}_{issue.number}",
            "url": f"{api}/pulls/{issue.number}",
            "html_url": doc["pull_request"]["html_url"],
            "issue_url": doc["url"],
            "draft": issue.pull["draft"],
            "created_at": issue.created_at,
            "updated_at": issue.updated_at,
            "closed_at": None,
            "merged_at": None,
            "head": self._ref(repo, issue.pull["head"], issue.pull["head_sha"]),
            "base": self._ref(repo, issue.pull["base"], "0" * 40),
        }
        return pull

    def _ref(self, repo: Repo, branch: str, sha: str) -> dict[str, Any]:
        return {
            "label": f"{repo.owner}:{branch}",
            "ref": branch,
            "sha": sha,
            "user": self._user(repo.owner),
        }


class _Reply(Exception):
    """Raised by a route to answer at once."""

    def __init__(self, status: int, document: Any = None, headers: dict[str, str] | None = None):
        super().__init__(status)
        self.status = status
        self.document = document
        self.headers = headers or {}


class _Handler(BaseHTTPRequestHandler):
    forge: FakeForge
    protocol_version = "HTTP/1.1"
    login: str | None = None  # who the current request acts as; None: anonymous

    def log_message(self, format: str, *args: Any) -> None:  # quiet: pytest shows failures
        return

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def _serve(self, method: str) -> None:
        forge = self.forge
        split = urlsplit(self.path)
        path = unquote(split.path)
        query = parse_qs(split.query, keep_blank_values=True)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        gitea = path.startswith(GITEA_PREFIX + "/")
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        with forge._lock:
            forge.requests.append(
                Recorded(method, path, query, self.headers.get("Authorization"), body, gitea)
            )
        try:
            if gitea:
                self._check_gitea(method, path[len(GITEA_PREFIX) :], query)
                route = path[len(GITEA_PREFIX) :]
            else:
                reasons = forge.description.check_request(
                    method, split.path, query, raw or None, self.headers.get("Content-Type")
                )
                if reasons:
                    with forge._lock:
                        forge.violations.extend(reasons)
                    raise _Reply(400, {"message": "; ".join(reasons)})
                route = path
            self.login = self._authenticate(method)
            status, document, headers = self._route(method, route, query, body, gitea)
        except _Reply as reply:
            status, document, headers = reply.status, reply.document, reply.headers
        # Deliberate breakage (bad_json) is raw bytes and is not checked.
        if not gitea and status < 400 and status != 304 and not isinstance(document, bytes):
            found = forge.description.operation(method, split.path)
            if found is not None:
                problems = forge.description.check_response(found[0], status, document)
                if problems:
                    with forge._lock:
                        forge.violations.extend(f"the fake answered: {p}" for p in problems)
        self._send(status, document, headers)

    def _authenticate(self, method: str) -> str | None:
        """The login the request's token belongs to; 401 for an unknown token or an
        anonymous write. Both forges take either scheme, ``Bearer`` or ``token``."""
        header = self.headers.get("Authorization")
        if header is None:
            if method != "GET":
                raise _Reply(401, {"message": "Requires authentication"})
            return None
        scheme, _, token = header.partition(" ")
        login = self.forge.tokens.get(token.strip())
        if scheme.lower() not in ("bearer", "token") or login is None:
            raise _Reply(401, {"message": "Bad credentials"})
        return login

    def _check_gitea(self, method: str, route: str, query: dict[str, list[str]]) -> None:
        last = route.rstrip("/").split("/")[-1]
        allowed = _GITEA_QUERY.get((method, last), {"page", "limit"} if method == "GET" else set())
        unknown = sorted(set(query) - allowed)
        if unknown:
            reason = f"Gitea {method} {route}: query parameters {unknown} are not accepted"
            with self.forge._lock:
                self.forge.violations.append(reason)
            raise _Reply(400, {"message": reason})

    def _send(self, status: int, document: Any, headers: dict[str, str]) -> None:
        if isinstance(document, bytes):
            payload = document
        elif document is None:
            payload = b""
        else:
            payload = json.dumps(document).encode()
        try:
            self.send_response(status)
            if payload:
                self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            if payload:
                self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            return  # the client gave up (a timeout test); nothing to answer

    # -- routing ---------------------------------------------------------------
    def _route(
        self, method: str, route: str, query: dict[str, list[str]], body: Any, gitea: bool
    ) -> tuple[int, Any, dict[str, str]]:
        parts = route.strip("/").split("/")
        if len(parts) < 4 or parts[0] != "repos":
            raise _Reply(404, {"message": "Not Found"})
        forge = self.forge
        repo = forge.repos.get((parts[1].lower(), parts[2].lower()))
        if repo is None or (repo.private and self.login is None):
            raise _Reply(404, {"message": "Not Found"})
        self._controls(repo)
        rest = parts[3:]
        with forge._lock:
            return self._dispatch(repo, method, rest, query, body, gitea)

    def _controls(self, repo: Repo) -> None:
        if repo.hang:
            self.forge._released.wait()
            raise _Reply(504, {"message": "the fake forge was released"})
        if repo.delay:
            time.sleep(repo.delay)
        if repo.rate_limit is not None:
            status, reset, retry_after = repo.rate_limit
            headers = {
                "x-ratelimit-limit": "5000",
                "x-ratelimit-remaining": "0",
                "x-ratelimit-reset": str(reset),
            }
            if retry_after is not None:
                headers["Retry-After"] = str(retry_after)
            raise _Reply(status, {"message": "API rate limit exceeded"}, headers)
        if repo.fail:
            raise _Reply(500, {"message": "Server Error"})
        if repo.bad_json:
            raise _Reply(200, b'[{"number": 1, "title": ')

    def _dispatch(
        self,
        repo: Repo,
        method: str,
        rest: list[str],
        query: dict[str, list[str]],
        body: Any,
        gitea: bool,
    ) -> tuple[int, Any, dict[str, str]]:
        forge = self.forge
        match (method, rest):
            case ("GET", ["issues"]):
                return self._list_issues(repo, query, gitea)
            case ("POST", ["issues"]):
                return 201, forge._issue_json(repo, self._create_issue(repo, body, gitea)), {}
            case ("GET", ["issues", number]):
                return 200, forge._issue_json(repo, self._issue(repo, number)), {}
            case ("GET", ["issues", number, "comments"]):
                issue = self._issue(repo, number)
                return self._page(issue.comments, query, gitea)
            case ("GET", ["issues", number, "events"]) if not gitea:
                issue = self._issue(repo, number)
                events = [forge._event_json(repo, issue, e) for e in issue.events]
                return self._page(events, query, gitea)
            case ("GET", ["issues", number, "timeline"]) if gitea:
                issue = self._issue(repo, number)
                events = [forge._timeline_json(repo, issue, e) for e in issue.events]
                return self._page(events, query, gitea)
            case ("POST" | "PUT", ["issues", number, "labels"]):
                issue = self._issue(repo, number)
                names = self._label_names(repo, body, gitea)
                if method == "POST":
                    names = issue.labels + [n for n in names if n not in issue.labels]
                forge._set_labels(issue, names, self._actor())
                return 200, [forge._label_json(repo, repo.labels[n]) for n in issue.labels], {}
            case ("DELETE", ["issues", number, "labels", name]):
                issue = self._issue(repo, number)
                if gitea:
                    name = self._label_by_id(repo, name).name
                if name not in issue.labels:
                    raise _Reply(404, {"message": "Label does not exist"})
                forge._set_labels(issue, [n for n in issue.labels if n != name], self._actor())
                if gitea:
                    return 204, None, {}
                return 200, [forge._label_json(repo, repo.labels[n]) for n in issue.labels], {}
            case ("GET", ["labels"]):
                labels = [forge._label_json(repo, lb) for lb in repo.labels.values()]
                return self._page(labels, query, gitea)
            case ("POST", ["labels"]):
                return 201, forge._label_json(repo, self._create_label(repo, body)), {}
            case ("GET", ["pulls"]):
                return self._list_pulls(repo, query, gitea)
            case ("GET", ["pulls", base, *head_parts]) if gitea and head_parts:
                # Gitea's route is /pulls/{base}/*: a head branch may hold slashes.
                head = "/".join(head_parts)
                for issue in repo.issues.values():
                    if issue.pull and issue.pull["base"] == base and issue.pull["head"] == head:
                        return 200, forge._pull_json(repo, issue), {}
                raise _Reply(404, {"message": "pull request does not exist"})
            case ("POST", ["pulls"]):
                return 201, forge._pull_json(repo, self._create_pull(repo, body)), {}
        raise _Reply(404, {"message": "Not Found"})

    def _actor(self) -> str:
        return self.login or self.forge.user

    def _create_label(self, repo: Repo, body: Any) -> Label:
        if not isinstance(body, dict) or not body.get("name"):
            raise _Reply(422, {"message": "Validation Failed"})
        name = str(body["name"])
        if name in repo.labels:
            raise _Reply(422, {"message": f"label {name} already exists"})
        label = self.forge.label(repo, name)
        label.color = str(body.get("color") or label.color).lstrip("#")
        label.description = body.get("description")
        return label

    def _issue(self, repo: Repo, number: str) -> Issue:
        issue = repo.issues.get(int(number)) if number.isdigit() else None
        if issue is None:
            raise _Reply(404, {"message": "Not Found"})
        return issue

    def _label_by_id(self, repo: Repo, text: Any) -> Label:
        for label in repo.labels.values():
            if str(label.id) == str(text):
                return label
        raise _Reply(422, {"message": f"label {text} does not exist"})

    def _label_names(self, repo: Repo, body: Any, gitea: bool) -> list[str]:
        items = body.get("labels", []) if isinstance(body, dict) else (body or [])
        if isinstance(items, str):
            items = [items]
        names: list[str] = []
        for item in items:
            if gitea and isinstance(item, int):
                names.append(self._label_by_id(repo, item).name)
            elif isinstance(item, dict):
                names.append(self.forge.label(repo, item["name"]).name)
            elif gitea and str(item) not in repo.labels:
                raise _Reply(422, {"message": f"label {item} does not exist"})
            else:
                names.append(self.forge.label(repo, str(item)).name)
        return names

    def _create_issue(self, repo: Repo, body: Any, gitea: bool) -> Issue:
        if not isinstance(body, dict) or not body.get("title"):
            raise _Reply(422, {"message": "Validation Failed"})
        names = self._label_names(repo, {"labels": body.get("labels", [])}, gitea)
        return self.forge.add_issue(
            repo, str(body["title"]), body.get("body"), names, user=self._actor()
        )

    def _create_pull(self, repo: Repo, body: Any) -> Issue:
        if not isinstance(body, dict) or not body.get("head") or not body.get("base"):
            raise _Reply(422, {"message": "Validation Failed"})
        head = str(body["head"]).split(":", 1)[-1]
        for issue in repo.issues.values():
            if issue.pull and issue.pull["head"] == head and issue.state == "open":
                raise _Reply(422, {"message": f"A pull request already exists for {head}."})
        issue = self.forge.add_pull(
            repo,
            head,
            str(body["base"]),
            title=str(body.get("title") or head),
            body=body.get("body"),
            user=self._actor(),
            draft=bool(body.get("draft", False)),
        )
        return issue

    def _list_issues(
        self, repo: Repo, query: dict[str, list[str]], gitea: bool
    ) -> tuple[int, Any, dict[str, str]]:
        state = query.get("state", ["open"])[0]
        wanted = [n for n in query.get("labels", [""])[0].split(",") if n]
        kind = query.get("type", [""])[0] if gitea else ""
        # GitHub's defaults: sort=created, direction=desc. Gitea lists newest first.
        sort = query.get("sort", ["created"])[0]
        descending = query.get("direction", ["desc"])[0] == "desc"

        def key(i: Issue) -> tuple[Any, int]:
            if sort == "updated":
                return (i.updated_at, i.number)
            if sort == "comments":
                return (len(i.comments), i.number)
            return (i.number, i.number)  # numbers are given in order of creation

        issues = [
            i
            for i in sorted(repo.issues.values(), key=key, reverse=descending)
            if (state == "all" or i.state == state)
            and all(n in i.labels for n in wanted)
            and not (kind == "issues" and i.pull)
            and not (kind == "pulls" and not i.pull)
        ]
        return self._page([self.forge._issue_json(repo, i) for i in issues], query, gitea)

    def _list_pulls(
        self, repo: Repo, query: dict[str, list[str]], gitea: bool
    ) -> tuple[int, Any, dict[str, str]]:
        state = query.get("state", ["open"])[0]
        head = query.get("head", [""])[0]
        base = query.get("base", [""])[0]
        pulls = [
            i
            for i in sorted(repo.issues.values(), key=lambda i: i.number, reverse=True)
            if i.pull
            and (state == "all" or i.state == state)
            and (not head or f"{repo.owner}:{i.pull['head']}" == head)
            and (not base or i.pull["base"] == base)
        ]
        return self._page([self.forge._pull_json(repo, i) for i in pulls], query, gitea)

    def _page(
        self, items: list[Any], query: dict[str, list[str]], gitea: bool
    ) -> tuple[int, Any, dict[str, str]]:
        size_key = "limit" if gitea else "per_page"
        size = max(1, min(100, int(query.get(size_key, ["30"])[0])))
        page = max(1, int(query.get("page", ["1"])[0]))
        last = max(1, -(-len(items) // size))
        chunk = items[(page - 1) * size : page * size]
        headers: dict[str, str] = {}
        links = []
        for rel, number in (
            ("prev", page - 1 if page > 1 else None),
            ("next", page + 1 if page < last else None),
            ("last", last if page < last else None),
            ("first", 1 if page > 1 else None),
        ):
            if number is not None:
                links.append(f'<{self._page_url(query, number)}>; rel="{rel}"')
        if links:
            headers["Link"] = ", ".join(links)
        if gitea:
            headers["X-Total-Count"] = str(len(items))
        tag = 'W/"' + hashlib.sha256(json.dumps(chunk, sort_keys=True).encode()).hexdigest() + '"'
        headers["ETag"] = tag
        if tag in [t.strip() for t in (self.headers.get("If-None-Match") or "").split(",")]:
            return 304, None, headers
        return 200, chunk, headers

    def _page_url(self, query: dict[str, list[str]], page: int) -> str:
        split = urlsplit(self.path)
        params = {k: v[0] for k, v in query.items()} | {"page": str(page)}
        return f"{self.forge.url}{split.path}?{urlencode(params)}"


def wait_until(predicate: Any, timeout: float = 5.0) -> bool:
    """Poll a condition a test waits on (a hung request reaching the fake)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def check_no_violations(forge: FakeForge) -> None:
    """Fail the test when any request (or answer) broke GitHub's description."""
    if forge.violations:
        listed = "\n  ".join(forge.violations)
        pytest.fail(
            f"{len(forge.violations)} request(s) to the fake forge broke GitHub's API "
            f"description:\n  {listed}",
            pytrace=False,
        )
