"""Every test docs/security.md names as holding a guarantee exists, so the table cannot drift."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
    }


def test_every_test_the_security_table_names_exists() -> None:
    text = (ROOT / "docs" / "security.md").read_text()
    table = text.split("## Guarantees and the tests that hold them", 1)[1]
    named = 0
    for row in (line for line in table.splitlines() if line.startswith("| ")):
        cell = row.rstrip(" |").rsplit(" | ", 1)[-1]
        current: Path | None = None
        for ref in re.findall(r"`([^`]+)`", cell):
            file, _, name = ref.partition("::")
            if file.startswith("tests/"):
                current = ROOT / file
                assert current.is_file(), f"{file} (named in docs/security.md) does not exist"
            elif not file.startswith("::") and not ref.startswith("::"):
                continue
            if ref.startswith("::"):
                name = ref[2:]
            if name:
                assert current is not None, ref
                assert name in _test_names(current), f"{current.name} has no {name}"
                named += 1
    assert named > 20
