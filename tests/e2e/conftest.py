"""Fixtures for end-to-end tests: listener processes that are always stopped."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.e2e.support import ListenerProcess


@pytest.fixture
def start_listener(db_url: str) -> Iterator[Callable[..., ListenerProcess]]:
    started: list[ListenerProcess] = []

    def start(*args: str, worker_id: str | None = None, url: str | None = None) -> ListenerProcess:
        process = ListenerProcess(
            url or db_url, *args, worker_id=worker_id or f"listener-{len(started) + 1}"
        )
        started.append(process)
        return process.ready()

    yield start
    for process in started:
        process.stop(timeout=10)
