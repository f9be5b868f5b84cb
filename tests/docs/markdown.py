"""Reading README.md and docs/*.md as the docs tests need them: fenced blocks with the
`docs-test` directives written above them, relative links, and the anchors headings make.

A directive is an HTML comment (invisible on a rendered page, plain in its source) on the
lines just above a fence, blank lines and other directives between them allowed:

    <!-- docs-test: not run: <why> -->        the block is not run, and says why
    <!-- docs-test: before: <text> -->        hidden text run just before the block, in its
                                              language and session (psql, or the shell)
    <!-- docs-test: after: <text> -->         hidden text run just after it, likewise
    <!-- docs-test: wait: <sql> -->           wait (up to 60 s) until this SQL is true first
    <!-- docs-test: replace: <old> => <new> --> run the block with <old> replaced by <new>
    <!-- docs-test: check output [except <column>, …] -->  the result tables its comments show
                                              must be what it prints (tests/docs/runner.py)

and one that may stand anywhere on a page, for the whole page:

    <!-- docs-test: listener: <arguments> -->  a real listener runs beside the page's examples

A block is run unless a directive says otherwise: `sql` in psql, `sh` in bash; blocks of other
languages are shown, not run. A plain (or `text`) block right after a block is what that block
prints: its `ERROR:` lines are errors the block must raise.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN_LANGUAGES = ("sql", "sh")

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_DIRECTIVE = re.compile(r"<!--\s*docs-test:\s*(?P<body>.*?)\s*-->", re.S)
_KINDS = ("not run", "before", "after", "wait", "replace", "check output", "listener")


def pages() -> list[Path]:
    """The pages a reader copies examples from: README.md and every docs/*.md."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Directive:
    kind: str
    text: str
    line: int


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    directives: list[Directive] = field(default_factory=list)
    shown_after: str = ""  # a plain block right after this one: its output, as the page shows it

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    def directive(self, kind: str) -> list[str]:
        return [d.text for d in self.directives if d.kind == kind]

    @property
    def not_run(self) -> str | None:
        """Why the block is not run, or None when it runs."""
        reasons = self.directive("not run")
        if reasons:
            return reasons[0]
        if self.language not in RUN_LANGUAGES:
            return f"a {self.language or 'plain'} block: shown, not run"
        return None

    def runnable_text(self) -> str:
        """The block as the harness runs it: replacements made, hidden text first."""
        text = self.text
        for replacement in self.directive("replace"):
            old, _, new = replacement.partition(" => ")
            assert old in text, f"{self.where}: replace: {old!r} is not in the block"
            text = text.replace(old, new)
        before = "".join(f"{hidden}\n" for hidden in self.directive("before"))
        after = "".join(f"{hidden}\n" for hidden in self.directive("after"))
        return before + text + after


@dataclass
class Page:
    path: Path
    blocks: list[Block]
    page_directives: list[Directive]
    stray: list[Directive]  # directives that belong to no block: an error

    @property
    def listener(self) -> list[str] | None:
        found = [d.text for d in self.page_directives if d.kind == "listener"]
        return found[0].split() if found else None


def _parse_directive(body: str, line: int) -> Directive:
    if body.startswith("check output"):
        return Directive("check output", body.removeprefix("check output").strip(), line)
    kind, _, text = body.partition(":")
    kind = kind.strip()
    if kind not in _KINDS:
        raise ValueError(f"line {line}: unknown docs-test directive {kind!r} (known: {_KINDS})")
    if not text.strip() and kind != "listener":
        raise ValueError(f"line {line}: docs-test {kind} needs its text (not run: say why)")
    return Directive(kind, text.strip(), line)


def read(path: Path) -> Page:
    """A page's fenced blocks, each with the directives just above it."""
    lines = path.read_text().split("\n")
    blocks: list[Block] = []
    page_directives: list[Directive] = []
    stray: list[Directive] = []
    pending: list[Directive] = []
    just_closed: Block | None = None  # the last block, while only blank lines follow it
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith("<!--") and "docs-test:" in stripped:
            end = i
            while "-->" not in lines[end]:
                end += 1
            match = _DIRECTIVE.search("\n".join(lines[i : end + 1]))
            assert match is not None, f"{path}:{i + 1}: an unclosed docs-test directive"
            directive = _parse_directive(match["body"], i + 1)
            (page_directives if directive.kind == "listener" else pending).append(directive)
            i = end + 1
            continue
        fence = _FENCE.match(line)
        if fence:
            marker, indent = fence["fence"], len(fence["indent"])
            body: list[str] = []
            i += 1
            while i < len(lines):
                closing = lines[i].strip()
                if closing and set(closing) == {marker[0]} and len(closing) >= len(marker):
                    break
                body.append(lines[i][indent:] if lines[i][:indent].isspace() else lines[i])
                i += 1
            language = fence["info"].strip().split(" ")[0] if fence["info"].strip() else ""
            text = "\n".join(body) + "\n"
            block = Block(path, i - len(body), language, text, pending)
            if just_closed is not None and language in ("", "text") and not pending:
                just_closed.shown_after = text
            blocks.append(block)
            pending = []
            just_closed = block
        elif stripped:
            stray += pending
            pending = []
            just_closed = None
        i += 1
    return Page(path, blocks, page_directives, stray + pending)


# --- links and anchors ------------------------------------------------------------------------

_LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
_IMAGE = re.compile(r"!\[[^\]]*\]\((?P<target>[^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6})\s+(?P<title>.*?)\s*#*\s*$")


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """The page's lines outside fenced blocks, numbered from 1."""
    found = []
    fence: str | None = None
    for number, line in enumerate(path.read_text().split("\n"), 1):
        match = _FENCE.match(line)
        stripped = line.strip()
        if fence is None and match:
            fence = match["fence"]
        elif fence is not None and stripped and set(stripped) == {fence[0]}:
            if len(stripped) >= len(fence):
                fence = None
        elif fence is None:
            found.append((number, line))
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """Every link and image target in the page's prose, with its line."""
    found = []
    for number, line in prose_lines(path):
        code_free = re.sub(r"`[^`]*`", "", line)
        for pattern in (_LINK, _IMAGE):
            found += [(number, m["target"]) for m in pattern.finditer(code_free)]
    return found


def slug(title: str) -> str:
    """The anchor GitHub makes of a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"`|\*\*|__|\[([^\]]*)\]\([^)]*\)", r"\1", title).strip().lower()
    kept = []
    for ch in text:
        if ch in " -_" or unicodedata.category(ch)[0] in "LN":
            kept.append("-" if ch == " " else ch)
    return "".join(kept)


def anchors(path: Path) -> set[str]:
    """The anchors of a page's headings (a repeated one gets -1, -2, … as on GitHub)."""
    found: set[str] = set()
    counts: dict[str, int] = {}
    for _, line in prose_lines(path):
        match = _HEADING.match(line)
        if not match:
            continue
        base = slug(match["title"])
        n = counts.get(base, 0)
        counts[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found
