"""Fixtures for fault tests: a freezing proxy in front of the test's database, and an
agent watch that sees only the agents of this test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.chaos.agents import AgentWatch
from tests.chaos.proxy import FreezingProxy


@pytest.fixture
def proxy(db_url: str) -> Iterator[FreezingProxy]:
    """A `FreezingProxy` in front of this test's database; `proxy.url()` reaches it."""
    with FreezingProxy(db_url) as running:
        yield running


@pytest.fixture
def agent_watch() -> Iterator[AgentWatch]:
    """An `AgentWatch` of processes with CHAOS_TAG=<unique>; put `agent_watch.match`
    into the environment of the listeners (or agents) the test starts."""
    with AgentWatch(match={"CHAOS_TAG": uuid.uuid4().hex}) as watch:
        yield watch
