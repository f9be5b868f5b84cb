"""A forge job's workspace: a fresh clone of the repo's default branch, on the job's branch.

The runner calls `prepare_checkout` before a discover, plan or implement agent
starts and `remove_workspace` after it ends; the agent runs with the checkout as
its working directory and pushes the branch it finds checked out.

Guarantees:
- every git call has a deadline; on expiry git and everything it started (ssh,
  remote helpers) are killed as one process group, and the call fails naming
  the step;
- git never prompts: GIT_TERMINAL_PROMPT=0, and ssh runs in batch mode, so a
  missing credential is an error at once rather than a hang until the deadline;
- a token never appears on a command line (which `ps` shows to every user of
  the host) nor in the checkout's configuration: for an http(s) clone URL it
  reaches git through the GIT_CONFIG_* environment as an `Authorization` header
  scoped to that URL's scheme, host and port, with redirects refused, and
  every error message is scrubbed of it; which token (if any) may go to the
  clone URL's origin is the caller's (tokens.py, `url=` the clone URL);
- the checkout is the default branch only (`--single-branch`), and the job's
  branch `ceaseless/<job id>` is created from its tip;
- a workspace left half-made by a failed clone is removed before the error is
  raised, so a failed preparation leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
import signal
import stat
from pathlib import Path
from urllib.parse import urlsplit

# What a clone may take: a large repository over a slow link, but not forever.
CLONE_TIMEOUT = 600.0
# Local steps (switch, rev-parse): seconds, unless the disk is dying.
LOCAL_TIMEOUT = 60.0
# The end of git's stderr kept for an error message.
_STDERR_TAIL = 2000

# Variables of the listener's environment that would point git somewhere else
# than the workspace (another repository, another configuration).
_GIT_OVERRIDES = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
)


class CheckoutError(Exception):
    """A git step failed or timed out; the message names the step and never a token."""


def branch_for(job_id: object) -> str:
    """The branch a forge job's agent pushes: `ceaseless/<job id>`."""
    return f"ceaseless/{job_id}"


def git_environment(clone_url: str, token: str | None) -> dict[str, str]:
    """The environment of every git call: never prompting, and the token only as a header.

    The header is scoped to the clone URL's scheme, host and port
    (`http.<url>.extraHeader`), so a submodule elsewhere never receives it, and
    git follows no redirect while it carries one (`http.followRedirects`): a
    moved repo is an error to see, as in the REST client. A local path, ssh or
    git@ URL gets no header: ssh authenticates with its own keys.
    """
    env = {name: value for name, value in os.environ.items() if name not in _GIT_OVERRIDES}
    for name in list(env):
        if name.startswith(("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_")):
            del env[name]
    env["GIT_TERMINAL_PROMPT"] = "0"
    env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
    parts = urlsplit(clone_url)
    if token and parts.scheme in ("http", "https") and parts.hostname:
        # GitHub and Gitea both take a token as the password of Basic auth over
        # git's smart HTTP; the user name is not checked.
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        env["GIT_CONFIG_COUNT"] = "2"
        env["GIT_CONFIG_KEY_0"] = f"http.{parts.scheme}://{parts.netloc}/.extraHeader"
        env["GIT_CONFIG_VALUE_0"] = f"Authorization: Basic {basic}"
        env["GIT_CONFIG_KEY_1"] = "http.followRedirects"
        env["GIT_CONFIG_VALUE_1"] = "false"
    return env


async def git(
    *args: str,
    cwd: Path | None,
    env: dict[str, str],
    timeout: float,
    step: str,
    secrets: tuple[str, ...] = (),
) -> str:
    """Run `git *args`, returning its stdout; CheckoutError on failure or timeout."""
    proc = await asyncio.create_subprocess_exec(
        "git",
        *args,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        # Its own process group, so a timeout also ends the ssh or remote
        # helper git started, which would otherwise hold the pipes open.
        start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        await _kill(proc)
        raise CheckoutError(f"{step}: git did not finish within {timeout:g} s") from None
    except asyncio.CancelledError:
        # The job was cancelled or the listener stops: git must not outlive it.
        await _kill(proc)
        raise
    if proc.returncode != 0:
        tail = err.decode("utf-8", "replace").strip()[-_STDERR_TAIL:]
        raise CheckoutError(
            _scrub(f"{step}: git exited with status {proc.returncode}: {tail}", secrets)
        )
    return out.decode("utf-8", "replace")


async def prepare_checkout(
    *,
    clone_url: str,
    default_branch: str,
    branch: str,
    directory: Path,
    token: str | None,
    clone_timeout: float = CLONE_TIMEOUT,
) -> Path:
    """Clone `default_branch` of `clone_url` into `directory` (new) and switch to `branch`.

    Returns the checkout's path (`directory`). Raises CheckoutError, having
    removed whatever the failed attempt left in `directory`.
    """
    env = git_environment(clone_url, token)
    secrets = _secrets(token)
    directory.parent.mkdir(parents=True, exist_ok=True)
    try:
        await git(
            "clone",
            "--quiet",
            "--no-tags",
            "--single-branch",
            "--branch",
            default_branch,
            # After the options: a clone URL can never be read as one.
            "--",
            clone_url,
            str(directory),
            cwd=directory.parent,
            env=env,
            timeout=clone_timeout,
            step=f"clone of {default_branch}",
            secrets=secrets,
        )
        await git(
            "switch",
            "--quiet",
            "--create",
            branch,
            cwd=directory,
            env=env,
            timeout=LOCAL_TIMEOUT,
            step=f"creating branch {branch}",
            secrets=secrets,
        )
    except BaseException:
        await remove_workspace(directory)
        raise
    return directory


async def remove_workspace(path: Path) -> None:
    """Remove a workspace and everything in it, whatever the agent made read-only.

    Never raises for a path that is already gone; other failures (a file the
    listener's user cannot delete) propagate, for the caller to log.
    """
    await asyncio.to_thread(_rmtree, path)


def _rmtree(path: Path) -> None:
    if not path.exists() and not path.is_symlink():
        return

    def writable_and_retry(function, failed_path, _excinfo):  # type: ignore[no-untyped-def]
        # An agent may leave directories without write permission, and git
        # leaves its objects read-only; the owner can always fix the mode.
        parent = os.path.dirname(failed_path)
        with contextlib.suppress(OSError):
            os.chmod(parent, stat.S_IRWXU)
        with contextlib.suppress(OSError):
            os.chmod(failed_path, stat.S_IRWXU)
        function(failed_path)

    if path.is_symlink() or not path.is_dir():
        path.unlink()
        return
    shutil.rmtree(path, onerror=writable_and_retry)


async def _kill(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    await proc.wait()


def _secrets(token: str | None) -> tuple[str, ...]:
    if not token:
        return ()
    return (token, base64.b64encode(f"x-access-token:{token}".encode()).decode())


def _scrub(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    return text
