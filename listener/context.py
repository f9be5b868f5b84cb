"""Context files for a job's prompt: the one part of prompt assembly SQL cannot do.

SQL assembles a routine's prompt (functions/41_routine_firing.sql) and names the files
that belong in its middle in `payload.context_paths`; only the listener can read
them. This module reads them relative to the workspace root and joins
`prompt + files + payload.prompt_tail`.

Guarantees: a path never escapes the workspace root (symlinks included); a
missing or unreadable file is skipped and noted in the prompt, never an error;
each file is bounded, so one large file cannot blow up a prompt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

FILE_LIMIT = 256 << 10


def compose_prompt(prompt: str, payload: dict[str, Any], workspace_root: Path) -> str:
    paths = payload.get("context_paths") or []
    tail = payload.get("prompt_tail") or ""
    if not paths:
        return prompt + tail
    sections = [_file_section(str(path), workspace_root) for path in paths]
    return prompt + "\n\n## Context files\n\n" + "\n\n".join(sections) + tail


def _file_section(relative: str, root: Path) -> str:
    base = root.resolve()
    target = (base / relative).resolve()
    if not target.is_relative_to(base):
        return f"### {relative}\n(skipped: outside the workspace)"
    try:
        with target.open("rb") as handle:
            data = handle.read(FILE_LIMIT + 1)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return f"### {relative}\n(missing: no such file in the workspace)"
    except OSError as exc:
        return f"### {relative}\n(unreadable: {exc.strerror})"
    text = data[:FILE_LIMIT].decode("utf-8", errors="replace")
    if len(data) > FILE_LIMIT:
        text += f"\n(truncated at {FILE_LIMIT} bytes)"
    return f"### {relative}\n{text}"
