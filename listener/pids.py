"""Whether a process, or a process group, still exists: the answer to signal 0.

Guarantees: never raises for a pid that is gone or not ours; a process that
exists but that this user may not signal (EPERM) counts as existing, so a
stranger's process is never mistaken for a dead one of ours.
"""

from __future__ import annotations

import os


def exists(pid: int, *, group: bool = False) -> bool:
    """Whether process `pid` exists; with `group`, whether any process of group `pid` does."""
    try:
        (os.killpg if group else os.kill)(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
