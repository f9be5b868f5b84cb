"""An async REST client for one GitHub or Gitea repository: the calls the forge lane makes.

The poller lists open issues (conditionally, with the last ETag), the runner
reads an issue and its comments and looks a pull request up by its head
branch, the plan step creates child issues, and the label mirror adds and
removes labels. GitHub and Gitea differ only where this module says so: paging
(`per_page` against `limit`), label calls (names against ids), who added a
label (events against the timeline) and the pull-request lookup.

Guarantees:
- every request ends within ``timeout`` seconds (connecting included); a
  listing or any paged call follows at most ``MAX_PAGES`` pages;
- a failure raises :class:`ForgeError` (or :class:`RateLimited`) whose message
  names the method, the path and the status, never the token, the query string
  or a URL with credentials; ``status`` is None for a timeout, a connection
  error or a body that is not JSON;
- the token is sent only to the host of ``api_url``: a ``Link`` that points
  anywhere else ends the paging with an error instead of being followed;
- a rate limit (429, or 403 with ``Retry-After`` or ``x-ratelimit-remaining: 0``)
  raises :class:`RateLimited` with ``retry_at``, an aware UTC datetime, so the
  caller can defer the repo rather than hammer the forge;
- nothing is decided here: which issues matter, admission and labels are SQL's.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from types import TracebackType
from typing import Any, Protocol, TypeVar
from urllib.parse import quote, urlencode, urlsplit

import aiohttp
from multidict import CIMultiDict
from yarl import URL

# Bounds on paging: a repo with more open issues than this is listed partially
# rather than letting one poll run for minutes (50 x 100 GitHub issues).
MAX_PAGES = 50
# Marker search reads the newest issues only: a child issue is created moments
# before the retry that looks for it.
MARKER_PAGES = 3
GITHUB_PAGE = 100
GITEA_PAGE = 50  # Gitea's default MAX_RESPONSE_ITEMS caps a page at 50
# GitHub's advice for a secondary rate limit that names no time: wait a minute.
DEFAULT_RETRY = timedelta(seconds=60)
# Gitea has no way to create a label implicitly; new labels get this colour.
LABEL_COLOR = "#ededed"
_ERROR_TEXT = 200

_LINK = re.compile(r'<([^>]+)>\s*;\s*rel="?([^";]+)"?')


@dataclass(frozen=True)
class ForgeRepo:
    """Which repository, on which forge; ``api_url`` has no trailing slash."""

    forge: str  # 'github' | 'gitea'
    api_url: str
    owner: str
    repo: str


class InRepo(Protocol):
    """A row that names its repository (a due label change, a due child issue)."""

    @property
    def forge(self) -> str: ...
    @property
    def api_url(self) -> str: ...
    @property
    def owner(self) -> str: ...
    @property
    def repo(self) -> str: ...


R = TypeVar("R", bound=InRepo)


async def per_repo(rows: Iterable[R], work: Callable[[ForgeRepo, list[R]], Awaitable[int]]) -> int:
    """Run `work` once per repository on its rows, in the order given, every repository at
    once (one client, one identity each); the sum of what each returned."""
    batches: dict[ForgeRepo, list[R]] = {}
    for row in rows:
        batches.setdefault(ForgeRepo(row.forge, row.api_url, row.owner, row.repo), []).append(row)
    return sum(await asyncio.gather(*(work(repo, batch) for repo, batch in batches.items())))


class ForgeError(Exception):
    """A call failed; the message names method, path and status, never a token."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RateLimited(ForgeError):
    """The forge asked us to wait until ``retry_at`` (aware, UTC)."""

    def __init__(self, message: str, status: int, retry_at: datetime) -> None:
        super().__init__(message, status)
        self.retry_at = retry_at


T = TypeVar("T")


