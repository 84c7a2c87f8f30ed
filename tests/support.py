"""Helpers for tests that need a real HTTP server: free loopback ports and uvicorn in a thread."""
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import uvicorn


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(condition, *, timeout: float, interval: float = 0.2, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@contextmanager
def serve_in_thread(app, *, port: int | None = None) -> Iterator[str]:
    """Serve an ASGI app over real HTTP on a free loopback port; yields its base URL."""
    port = port or free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(f"{url}/healthz", timeout=1).status_code < 500 or server.started
        except httpx.HTTPError:
            return server.started

    wait_until(up, timeout=30, what=f"test server on {url}")
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=10)
