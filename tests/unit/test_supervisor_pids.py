"""`cairn down` waits for the supervisor's pid to go: an exited child its parent has not reaped yet (a zombie)
has gone, or `cairn down` run from that parent (as the e2e fixture does) would wait out its whole timeout."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cairn.run_state import pid_alive

pytestmark = pytest.mark.unit


def test_a_running_process_is_alive_and_an_unreaped_exited_one_is_not():
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert pid_alive(child.pid)
        child.stdin.close()
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, still not reaped: a zombie
        assert not pid_alive(child.pid)
    finally:
        child.wait()
    assert not pid_alive(child.pid)
    assert pid_alive(os.getpid())