async def within(timeout: float, doing: str, call: Awaitable[T]) -> T:
    """`call`'s result, or a ForgeError once it has taken `timeout` seconds: a forge step
    that hangs is one more failure of that step, recorded and retried like the others."""
    try:
        async with asyncio.timeout(timeout):
            return await call
    except TimeoutError:
        raise ForgeError(f"{doing} took longer than {timeout:g} s and was given up") from None


class NoToken(Exception):
    """A repository's rows get no forge call this time: the message says why (the token
    could not be read, or the identity they need has none for the repo)."""


async def each_per_repo(
    rows: Iterable[R],
    token: Callable[[R], str | None],
    step: Callable[[ForgeClient, R], Awaitable[T]],
    *,
    doing: str,
    timeout: float,
    done: Callable[[R, T], Awaitable[None]],
    failed: Callable[[R, str], Awaitable[None]],
) -> int:
    """Run `step` on every row, per repository (`per_repo`), with one client each, whose
    token `token` gives for the repository's first row; how many rows were `done`.

    A step the forge refuses or that takes `timeout` seconds (`doing` names it) is `failed`
    with its error and never stops the rows after it; `token` raising NoToken fails every
    row of its repository with its message and calls the forge for none of them.
    """

    async def in_repo(repo: ForgeRepo, batch: list[R]) -> int:
        try:
            secret = token(batch[0])
        except NoToken as exc:
            for row in batch:
                await failed(row, str(exc))
            return 0
        count = 0
        async with ForgeClient(repo, secret, timeout=timeout) as client:
            for row in batch:
                try:
                    result = await within(timeout, doing, step(client, row))
                except ForgeError as exc:
                    await failed(row, str(exc))
                    continue
                await done(row, result)
                count += 1
        return count

    return await per_repo(rows, in_repo)


@dataclass(frozen=True)
class Listing:
    """Open issues (pull requests excluded), or None after a 304; the first page's ETag."""

    issues: list[dict[str, Any]] | None
    etag: str | None


@dataclass(frozen=True)
class Issue:
    number: int
    title: str
    body: str
    author: str
    labels: list[str]
    html_url: str
    state: str


@dataclass(frozen=True)
class Comment:
    author: str
    body: str
    created_at: str


@dataclass(frozen=True)
class PullRequest:
    number: int
    head_branch: str
    html_url: str
    state: str


@dataclass(frozen=True)
class _Answer:
    status: int
    data: Any
    headers: Mapping[str, str]
    next_url: str | None


def _login(user: Any) -> str:
    return str(user.get("login") or "") if isinstance(user, dict) else ""


def _label_names(labels: Any) -> list[str]:
    return [str(lb["name"]) if isinstance(lb, dict) else str(lb) for lb in labels or []]


def _issue(doc: Mapping[str, Any]) -> Issue:
    return Issue(
        number=int(doc["number"]),
        title=str(doc.get("title") or ""),
        body=str(doc.get("body") or ""),
        author=_login(doc.get("user")),
        labels=_label_names(doc.get("labels")),
        html_url=str(doc.get("html_url") or ""),
        state=str(doc.get("state") or ""),
    )


def _listed(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "number": int(doc["number"]),
        "title": str(doc.get("title") or ""),
        "author": _login(doc.get("user")),
        "labels": _label_names(doc.get("labels")),
        "html_url": str(doc.get("html_url") or ""),
        "updated_at": doc.get("updated_at"),
    }


def _is_pull(doc: Mapping[str, Any]) -> bool:
    # GitHub lists pull requests among issues with a "pull_request" object;
    # Gitea sets it to null on plain issues.
    return bool(doc.get("pull_request"))


def _next_link(header: str | None) -> str | None:
    for url, rel in _LINK.findall(header or ""):
        if "next" in rel.split():
            return url
    return None


