"""The forge client against the fake forge, on its GitHub and its Gitea side."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from listener.forge.client import ForgeClient, ForgeRepo
from tests.fakes.forge import FakeForge

T = TypeVar("T")
FORGES = ["github", "gitea"]


def client(
    fake_forge: FakeForge, forge: str, token: str | None = "tok-runner", **kw: Any
) -> ForgeClient:
    api = fake_forge.gitea_url if forge == "gitea" else fake_forge.url
    return ForgeClient(ForgeRepo(forge, api, "acme", "widgets"), token, **kw)


def run(forge: ForgeClient, call: Callable[[ForgeClient], Awaitable[T]]) -> T:
    async def go() -> T:
        async with forge:
            return await call(forge)

    return asyncio.run(go())


@pytest.mark.parametrize("forge", FORGES)
def test_smoke(fake_forge: FakeForge, forge: str) -> None:
    repo = fake_forge.add_repo("acme", "widgets")
    fake_forge.add_issue(repo, "one", "body", labels=["plan"], comments=["hi"])
    listing = run(client(fake_forge, forge), lambda f: f.list_open_issues(None))
    assert listing.issues and listing.issues[0]["title"] == "one"
    issue = run(client(fake_forge, forge), lambda f: f.issue(1))
    assert issue.body == "body"
    comments = run(client(fake_forge, forge), lambda f: f.comments(1))
    assert [c.body for c in comments] == ["hi"]
    created = run(client(fake_forge, forge), lambda f: f.create_issue("t", "b"))
    assert created.number == 2
    assert run(client(fake_forge, forge), lambda f: f.pull_by_head("x", "main")) is None
