"""The test control plane's process handling, without the control plane itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tests.control_plane.plane import REPOSITORY

PARENT = """
import sys, time
from pathlib import Path
from tests.control_plane.plane import spawn_tied
child = spawn_tied(["sleep", "300"], Path(sys.argv[1]), start_new_session=True)
print(child.pid, flush=True)
time.sleep(300)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"  # a zombie has already exited
    except FileNotFoundError:
        return False


def test_a_killed_test_process_takes_its_control_plane_processes_with_it(tmp_path):
    """SIGKILL runs no teardown: the kernel ends what the test started (PR_SET_PDEATHSIG), even
    in a session of its own, where a signal to the test's group would not reach it."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path / "child.log")], cwd=REPOSITORY,
                              stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    assert _alive(child)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(timeout=10)
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the child outlived the killed test process"
