"""A forge job's checkout, with the real git: local bare repos and git's HTTP on loopback."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from listener.forge.checkout import (
    CheckoutError,
    branch_for,
    git_environment,
    prepare_checkout,
    remove_workspace,
)

TOKEN = "ghp_checkoutSecret0123456789"


def run_git(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, timeout=30
    )
    return done.stdout.strip()


def make_bare_repo(root: Path, default_branch: str = "main") -> Path:
    """A bare repository with two commits on `default_branch` and a commit on `other`."""
    bare = root / "origin.git"
    run_git("init", "--quiet", "--bare", "--initial-branch", default_branch, str(bare), cwd=root)
    work = root / "seed"
    run_git("clone", "--quiet", str(bare), str(work), cwd=root)
    ident = ("-c", "user.name=Seed", "-c", "user.email=seed@example.invalid")
    run_git("switch", "--quiet", "--create", default_branch, cwd=work)
    for n in (1, 2):
        (work / "README.md").write_text(f"version {n}\n")
        run_git("add", "README.md", cwd=work)
        run_git(*ident, "commit", "--quiet", "-m", f"commit {n}", cwd=work)
    run_git("push", "--quiet", "origin", default_branch, cwd=work)
    run_git("switch", "--quiet", "--create", "other", cwd=work)
    (work / "OTHER.md").write_text("elsewhere\n")
    run_git("add", "OTHER.md", cwd=work)
    run_git(*ident, "commit", "--quiet", "-m", "other", cwd=work)
    run_git("push", "--quiet", "origin", "other", cwd=work)
    return bare


def test_checkout_is_the_default_branch_tip_on_the_job_branch(tmp_path: Path) -> None:
    bare = make_bare_repo(tmp_path)
    target = tmp_path / "workspaces" / "job-1"
    branch = branch_for("6f1c2d3e-0000-4000-8000-000000000001")

    path = asyncio.run(
        prepare_checkout(
            clone_url=str(bare),
            default_branch="main",
            branch=branch,
            directory=target,
            token=None,
        )
    )

    assert path == target
    assert branch == "ceaseless/6f1c2d3e-0000-4000-8000-000000000001"
    assert run_git("branch", "--show-current", cwd=path) == branch
    assert run_git("rev-parse", "HEAD", cwd=path) == run_git("rev-parse", "main", cwd=bare)
    assert (path / "README.md").read_text() == "version 2\n"
    # --single-branch: the other branch was not fetched.
    assert "other" not in run_git("branch", "--remotes", cwd=path)
    assert run_git("remote", "get-url", "origin", cwd=path) == str(bare)


def test_a_missing_default_branch_fails_naming_the_step_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    bare = make_bare_repo(tmp_path)
    target = tmp_path / "workspaces" / "job-2"

    with pytest.raises(CheckoutError) as failure:
        asyncio.run(
            prepare_checkout(
                clone_url=str(bare),
                default_branch="trunk",
                branch="ceaseless/x",
                directory=target,
                token=None,
            )
        )

    assert "clone of trunk" in str(failure.value)
    assert "trunk" in str(failure.value).split(":", 1)[1]
    assert not target.exists()


def test_a_clone_url_that_is_no_repository_fails(tmp_path: Path) -> None:
    target = tmp_path / "ws"
    with pytest.raises(CheckoutError, match="clone of main: git exited with status"):
        asyncio.run(
            prepare_checkout(
                clone_url=str(tmp_path / "nowhere.git"),
                default_branch="main",
                branch="ceaseless/x",
                directory=target,
                token=None,
            )
        )
    assert not target.exists()


class _GitHttp(SimpleHTTPRequestHandler):
    """git's dumb HTTP protocol: static files of a bare repo, behind a token."""

    expected: str = ""
    seen: list[str | None]

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        authorization = self.headers.get("Authorization")
        self.seen.append(authorization)
        if authorization != self.expected:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        super().do_GET()


