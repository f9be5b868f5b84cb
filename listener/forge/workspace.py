"""Where a forge run's checkout lives: `<forge root>/<job id>/<run id>`, made and checked.

The forge root (`--forge-root`, listener/config.py) is a directory of its own,
never inside the task workspace root, which every task agent works in. The
runner (run.py) calls `job_directory` before it clones, and hands the finished
checkout to the agents' OS user with `hand_over`.

Guarantees:
- nothing is cloned under a root that is not a real directory (a symlink
  planted in /var/tmp is refused, never followed) owned by the listener's OS
  user: the error names the path and the fix;
- the root and each job's directory can be listed by nobody but the listener's
  user: mode 0700, or 0711 when agents run as another OS user (which must pass
  through them to its own checkout, and cannot list the job ids beside it);
- a checkout handed over is owned by the agents' user, mode 0700, so another
  OS user (an agent of another lane among them) cannot enter it.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from uuid import UUID

from listener.agents.environment import Identity


class ForgeRootError(Exception):
    """The forge root is unusable; the message names the path and what to do."""


def _mode(identity: Identity | None) -> int:
    return 0o700 if identity is None else 0o711


def _own_directory(path: Path, mode: int) -> None:
    """Make `path` (one level) or check the one there, then set its mode."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=mode)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise ForgeRootError(
            f"the forge root {path} is not a directory (a symlink or a file is never followed); "
            "remove it, or pass --forge-root with another path"
        )
    if info.st_uid != os.geteuid():
        raise ForgeRootError(
            f"the forge root {path} belongs to uid {info.st_uid}, not to the listener's user "
            f"(uid {os.geteuid()}): anyone who owns it can read every checkout; remove it, or "
            "pass --forge-root with a directory of the listener's own"
        )
    os.chmod(path, mode)


def job_directory(root: Path, job_id: UUID, identity: Identity | None) -> Path:
    """The job's directory under the forge root, made and checked (ForgeRootError if not)."""
    mode = _mode(identity)
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
        _own_directory(root, mode)
        job = root / str(job_id)
        _own_directory(job, mode)
    except OSError as exc:
        raise ForgeRootError(f"the forge root {root} is unusable: {exc.strerror}") from None
    return job


def hand_over(checkout: Path, identity: Identity | None) -> None:
    """Give the checkout to the agents' OS user (when not the listener's) and close it to others."""
    if identity is not None:
        for directory, dirs, files in os.walk(checkout):
            for name in (directory, *(os.path.join(directory, n) for n in dirs + files)):
                os.lchown(name, identity.uid, identity.gid)
    os.chmod(checkout, 0o700)
