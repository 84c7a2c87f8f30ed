"""`chroma run` as a child process for tests of Chroma's server mode."""
from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.conftest import answers
from tests.support import free_port, wait_until


def chroma_command() -> str:
    found = shutil.which("chroma", path=str(Path(sys.executable).parent)) or shutil.which("chroma")
    if found is None:
        pytest.fail("the `chroma` command (package chromadb, retrieval extra) is not installed", pytrace=False)
    return found


class ChromaServer:
    """`chroma run` on a loopback port; can be stopped and started again on the same port and data."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen | None = None

    def start(self) -> None:
        self._process = subprocess.Popen(
            [chroma_command(), "run", "--path", str(self.path), "--host", "127.0.0.1", "--port", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(lambda: answers(self.url, self.port), timeout=30, what=f"chroma server on {self.url}")

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): connections stay open and nothing answers, like a host gone silent."""
        assert self._process is not None
        self._process.send_signal(signal.SIGSTOP)
        # The kernel stops each of its threads on their way back to user space, not when kill() returns.
        process = psutil.Process(self._process.pid)
        wait_until(lambda: process.status() == psutil.STATUS_STOPPED, timeout=10, interval=0.01, what="chroma stopped")

    def resume(self) -> None:
        assert self._process is not None
        self._process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)  # a paused server would not act on SIGTERM
            self._process.terminate()
            self._process.wait(timeout=10)
            self._process = None
