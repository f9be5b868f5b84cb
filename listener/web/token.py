"""The HTTP server's token: given or made at start, kept where only the operator reads it.

The dashboard, the run observer and GET /metrics need this token on every
address, loopback included (access.py). An operator gives it with
--http-token / CEASELESS_HTTP_TOKEN, or the listener makes one at each start;
either way the listener writes it to CEASELESS_HOME/http/<host>_<port>.json
and logs where. `ceaseless dashboard` reads that file and prints the sign-in
URL (/login?token=…), which sets the HttpOnly cookie and leaves the token out
of the address bar.

Guarantees:
- a made token is 32 random bytes (secrets.token_urlsafe), new at each start;
- the file is created 0600 (never wider, not even for an instant: it is
  written to a 0600 temporary file in the same 0700 directory and renamed),
  so only the listener's OS user reads it; the sandbox hides CEASELESS_HOME
  from agents (agents/sandbox.py);
- the token is written nowhere else: not to the database, and to the log only
  as the sign-in URL of a token the listener made (an operator who gave one
  knows it);
- the listener removes its file when it stops, if the file is still its own.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from listener import pids
from listener.database.embedded import default_home


@dataclass(frozen=True)
class SignIn:
    """One serving listener, as its token file says: where to sign in, and with what."""

    url: str
    token: str
    pid: int
    worker: str
    path: Path

    @property
    def sign_in_url(self) -> str:
        return sign_in_url(self.url, self.token)


def sign_in_url(base: str, token: str) -> str:
    """The URL that signs a browser in: GET /login?token=… sets the cookie and redirects."""
    return f"{base}/login?token={quote(token, safe='')}"


def make(configured: str | None) -> tuple[str, bool]:
    """The token to serve with, and whether it was made here (not given)."""
    if configured:
        return configured, False
    return secrets.token_urlsafe(32), True


def base_url(host: str, port: int) -> str:
    """The address a browser on this host opens: a wildcard bind is reached on 127.0.0.1."""
    shown = host.strip("[]")
    if shown in ("", "0.0.0.0", "::"):
        shown = "127.0.0.1"
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


def directory(home: Path | None = None) -> Path:
    return (home or default_home()) / "http"


def write(host: str, port: int, token: str, worker: str, home: Path | None = None) -> SignIn:
    """Write the token file for the server on host:port; raises OSError when it cannot."""
    folder = directory(home)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    # mkdir's mode is only used when it creates the directory.
    os.chmod(folder, 0o700)
    entry = SignIn(
        base_url(host, port),
        token,
        os.getpid(),
        worker,
        folder / f"{host.strip('[]').replace(':', '-') or '0.0.0.0'}_{port}.json",
    )
    text = json.dumps(
        {"url": entry.url, "token": token, "pid": entry.pid, "worker": worker}, indent=2
    )
    # mkstemp creates the file 0600.
    fd, scratch = tempfile.mkstemp(dir=folder, prefix=".token-")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text + "\n")
        os.replace(scratch, entry.path)
    except BaseException:
        Path(scratch).unlink(missing_ok=True)
        raise
    return entry


def remove(entry: SignIn) -> None:
    """Remove the token file, unless another listener has written it since."""
    found = _read(entry.path)
    if found is not None and found.pid == entry.pid and found.token == entry.token:
        entry.path.unlink(missing_ok=True)


def serving(home: Path | None = None) -> list[SignIn]:
    """Every token file whose listener is still running, by URL."""
    folder = directory(home)
    if not folder.is_dir():
        return []
    found = [_read(path) for path in sorted(folder.glob("*.json"))]
    return sorted((e for e in found if e is not None and pids.exists(e.pid)), key=lambda e: e.url)


def _read(path: Path) -> SignIn | None:
    try:
        data = json.loads(path.read_text())
        return SignIn(str(data["url"]), str(data["token"]), int(data["pid"]), data["worker"], path)
    except (OSError, ValueError, KeyError, TypeError):
        return None
