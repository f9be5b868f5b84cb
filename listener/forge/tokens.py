"""Where the forge tokens come from, and the origins each one may be sent to.

The ``forge_token_source`` setting holds names, a path and origins, never a token:

    {"env": {"github": "CEASELESS_GITHUB_TOKEN", "gitea": "CEASELESS_GITEA_TOKEN"},
     "label_env": {"github": "CEASELESS_GITHUB_LABEL_TOKEN",
                   "gitea": "CEASELESS_GITEA_LABEL_TOKEN"},
     "file": null,
     "hosts": {"gitea": ["https://gitea.example.com"]}}

``file``, when set, is the path of a JSON secrets file (format in docs/forge.md,
section "Tokens"): entries keyed by an API URL (``https://gitea.example.com/api/v1``)
or by a forge name (``github``), each ``{"token": ..., "label_token": ...}``.

An origin is a URL's scheme, host and port (``https://api.github.com`` is
``https``, ``api.github.com``, 443). Every token source is bound to a set of
origins, and a token goes only to a URL of one of them:

- a file entry keyed by an API URL: that URL's origin;
- the file's entry keyed by a forge name, and the variables ``env`` and
  ``label_env`` name: the forge's origins, which are ``hosts.<forge>`` when
  the setting has it, else the forge's canonical ones: GitHub's API and git
  hosts (``https://api.github.com``, ``https://github.com``); Gitea has no
  canonical host, so a whole-Gitea token goes nowhere until ``hosts.gitea``
  names the host it is for.

The URL a token would be sent to is the repo's ``api_url`` for REST calls and
its clone URL for git, so git's header follows the same rule. A URL that is not
http(s) (ssh, a local path) gets no token.

A repo whose ``tracked_repo.tokens_allowed`` is false (one a user role tracks,
until an operator allows it) gets no token from any source: the listener's
tokens are the deployment's identity, and a user must not borrow it to read or
write a repository it names (docs/forge.md, "Which repos may use the tokens").

Guarantees:
- a repo not allowed the tokens gets None for both, with ``withheld`` naming
  :data:`NOT_ALLOWED`, whatever the sources hold;
- for a URL of a repo at ``api_url``, each token is the first of: the file's
  entry for the exact ``api_url``, its entry for the forge, the environment
  variable, that holds a token *and* is bound to the URL's origin; otherwise
  None (the caller decides whether anonymous access will do), and the sources
  that held a token for other origins are named in ``withheld`` and logged
  (``forge.token_withheld``), never the token;
- the runner's token and the label identity's token are looked up separately;
  a missing label token is None, never the runner's token, so labels are only
  ever written by the identity meant to write them;
- a secrets file that group or others may read (or write) is refused with
  :class:`TokenSourceError` naming the path and the fix, before it is parsed;
  so is a ``hosts`` entry that is not an origin;
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
from urllib.parse import urlsplit

from listener import log

# Where the forges that have one canonical host serve their API and git. Used
# when forge_token_source names no hosts for the forge; GitHub Enterprise and
# every Gitea host are named in hosts.<forge>.
CANONICAL_ORIGINS: dict[str, tuple[str, ...]] = {
    "github": ("https://api.github.com", "https://github.com"),
    "gitea": (),
}
_DEFAULT_PORTS = {"http": 80, "https": 443}

Origin = tuple[str, str, int]

# What ``withheld`` names when the repo itself may not use the tokens.
NOT_ALLOWED = "tracked_repo.tokens_allowed"


class TokenSourceError(Exception):
    """The token source is unusable (file missing, too open, not JSON); names no token."""


@dataclass(frozen=True)
class ForgeTokens:
    """The runner's token and the label identity's token for one URL; either may be None.

    ``withheld`` names the sources that held a token bound to other origins
    when none was bound to this one (empty otherwise).
    """

    runner: str | None = field(repr=False)
    labels: str | None = field(repr=False)
    withheld: tuple[str, ...] = field(default=(), compare=False)

    def __repr__(self) -> str:
        def shown(token: str | None) -> str:
            return "set" if token else "None"

        return f"ForgeTokens(runner={shown(self.runner)}, labels={shown(self.labels)})"


def origin_of(url: str) -> Origin | None:
    """The origin (scheme, host, port) of an http(s) URL, lower-cased; None for anything else."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return (scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme])


def _shown_origin(origin: Origin) -> str:
    scheme, host, port = origin
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}" + ("" if port == _DEFAULT_PORTS[scheme] else f":{port}")


