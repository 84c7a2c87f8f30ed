"""Helpers for tests that need a real HTTP server: free loopback ports and uvicorn in a thread."""
from __future__ import annotations

import asyncio
import functools
import itertools
import os
import random
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import aio_pika
import httpx
import uvicorn

from shared.topology import declare_topology
from shared.events import parse_event
from shared.web import SERVER_OPTIONS


@functools.cache
def _outboxes() -> tempfile.TemporaryDirectory:
    """Made on first use; removed when the test process exits (its finalizer), with every outbox made in it."""
    return tempfile.TemporaryDirectory(prefix="cairn-test-outboxes-")


def own_outbox() -> Path:
    """An outbox file for one publisher of a test: on the default path, publishers of tests running at once (in
    other workers) share one file, and each sends the others' events to its own exchange."""
    return Path(tempfile.mkdtemp(dir=_outboxes().name)) / "outbox.sqlite3"


# Ports for the tests' servers come from below the kernel's ephemeral range (32768 and up on Linux), which is
# where a bind to port 0 lands. A port found free there was handed out again, to a test in the other worker,
# before the service meant for it bound it: services load their model first, for half a minute on a busy
# machine. The second service then failed to bind, and its test took the first one's answers for its own.
# Each pytest-xdist worker takes ports from a block of its own, one after the other; a random start within
# the block keeps two test runs at once on one machine apart as well.
_FIRST_PORT, _PORTS_PER_WORKER, _BLOCKS = 20_000, 1_000, 12  # the last block ends at 31,999


@functools.cache
def _port_numbers() -> Iterator[int]:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")  # "gw1" in the second worker
    block = _FIRST_PORT + int(worker.removeprefix("gw") or 0) % _BLOCKS * _PORTS_PER_WORKER
    start = random.randrange(_PORTS_PER_WORKER)
    return (block + (start + n) % _PORTS_PER_WORKER for n in itertools.count())


def free_port() -> int:
    """A loopback port nothing listens on, not handed out before in this test process."""
    numbers = _port_numbers()
    for port in itertools.islice(numbers, _PORTS_PER_WORKER):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:  # in use (RabbitMQ's distribution port 25672, say)
                continue
        return port
    raise RuntimeError(f"no free port in this worker's block of {_PORTS_PER_WORKER}")


def app_routes(app) -> list:
    """Every route of a FastAPI app, those of its included routers too (FastAPI keeps them apart)."""
    found, pending = [], list(app.router.routes)
    while pending:
        route = pending.pop()
        if (router := getattr(route, "original_router", None)) is not None:
            pending.extend(router.routes)
        elif hasattr(route, "path"):
            found.append(route)
    return found


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
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="on", **SERVER_OPTIONS))
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


async def read_events(amqp_url: str, unique: str, count: int, timeout: float = 15.0) -> list:
    """Up to `count` events from the queue `{unique}.analytics` bound to `{unique}.events`, acked, as
    (message, event) pairs; fewer if `timeout` passes first."""
    connection = await aio_pika.connect_robust(amqp_url)
    try:
        channel = await connection.channel()
        # Declared as the analytics consumer does (idempotent): chat's publisher may not have done it yet.
        await declare_topology(channel, exchange=f"{unique}.events", queue=f"{unique}.analytics")
        queue = await channel.get_queue(f"{unique}.analytics", ensure=True)
        events, deadline = [], time.monotonic() + timeout
        while len(events) < count and time.monotonic() < deadline:
            message = await queue.get(no_ack=False, fail=False)
            if message is None:
                await asyncio.sleep(0.1)
                continue
            events.append((message, parse_event(message.body)))
            await message.ack()
        return events
    finally:
        await connection.close()