@pytest.fixture
def git_http(tmp_path: Path) -> Iterator[tuple[str, list[str | None]]]:
    """A bare repo served over HTTP on loopback, answering only the token's Basic header."""
    bare = make_bare_repo(tmp_path)
    run_git("update-server-info", cwd=bare)
    basic = base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
    seen: list[str | None] = []
    handler = type("Handler", (_GitHttp,), {"expected": f"Basic {basic}", "seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(tmp_path)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/origin.git", seen
    finally:
        server.shutdown()
        server.server_close()


def test_an_http_clone_gets_the_token_as_a_header_never_in_argv_or_config(
    tmp_path: Path, git_http: tuple[str, list[str | None]]
) -> None:
    url, seen = git_http
    target = tmp_path / "ws-http"

    path = asyncio.run(
        prepare_checkout(
            clone_url=url,
            default_branch="main",
            branch="ceaseless/h",
            directory=target,
            token=TOKEN,
        )
    )

    assert (path / "README.md").read_text() == "version 2\n"
    assert seen and all(header and header.startswith("Basic ") for header in seen)
    # Nothing of the token is left in the checkout: not the remote, not the config.
    stored = "".join(p.read_text(errors="replace") for p in (path / ".git").glob("config*"))
    basic = base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
    assert TOKEN not in stored and basic not in stored
    assert run_git("remote", "get-url", "origin", cwd=path) == url


def test_without_the_token_git_fails_at_once_instead_of_prompting(
    tmp_path: Path, git_http: tuple[str, list[str | None]]
) -> None:
    url, _ = git_http
    with pytest.raises(CheckoutError) as failure:
        asyncio.run(
            prepare_checkout(
                clone_url=url,
                default_branch="main",
                branch="ceaseless/h",
                directory=tmp_path / "ws-denied",
                token=None,
                clone_timeout=20,
            )
        )
    message = str(failure.value)
    assert "did not finish" not in message and "exited with status" in message


def test_the_header_is_scoped_to_the_clone_host_and_errors_never_show_the_token(
    tmp_path: Path,
) -> None:
    env = git_environment("https://git.example.com/acme/widgets.git", TOKEN)
    assert env["GIT_TERMINAL_PROMPT"] == "0"
    assert env["GIT_CONFIG_KEY_0"] == "http.https://git.example.com/.extraHeader"
    assert TOKEN not in env["GIT_CONFIG_VALUE_0"]  # base64 of user:token, as git sends it
    # ssh and local clones get no header at all.
    for url in ("git@git.example.com:acme/widgets.git", str(tmp_path / "x.git")):
        assert "GIT_CONFIG_COUNT" not in git_environment(url, TOKEN)

    # A clone URL carrying the token (refused by tracked_repo, but the listener
    # must not print it even so) is scrubbed from git's error message.
    with pytest.raises(CheckoutError) as failure:
        asyncio.run(
            prepare_checkout(
                clone_url=str(tmp_path / f"{TOKEN}.git"),
                default_branch="main",
                branch="ceaseless/x",
                directory=tmp_path / "ws-scrub",
                token=TOKEN,
            )
        )
    assert TOKEN not in str(failure.value) and "***" in str(failure.value)


def test_a_clone_that_hangs_is_killed_at_its_deadline(tmp_path: Path) -> None:
    # A server that accepts connections and never answers.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/hung.git"
        target = tmp_path / "ws-hung"
        with pytest.raises(CheckoutError, match="did not finish within 1 s"):
            asyncio.run(
                prepare_checkout(
                    clone_url=url,
                    default_branch="main",
                    branch="ceaseless/x",
                    directory=target,
                    token=TOKEN,
                    clone_timeout=1,
                )
            )
        assert not target.exists()
    finally:
        silent.close()


def test_a_workspace_the_agent_made_read_only_is_removed(tmp_path: Path) -> None:
    bare = make_bare_repo(tmp_path)
    path = asyncio.run(
        prepare_checkout(
            clone_url=str(bare),
            default_branch="main",
            branch="ceaseless/y",
            directory=tmp_path / "ws-ro",
            token=None,
        )
    )
    locked = path / "locked"
    locked.mkdir()
    (locked / "file").write_text("x")
    os.chmod(locked, 0o500)

    asyncio.run(remove_workspace(path))
    assert not path.exists()
    asyncio.run(remove_workspace(path))  # already gone: fine


def _command_lines() -> list[bytes]:
    lines = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            # Gone since the listing, or not ours to read.
            with contextlib.suppress(OSError):
                lines.append((proc / "cmdline").read_bytes())
    return lines


def test_while_git_clones_no_command_line_on_the_host_holds_the_token(tmp_path: Path) -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    silent.settimeout(20)
    basic = base64.b64encode(f"x-access-token:{TOKEN}".encode())

    async def clone_and_look() -> list[bytes]:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/hung.git"
        clone = asyncio.create_task(
            prepare_checkout(
                clone_url=url,
                default_branch="main",
                branch="ceaseless/x",
                directory=tmp_path / "ws-argv",
                token=TOKEN,
                clone_timeout=15,
            )
        )
        connection, _ = await asyncio.to_thread(silent.accept)  # git and its helper run now
        try:
            return await asyncio.to_thread(_command_lines)
        finally:
            clone.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await clone
            connection.close()

    try:
        lines = asyncio.run(clone_and_look())
    finally:
        silent.close()
    assert any(b"hung.git" in line for line in lines), "git's own command line was not seen"
    assert not [line for line in lines if TOKEN.encode() in line or basic in line]
