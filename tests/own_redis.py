"""A redis-server of a test's own, which the test may kill, freeze and thaw without touching the shared one."""
from __future__ import annotations

import signal
import subprocess

from redis import Redis
from redis.exceptions import RedisError

from tests.support import free_port, wait_until


class OwnRedis:
    """A throw-away redis-server on its own port, without persistence."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(self.answers, timeout=10, what=f"redis-server on port {self.port}")

    def answers(self) -> bool:
        try:
            with Redis(port=self.port, socket_timeout=0.5, socket_connect_timeout=0.5) as client:
                return bool(client.ping())
        except RedisError:
            return False

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)

    def freeze(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.thaw()
            self.kill()
