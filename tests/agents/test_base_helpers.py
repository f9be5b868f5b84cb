"""The parsing helpers shared by the adapters (listener/agents/base.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from listener.agents.base import (
    FINAL_MESSAGE_LIMIT,
    TextTail,
    decode_json_object,
    find_pull_request,
    json_count,
    json_number,
    parse_timestamp,
    with_stderr,
)
from listener.enums import Forge


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b'{"a": 1}', {"a": 1}),
        (b'  {"a": 1}\r', {"a": 1}),
        (b"[1]", None),
        (b'"text"', None),
        (b"{broken", None),
        (b"\xff{", None),
        (b"{" + b'"a":' * 10 + b"1", None),
        (b"", None),
    ],
)
def test_decode_json_object(line, expected):
    assert decode_json_object(line) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, datetime(1970, 1, 1, tzinfo=UTC)),
        (1755615600, datetime(2025, 8, 19, 15, tzinfo=UTC)),
        (1755615600.5, datetime(2025, 8, 19, 15, 0, 0, 500000, tzinfo=UTC)),
        ("1755615600", datetime(2025, 8, 19, 15, tzinfo=UTC)),
        ("2025-08-19T17:00:00+02:00", datetime(2025, 8, 19, 15, tzinfo=UTC)),
        ("2025-08-19T15:00:00Z", datetime(2025, 8, 19, 15, tzinfo=UTC)),
        ("2025-08-19 15:00", datetime(2025, 8, 19, 15, tzinfo=UTC)),
        (True, None),
        (None, None),
        ("soon", None),
        (10**20, None),
        (float("nan"), None),
        ([1], None),
    ],
)
def test_parse_timestamp(value, expected):
    assert parse_timestamp(value) == expected


def test_json_field_readers():
    assert [json_count(v) for v in (3, 0, -1, True, 2.0, "3", None)] == [
        3,
        0,
        None,
        None,
        None,
        None,
        None,
    ]
    assert [json_number(v) for v in (0.5, 2, -1, False, float("inf"), "1")] == [
        0.5,
        2.0,
        None,
        None,
        None,
        None,
    ]


def test_with_stderr():
    assert with_stderr("failed", "  \n") == "failed"
    assert with_stderr("failed", "boom\n") == "failed\nstderr (tail):\nboom"


def test_text_tail_keeps_the_end_within_the_limit():
    tail = TextTail(limit=10)
    assert tail.text() == ""
    for piece in ("abc", "defgh", "ijklmnop"):
        tail.append(piece)
    assert tail.text() == "…hijklmnop"
    tail.append("x" * 50)
    assert tail.text() == "…" + "x" * 9


@given(st.lists(st.text(max_size=50), max_size=50))
def test_text_tail_matches_the_naive_tail(pieces):
    tail = TextTail(limit=40)
    for piece in pieces:
        tail.append(piece)
    whole = "".join(pieces)
    expected = whole if len(whole) <= 40 else "…" + whole[-39:]
    assert tail.text() == expected


def test_text_tail_default_limit_is_the_final_message_limit():
    tail = TextTail()
    tail.append("y" * (FINAL_MESSAGE_LIMIT * 2))
    assert len(tail.text()) == FINAL_MESSAGE_LIMIT


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "PR: https://github.com/acme/app/pull/12\nbranch: fix/x",
            (Forge.GITHUB, "acme", "app", 12, "fix/x", "https://github.com/acme/app/pull/12"),
        ),
        (
            "[PR](https://github.com/acme/app/pull/12/files).\n* Head branch: `fix/x`",
            (Forge.GITHUB, "acme", "app", 12, "fix/x", "https://github.com/acme/app/pull/12"),
        ),
        (
            "head_branch = feature/y\nhttps://git.corp:3000/sub/path/team/svc/pulls/3",
            (
                Forge.GITEA,
                "team",
                "svc",
                3,
                "feature/y",
                "https://git.corp:3000/sub/path/team/svc/pulls/3",
            ),
        ),
        (
            "https://github.com/a/b/pull/1 and again https://github.com/a/b/pull/1\nbranch: z",
            (Forge.GITHUB, "a", "b", 1, "z", "https://github.com/a/b/pull/1"),
        ),
    ],
)
def test_find_pull_request(text, expected):
    pr = find_pull_request(text)
    assert pr is not None
    assert (pr.forge, pr.owner, pr.repo, pr.number, pr.head_branch, pr.url) == expected


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "no links here\nbranch: x",
        "https://github.com/a/b/pull/1",  # no branch
        "https://github.com/a/b/pull/1\nhttps://github.com/a/b/pull/2\nbranch: x",  # two PRs
        "https://github.com/a/b/pull/1\nbranch: x\nbranch: y",  # two branches
        "https://github.com/a/b/issues/1\nbranch: x",  # an issue, not a PR
        "https://github.com/a/b/pull/1\nbranch: ../etc",  # not a branch name
        "https://github.com/a/b/pulls\nbranch: x",  # the list, not a PR
    ],
)
def test_find_pull_request_refuses_to_guess(text):
    assert find_pull_request(text) is None
