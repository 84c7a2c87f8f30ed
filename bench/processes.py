"""A Cairn service started as its own process on a free loopback port, as `cairn up` runs it."""
from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench.common import REPO

# Settings a developer's shell may carry that would change what the bench measures.
_IGNORED_ENV = {"CHROMA_URL", "RERANK_MODEL", "CONTEXTUAL_CHUNKS", "EMBEDDING_CACHE", "EMBEDDING_BACKEND", "LLM_BASE_URL"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServiceProcess:
    """`python -m services.<service>` (or `module`) with `env` on top of the bench's environment; logs to
    scratch/<name>.log. Its port goes in <SERVICE>_HOST / <SERVICE>_PORT."""

    def __init__(
        self, *, service: str, name: str, scratch: Path, env: dict[str, str], token: str | None = None, module: str | None = None
    ) -> None:
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = token or secrets.token_urlsafe(24)
        self.log_path = scratch / f"{name}.log"
        self._module = module or f"services.{service}"
        self._env = {k: v for k, v in os.environ.items() if k not in _IGNORED_ENV} | {
            f"{service.upper()}_HOST": "127.0.0.1",
            f"{service.upper()}_PORT": str(self.port),
            "CAIRN_SERVICE_TOKEN": self.token,
            "LOG_LEVEL": "WARNING",
            "HF_HUB_OFFLINE": "1",
        } | env
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError(f"{self.name} was not started")
        return self._process.pid

    def start(self) -> None:
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", self._module], cwd=REPO, env=self._env, stdout=log, stderr=subprocess.STDOUT
            )

    def wait_ready(self, timeout_s: float = 600) -> float:
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if self._process is not None and self._process.poll() is not None:
                raise RuntimeError(f"{self.name} exited; see {self.log_path}:\n{self.log_path.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return time.monotonic() - started
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{self.name} not ready after {timeout_s}s; see {self.log_path}")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
