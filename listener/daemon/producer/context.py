"""Context files for a job's prompt: the one part of prompt assembly SQL cannot do.

SQL assembles a routine's prompt (functions/42_routine_firing.sql) and names the files
that belong in its middle in `payload.context_paths`; only the listener can read
them. This module reads them relative to the workspace root and joins
`prompt + files + payload.prompt_tail`.

Guarantees: a path never escapes the workspace root (absolute paths, `..` and
symlinks included, also one swapped in while the file is opened), never reaches
a job's working directory under it (another user's, or another lane's, files),
and nothing is read when the root is `/`; a
missing or unreadable file is skipped and noted in the prompt, never an error;
each file is bounded, so one large file cannot blow up a prompt.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from listener.config import JOB_DIRECTORIES

FILE_LIMIT = 256 << 10
_JOBS_SKIPPED = "a job's working directory; context files are the workspace root's own"


def compose_prompt(prompt: str, payload: dict[str, Any], workspace_root: Path) -> str:
    paths = payload.get("context_paths") or []
    tail = payload.get("prompt_tail") or ""
    if not paths:
        return prompt + tail
    sections = [_file_section(str(path), workspace_root) for path in paths]
    return prompt + "\n\n## Context files\n\n" + "\n\n".join(sections) + tail


def _file_section(relative: str, root: Path) -> str:
    base = root.resolve()
    # The database refuses these already (functions/11_job_input.sql); a row
    # written before that rule, or a root of /, must not reach a file anyway.
    if base == Path(base.anchor):
        return f"### {relative}\n(skipped: the workspace root is {base})"
    if Path(relative).is_absolute() or ".." in Path(relative).parts:
        return f"### {relative}\n(skipped: not a relative path inside the workspace)"
    target = (base / relative).resolve()
    if not target.is_relative_to(base):
        return f"### {relative}\n(skipped: outside the workspace)"
    if target.is_relative_to(base / JOB_DIRECTORIES):
        return f"### {relative}\n(skipped: {_JOBS_SKIPPED})"
    try:
        # Non-blocking: agents write the workspace, and a FIFO named like a
        # context file would otherwise hold the open (and the event loop) until
        # someone writes to it.
        with open(os.open(target, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return f"### {relative}\n(skipped: not a regular file)"
            # One could also swap a directory on the path for a symlink
            # between the check above and the open: what was opened counts.
            if not _opened_inside(handle.fileno(), base):
                return f"### {relative}\n(skipped: outside the workspace)"
            if _opened_inside(handle.fileno(), base / JOB_DIRECTORIES, unknown=False):
                return f"### {relative}\n(skipped: {_JOBS_SKIPPED})"
            data = handle.read(FILE_LIMIT + 1)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return f"### {relative}\n(missing: no such file in the workspace)"
    except OSError as exc:
        return f"### {relative}\n(unreadable: {exc.strerror})"
    text = data[:FILE_LIMIT].decode("utf-8", errors="replace")
    if len(data) > FILE_LIMIT:
        text += f"\n(truncated at {FILE_LIMIT} bytes)"
    return f"### {relative}\n{text}"


def _opened_inside(fd: int, base: Path, *, unknown: bool = True) -> bool:
    """Whether the open file `fd` lies under `base` (`unknown` where /proc cannot tell)."""
    try:
        opened = Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return unknown
    return opened.is_relative_to(base)