def forge_origins(source: Mapping[str, Any], forge: str) -> frozenset[Origin]:
    """The origins a whole-forge token (env, label_env, the file's forge entry) is bound to."""
    hosts = source.get("hosts")
    if hosts is not None and not isinstance(hosts, dict):
        raise TokenSourceError("forge_token_source.hosts must be an object: {forge: [origin, ...]}")
    entries = hosts.get(forge) if hosts else None
    if entries is None:
        return frozenset(o for o in map(origin_of, CANONICAL_ORIGINS.get(forge, ())) if o)
    where = f"forge_token_source.hosts.{forge}"
    if not isinstance(entries, list):
        raise TokenSourceError(f"{where} must be a list of origins such as https://git.example.com")
    origins = set()
    for position, entry in enumerate(entries):
        origin = origin_of(entry) if isinstance(entry, str) else None
        if origin is None or not _only_origin(entry):
            raise TokenSourceError(
                f"{where}[{position}] must be an origin scheme://host[:port] (http or https, "
                "no path), such as https://git.example.com"
            )
        origins.add(origin)
    return frozenset(origins)


def _only_origin(entry: str) -> bool:
    # Nothing but scheme, host and port: a path or a user would suggest a
    # narrower binding than the origin this module enforces.
    parts = urlsplit(entry.strip())
    return parts.path in ("", "/") and not (parts.username or parts.query or parts.fragment)


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


@dataclass(frozen=True)
class _Source:
    """One place a token may be: what it is called in messages, and where it may go."""

    name: str
    origins: frozenset[Origin]
    tokens: Mapping[str, str | None]  # "token" / "label_token" -> the token there


def _sources(
    source: Mapping[str, Any],
    forge: str,
    api_url: str,
    document: Mapping[str, Any],
    environ: Mapping[str, str],
) -> list[_Source]:
    """The token sources for a repo at api_url, in the order they are tried."""
    whole_forge = forge_origins(source, forge)
    found = []
    api_key = api_url.rstrip("/")
    exact = document.get(api_key)
    api_origin = origin_of(api_key)
    if isinstance(exact, dict) and api_origin is not None:
        found.append(
            _Source(
                f"the secrets file's entry {api_key}",
                frozenset({api_origin}),
                {key: _clean(exact.get(key)) for key in ("token", "label_token")},
            )
        )
    entry = document.get(forge)
    if isinstance(entry, dict):
        found.append(
            _Source(
                f"the secrets file's entry {forge}",
                whole_forge,
                {key: _clean(entry.get(key)) for key in ("token", "label_token")},
            )
        )
    for section, key in (("env", "token"), ("label_env", "label_token")):
        names = source.get(section)
        name = names.get(forge) if isinstance(names, dict) else None
        if isinstance(name, str) and name:
            found.append(_Source(name, whole_forge, {key: _clean(environ.get(name))}))
    return found


def not_allowed_hint(forge: str, owner: str, repo: str) -> str:
    """What an operator does so the listener's tokens serve the repo; appended to its errors."""
    return (
        f"the listener's forge tokens are not used for {forge} {owner}/{repo}: its "
        "tracked_repo.tokens_allowed is false, as on every repo a user role tracks; "
        f"an operator allows them with: ceaseless repo tokens {owner}/{repo} --allow"
    )


def tokens_for(
    source: Mapping[str, Any] | None,
    forge: str,
    api_url: str,
    *,
    allowed: bool,
    url: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> ForgeTokens:
    """The tokens that may be sent to ``url`` (default ``api_url``) for a repo on ``forge``.

    ``allowed`` is the repo's tracked_repo.tokens_allowed: when false, no token
    at all. ``url`` is where the token would go: the repo's api_url for REST
    calls, its clone URL for git. Raises TokenSourceError when the setting
    names a secrets file that is missing, open to others or not JSON, or a
    hosts entry that is not an origin.
    """
    if not allowed:
        return ForgeTokens(runner=None, labels=None, withheld=(NOT_ALLOWED,))
    source = source or {}
    env = os.environ if environ is None else environ
    document: Mapping[str, Any] = {}
    path = source.get("file")
    if isinstance(path, str) and path:
        document = read_secrets_file(path)
    target = origin_of(url if url is not None else api_url)
    candidates = _sources(source, forge, api_url, document, env)
    chosen: dict[str, str | None] = {}
    withheld: list[str] = []
    for key in ("token", "label_token"):
        holding = [s for s in candidates if s.tokens.get(key)]
        bound = [s for s in holding if target is not None and target in s.origins]
        chosen[key] = bound[0].tokens[key] if bound else None
        # A URL that is not http(s) never takes a token: nothing is held back from it.
        if not bound and target is not None:
            withheld += [s.name for s in holding if s.name not in withheld]
    if withheld and target is not None:
        to = _shown_origin(target)
        log.warning(
            "forge.token_withheld",
            forge=forge,
            to=to,
            sources=", ".join(withheld),
            fix=f"name {to} in forge_token_source.hosts.{forge} if the token is meant for it",
        )
    return ForgeTokens(
        runner=chosen["token"], labels=chosen["label_token"], withheld=tuple(withheld)
    )
