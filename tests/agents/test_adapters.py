"""adapter_for and the noop agent."""

from __future__ import annotations

import pytest

from listener.agents import adapter_for, run_noop
from listener.agents.claude_code import ClaudeCodeAdapter
from listener.agents.command import CommandAdapter
from listener.agents.opencode import OpencodeAdapter
from listener.enums import Adapter, Outcome


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (Adapter.CLAUDE_CODE, ClaudeCodeAdapter),
        (Adapter.OPENCODE, OpencodeAdapter),
        (Adapter.COMMAND, CommandAdapter),
        ("claude_code", ClaudeCodeAdapter),
    ],
)
def test_adapter_for_each_subprocess_kind(kind, expected):
    assert isinstance(adapter_for(kind), expected)


def test_every_adapter_kind_is_covered():
    for kind in Adapter:
        if kind is not Adapter.NOOP:
            assert adapter_for(kind) is not None


def test_noop_has_no_adapter():
    with pytest.raises(ValueError, match="run_noop"):
        adapter_for(Adapter.NOOP)


def test_unknown_kind_is_rejected():
    with pytest.raises(ValueError, match="no agent adapter"):
        adapter_for("telepathy")  # type: ignore[arg-type]


def test_parsers_are_fresh_for_every_run():
    adapter = adapter_for(Adapter.CLAUDE_CODE)
    assert adapter.parser() is not adapter.parser()


def test_noop_succeeds_at_once():
    result = run_noop()
    assert result.outcome == Outcome.SUCCEEDED
    assert result.final_message == "noop"
    assert result.error is None
