"""Every example of README.md and docs/*.md runs as written, page by page, on a fresh database.

Blocks run unless a `docs-test` directive above them says why not (tests/docs/markdown.py);
an error a block's comments show must be the error it raises (tests/docs/runner.py).
"""

from __future__ import annotations

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