def _retry_at(status: int, headers: Mapping[str, str], now: datetime) -> datetime | None:
    """When a rate-limited answer says to come back; None if it is no rate limit."""
    retry_after = headers.get("Retry-After")
    if retry_after:
        if retry_after.strip().isdigit():
            return now + timedelta(seconds=int(retry_after.strip()))
        try:
            when = parsedate_to_datetime(retry_after)
        except (TypeError, ValueError):
            when = None
        if when is not None:
            return when.astimezone(UTC) if when.tzinfo else when.replace(tzinfo=UTC)
    reset = headers.get("x-ratelimit-reset")
    if headers.get("x-ratelimit-remaining") == "0" and reset and reset.strip().isdigit():
        return datetime.fromtimestamp(int(reset.strip()), UTC)
    if status == 429:
        return now + DEFAULT_RETRY
    return None


class ForgeClient:
    """One repository's REST calls; use as ``async with ForgeClient(...) as forge``."""

    def __init__(self, repo: ForgeRepo, token: str | None, *, timeout: float = 30.0) -> None:
        if repo.forge not in ("github", "gitea"):
            raise ValueError(f"unknown forge {repo.forge!r}: expected github or gitea")
        self.repo = repo
        self._token = token
        self._timeout = timeout
        self._gitea = repo.forge == "gitea"
        self._api = repo.api_url.rstrip("/")
        self._origin = urlsplit(self._api)[:2]
        self._base = f"/repos/{quote(repo.owner, safe='')}/{quote(repo.repo, safe='')}"
        self._http: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:  # never the token
        return f"ForgeClient({self.repo.forge} {self.repo.owner}/{self.repo.repo})"

    async def __aenter__(self) -> ForgeClient:
        headers = {"User-Agent": "ceaseless", "Accept": "application/json"}
        if not self._gitea:
            headers["Accept"] = "application/vnd.github+json"
            headers["X-GitHub-Api-Version"] = "2022-11-28"
        if self._token:
            scheme = "token" if self._gitea else "Bearer"
            headers["Authorization"] = f"{scheme} {self._token}"
        self._http = aiohttp.ClientSession(
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=self._timeout),
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    # -- plumbing ------------------------------------------------------------
    def _url(self, path: str, params: Mapping[str, Any] | None = None) -> str:
        url = f"{self._api}{self._base}{path}"
        return f"{url}?{urlencode(params)}" if params else url

    def _shown(self, url: str) -> str:
        """The path a message names: no scheme, host, query or credentials."""
        return urlsplit(url).path

    def _redact(self, text: str) -> str:
        if self._token and self._token in text:
            text = text.replace(self._token, "[redacted]")
        return text

    async def _call(
        self,
        method: str,
        url: str,
        *,
        body: Any = None,
        etag: str | None = None,
        ok: Sequence[int] = (200,),
    ) -> _Answer:
        """One request; raises ForgeError / RateLimited unless the status is in ``ok``."""
        if self._http is None:
            raise RuntimeError("ForgeClient used outside 'async with'")
        if urlsplit(url)[:2] != self._origin:
            # A Link (or anything) pointing at another host must not get the token.
            raise ForgeError(f"{method} {self._shown(url)}: refusing a URL on another host")
        shown = f"{method} {self._shown(url)}"
        headers = {"If-None-Match": etag} if etag else {}
        try:
            async with self._http.request(
                method,
                URL(url, encoded=True),
                json=body,
                headers=headers,
                # A redirect would carry the Authorization header wherever it
                # points; a moved repo is an error the operator should see.
                allow_redirects=False,
            ) as response:
                raw = await response.read()
                status = response.status
                answer_headers = CIMultiDict(response.headers)
        except TimeoutError:
            raise ForgeError(f"{shown}: no answer within {self._timeout:g} s") from None
        except aiohttp.ClientError as exc:
            reason = self._redact(f"{type(exc).__name__}: {exc}"[:_ERROR_TEXT])
            raise ForgeError(f"{shown}: connection failed ({reason})") from None
        if status not in ok:
            self._refuse(shown, status, raw, answer_headers)
        data: Any = None
        if raw and status != 304:
            try:
                data = json.loads(raw)
            except ValueError:
                raise ForgeError(f"{shown}: HTTP {status} with a body that is not JSON") from None
        return _Answer(status, data, answer_headers, _next_link(answer_headers.get("Link")))

    def _refuse(self, shown: str, status: int, raw: bytes, headers: Mapping[str, str]) -> None:
        message = ""
        try:
            doc = json.loads(raw) if raw else None
            if isinstance(doc, dict) and isinstance(doc.get("message"), str):
                message = ": " + self._redact(doc["message"][:_ERROR_TEXT])
        except ValueError:
            pass
        if status in (403, 429):
            retry_at = _retry_at(status, headers, datetime.now(UTC))
            if retry_at is not None:
                raise RateLimited(
                    f"{shown}: HTTP {status}, rate limited until {retry_at.isoformat()}{message}",
                    status,
                    retry_at,
                )
        raise ForgeError(f"{shown}: HTTP {status}{message}", status)

    def _page_params(self) -> dict[str, Any]:
        return {"limit": GITEA_PAGE} if self._gitea else {"per_page": GITHUB_PAGE}

    async def _pages(
        self, path: str, params: Mapping[str, Any], max_pages: int = MAX_PAGES
    ) -> list[Any]:
        """Every item of a paged list, following Link rel="next" up to ``max_pages``."""
        items: list[Any] = []
        url: str | None = self._url(path, {**params, **self._page_params()})
        for _ in range(max_pages):
            if url is None:
                break
            answer = await self._call("GET", url)
            if not isinstance(answer.data, list):
                raise ForgeError(f"GET {self._shown(url)}: expected a list")
            items.extend(doc for doc in answer.data if isinstance(doc, dict))
            url = answer.next_url
        return items

    # -- issues --------------------------------------------------------------
    async def list_open_issues(self, etag: str | None) -> Listing:
        """Every open issue, most recently updated first; ``issues`` None on a 304.

        ``If-None-Match`` goes with the first page only: with sort=updated any
        change to an open issue moves it onto that page, so its tag changes.
        """
        params: dict[str, Any] = {"state": "open"}
        if self._gitea:
            params["type"] = "issues"
        else:
            params |= {"sort": "updated", "direction": "desc"}
        url = self._url("/issues", {**params, **self._page_params()})
        answer = await self._call("GET", url, etag=etag, ok=(200, 304))
        new_etag = answer.headers.get("ETag") or etag
        if answer.status == 304:
            return Listing(None, new_etag)
        issues: list[dict[str, Any]] = []
        for page in range(1, MAX_PAGES + 1):
            if not isinstance(answer.data, list):
                raise ForgeError(f"GET {self._shown(url)}: expected a list")
            issues.extend(_listed(doc) for doc in answer.data if not _is_pull(doc))
            if answer.next_url is None or page == MAX_PAGES:
                # Past MAX_PAGES the least recently updated issues are left out.
                break
            url = answer.next_url
            answer = await self._call("GET", url)
        return Listing(issues, new_etag)

    async def issue(self, number: int) -> Issue:
        answer = await self._call("GET", self._url(f"/issues/{int(number)}"))
        return _issue(answer.data)

    async def comments(self, number: int) -> list[Comment]:
        """Every comment of an issue, oldest first (at most MAX_PAGES pages)."""
        docs = await self._pages(f"/issues/{int(number)}/comments", {})
        return [
            Comment(_login(d.get("user")), str(d.get("body") or ""), str(d.get("created_at")))
            for d in docs
        ]

    async def create_issue(self, title: str, body: str) -> Issue:
        answer = await self._call(
            "POST", self._url("/issues"), body={"title": title, "body": body}, ok=(201,)
        )
        return _issue(answer.data)

    async def find_issue_with_marker(self, marker: str) -> Issue | None:
        """The newest issue (open or closed) whose body contains ``marker``, if any."""
        params: dict[str, Any] = {"state": "all"}
        if self._gitea:
            params["type"] = "issues"  # Gitea lists newest first
        else:
            params |= {"sort": "created", "direction": "desc"}
        for doc in await self._pages("/issues", params, max_pages=MARKER_PAGES):
            if not _is_pull(doc) and marker in str(doc.get("body") or ""):
                return _issue(doc)
        return None

    async def labellers(self, number: int, labels: Sequence[str]) -> dict[str, str]:
        """Label name -> login of whoever most recently added it, for the labels asked."""
        wanted = set(labels)
        found: dict[str, str] = {}
        if self._gitea:
            # Gitea's timeline: a "label" comment with body "1" added it, "" removed it.
            events = await self._pages(f"/issues/{int(number)}/timeline", {})
            added = [
                (e.get("label") or {}, e.get("user"))
                for e in events
                if e.get("type") == "label" and str(e.get("body") or "") == "1"
            ]
        else:
            events = await self._pages(f"/issues/{int(number)}/events", {})
            added = [
                (e.get("label") or {}, e.get("actor"))
                for e in events
                if e.get("event") == "labeled"
            ]
        # Both lists are oldest first: the last addition wins.
        for label, who in added:
            name = str(label.get("name") or "") if isinstance(label, dict) else ""
            login = _login(who)
            if name in wanted and login:
                found[name] = login
        return found

    # -- labels --------------------------------------------------------------
    async def _gitea_label_id(self, name: str, create: bool) -> int | None:
        for doc in await self._pages("/labels", {}):
            if doc.get("name") == name:
                return int(doc["id"])
        if not create:
            return None
        answer = await self._call(
            "POST", self._url("/labels"), body={"name": name, "color": LABEL_COLOR}, ok=(201,)
        )
        return int(answer.data["id"])

    async def add_label(self, number: int, name: str) -> None:
        """Add one label (GitHub creates a missing label; on Gitea it is created first)."""
        path = f"/issues/{int(number)}/labels"
        if self._gitea:
            label_id = await self._gitea_label_id(name, create=True)
            await self._call("POST", self._url(path), body={"labels": [label_id]})
        else:
            await self._call("POST", self._url(path), body={"labels": [name]})

    async def remove_label(self, number: int, name: str) -> None:
        """Remove one label; a label the issue (or the repo) does not have is fine."""
        if self._gitea:
            label_id = await self._gitea_label_id(name, create=False)
            if label_id is None:
                return
            segment = str(label_id)
        else:
            segment = quote(name, safe="")
        url = self._url(f"/issues/{int(number)}/labels/{segment}")
        await self._call("DELETE", url, ok=(200, 204, 404))

    # -- pull requests -------------------------------------------------------
    async def pull_by_head(self, head_branch: str, base: str) -> PullRequest | None:
        """The newest pull request from ``head_branch`` in this repo, or None."""
        if self._gitea:
            # Gitea's route is /pulls/{base}/*: the head may hold slashes.
            url = self._url(f"/pulls/{quote(base, safe='')}/{quote(head_branch, safe='/')}")
            answer = await self._call("GET", url, ok=(200, 404))
            if answer.status == 404:
                return None
            docs = [answer.data]
        else:
            params = {"head": f"{self.repo.owner}:{head_branch}", "state": "all"}
            answer = await self._call("GET", self._url("/pulls", params))
            docs = answer.data if isinstance(answer.data, list) else []
        for doc in docs:
            head = doc.get("head") or {}
            if head.get("ref") == head_branch:
                return PullRequest(
                    number=int(doc["number"]),
                    head_branch=str(head["ref"]),
                    html_url=str(doc.get("html_url") or ""),
                    state=str(doc.get("state") or ""),
                )
        return None


__all__ = [
    "Comment",
    "ForgeClient",
    "ForgeError",
    "ForgeRepo",
    "Issue",
    "Listing",
    "PullRequest",
    "RateLimited",
]
