"""Every SQLSTATE our functions raise is listed in the Python enum and in docs/errors.md."""

from __future__ import annotations

import re
from pathlib import Path

from listener.errors import SqlState

ROOT = Path(__file__).resolve().parents[2]


def _raised_codes() -> set[str]:
    codes: set[str] = set()
    for path in (ROOT / "functions").glob("*.sql"):
        codes |= set(re.findall(r"errcode\s*=\s*'(CE[0-9A-Z]{3})'", path.read_text()))
    return codes


def test_every_raised_sqlstate_is_in_the_enum() -> None:
    raised = _raised_codes()
    assert raised, "expected functions/ to raise CE codes"
    assert raised <= {state.value for state in SqlState}


def test_every_sqlstate_is_documented() -> None:
    doc = (ROOT / "docs" / "errors.md").read_text()
    for state in SqlState:
        assert f"`{state.value}`" in doc and f"`{state.name}`" in doc
