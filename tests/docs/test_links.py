"""Every relative link of README.md and docs/*.md names a file that exists, and a heading of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.markdown import ROOT, anchors, links, pages, slug


def _broken(page: Path, root: Path = ROOT) -> list[str]:
    broken = []
    for line, target in links(page):
        if "://" in target or target.startswith("mailto:"):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(root)}:{line}: {target}"
        if not file.exists():
            broken.append(f"{where}: no file {path}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{where}: {file.relative_to(root)} has no heading #{anchor}")
    return broken


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_names_an_existing_file_and_heading(page: Path) -> None:
    assert _broken(page) == []


def test_anchors_are_made_as_github_makes_them(tmp_path: Path) -> None:
    assert slug("Isolation: what an agent can reach") == "isolation-what-an-agent-can-reach"
    assert slug("`_end_jobs`") == "_end_jobs"
    assert slug("Cost and token budgets") == "cost-and-token-budgets"
    assert slug("Plan → child issues → implement jobs") == "plan--child-issues--implement-jobs"
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## Same\n\n```sh\n# not a heading\n```\n\n## Same\n")
    assert anchors(page) == {"title", "same", "same-1"}


def test_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n")
    page.write_text(
        "[ok](other.md#other) [gone](missing.md) [bad](other.md#nowhere) [self](#here)\n"
        "`[in code](missing.md)` [web](https://example.com/x.md)\n## Here\n"
    )
    assert _broken(page, tmp_path) == [
        "page.md:1: missing.md: no file missing.md",
        "page.md:1: other.md#nowhere: other.md has no heading #nowhere",
    ]
