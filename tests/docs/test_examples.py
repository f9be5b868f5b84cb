"""Every example of README.md and docs/*.md runs as written, page by page, on a fresh database.

Blocks run unless a `docs-test` directive above them says why not (tests/docs/markdown.py);
an error a block's comments show must be the error it raises (tests/docs/runner.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs.markdown import ROOT, pages, read
from tests.docs.runner import PageRun, report

PAGES = [str(p.relative_to(ROOT)) for p in pages()]


@pytest.mark.parametrize("name", PAGES)
def test_the_page_examples_run_as_written(name: str, db_url: str, tmp_path: Path) -> None:
    page = read(ROOT / name)
    assert page.stray == [], f"{name}: docs-test directives above no block: {page.stray}"
    if all(block.not_run for block in page.blocks):
        return
    tmp_path.chmod(0o755)  # the listener's agents may run as another user
    results = PageRun(page, db_url, tmp_path).run()
    assert not [r for r in results if r.problems], f"{name}:\n{report(results)}"


def reading_path() -> list[str]:
    """The pages in the order a reader meets them: README.md, then each page its "Where to go
    next" table links, in order, then any page it does not link."""
    readme = (ROOT / "README.md").read_text()
    linked = re.findall(r"\]\((docs/[a-z0-9_-]+\.md)\)", readme.split("## Where to go next")[1])
    ordered = ["README.md", *dict.fromkeys(linked)]
    return ordered + [name for name in PAGES if name not in ordered]


@pytest.mark.slow
def test_the_pages_run_in_reading_order_on_one_database(db_url: str, tmp_path: Path) -> None:
    """A reader who follows README.md and then the docs, copying every example into the same
    database, meets no example that clashes with an earlier one (a name or path reused with
    other values, an agent used before it is registered)."""
    failures = []
    for name in reading_path():
        page = read(ROOT / name)
        if all(block.not_run for block in page.blocks):
            continue
        work = tmp_path / name.replace("/", "_")
        work.mkdir()
        work.chmod(0o755)
        results = PageRun(page, db_url, work).run()
        if [r for r in results if r.problems]:
            failures.append(f"{name}:\n{report(results)}")
    assert not failures, "\n".join(failures)
