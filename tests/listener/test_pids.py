"""Whether a process or a process group exists (listener/pids.py), asked with signal 0."""

from __future__ import annotations

import os
import subprocess
import sys

from listener import pids


def test_a_running_process_and_its_group_exist_and_a_reaped_one_does_not() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert pids.exists(child.pid)
        assert pids.exists(os.getpgid(child.pid), group=True)
    finally:
        child.kill()
        child.wait()
    assert not pids.exists(child.pid)


def test_a_process_we_may_not_signal_still_exists() -> None:
    # init is pid 1 in every pid namespace: another user's process, unless we are root.
    assert pids.exists(1)
