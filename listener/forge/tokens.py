"""Where the forge tokens come from: environment variables by name, or a secrets file.

The ``forge_token_source`` setting holds names and paths only, never a token:

    {"env": {"github": "CEASELESS_GITHUB_TOKEN", "gitea": "CEASELESS_GITEA_TOKEN"},
     "label_env": {"github": "CEASELESS_GITHUB_LABEL_TOKEN",
                   "gitea": "CEASELESS_GITEA_LABEL_TOKEN"},
     "file": null}

``file``, when set, is the path of a JSON secrets file (format in docs/forge.md,
section "Tokens"): entries keyed by an API URL (``https://gitea.example.com/api/v1``)
or by a forge name (``github``), each ``{"token": ..., "label_token": ...}``.

Guarantees:
- the runner's token and the label identity's token are looked up separately;
  a missing label token is None, never the runner's token, so labels are only
  ever written by the identity meant to write them;
- order per token: the file's entry for the exact ``api_url``, then its entry
  for the forge, then the environment variable the setting names; a token found
  nowhere is None (the caller decides whether anonymous access will do);
- a secrets file that group or others may read (or write) is refused with
  :class:`TokenSourceError` naming the path and the fix, before it is parsed;
- no message, exception or ``repr`` here contains a token.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class TokenSourceError(Exception):
    """The token source is unusable (file missing, too open, not JSON); names no token."""


@dataclass(frozen=True)
class ForgeTokens:
    """The runner's token and the label identity's token for one forge; either may be None."""

    runner: str | None = field(repr=False)
    labels: str | None = field(repr=False)

    def __repr__(self) -> str:
        def shown(token: str | None) -> str:
            return "set" if token else "None"

        return f"ForgeTokens(runner={shown(self.runner)}, labels={shown(self.labels)})"


def _clean(value: Any) -> str | None:
    # A value pasted into a file or exported from a shell often ends in a newline.
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def read_secrets_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The parsed secrets file; refuses one that anybody but its owner may read or write."""
    file = Path(path)
    try:
        mode = file.stat().st_mode
    except FileNotFoundError:
        raise TokenSourceError(f"forge secrets file {file} does not exist") from None
    except OSError as exc:
        raise TokenSourceError(f"forge secrets file {file}: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        raise TokenSourceError(f"forge secrets file {file} is not a regular file")
    if mode & 0o077:
        raise TokenSourceError(
            f"forge secrets file {file} is open to group or others "
            f"(mode {stat.S_IMODE(mode):04o}); run: chmod 600 {file}"
        )
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise TokenSourceError(f"forge secrets file {file}: {exc.strerror}") from None
    try:
        document = json.loads(text)
    except ValueError as exc:
        # The position only: the message of a JSON error may quote the text.
        where = f"line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else "somewhere"
        raise TokenSourceError(f"forge secrets file {file} is not valid JSON ({where})") from None
    if not isinstance(document, dict):
        raise TokenSourceError(f"forge secrets file {file} must hold a JSON object")
    return document


def _from_file(document: Mapping[str, Any], forge: str, api_url: str, key: str) -> str | None:
    for entry_key in (api_url.rstrip("/"), forge):
        entry = document.get(entry_key)
        if isinstance(entry, dict):
            token = _clean(entry.get(key))
            if token:
                return token
    return None


def _from_env(
    source: Mapping[str, Any], section: str, forge: str, environ: Mapping[str, str]
) -> str | None:
    names = source.get(section)
    name = names.get(forge) if isinstance(names, dict) else None
    return _clean(environ.get(name)) if isinstance(name, str) and name else None


def tokens_for(
    source: Mapping[str, Any] | None,
    forge: str,
    api_url: str,
    *,
    environ: Mapping[str, str] | None = None,
) -> ForgeTokens:
    """The tokens for a repo on ``forge`` at ``api_url``, per the forge_token_source setting.

    Raises TokenSourceError when the setting names a secrets file that is
    missing, open to others or not JSON.
    """
    source = source or {}
    env = os.environ if environ is None else environ
    document: Mapping[str, Any] = {}
    path = source.get("file")
    if isinstance(path, str) and path:
        document = read_secrets_file(path)
    runner = _from_file(document, forge, api_url, "token") or _from_env(source, "env", forge, env)
    labels = _from_file(document, forge, api_url, "label_token") or _from_env(
        source, "label_env", forge, env
    )
    return ForgeTokens(runner=runner, labels=labels)
