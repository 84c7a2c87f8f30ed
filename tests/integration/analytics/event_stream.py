"""Helpers for tests of the analytics event stream on the real RabbitMQ: publish raw messages with
confirms, read the dead-letter queue, read back the rows analytics committed, run analytics as a process."""
from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from contextlib import closing
from pathlib import Path

import aio_pika
import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from services.analytics.settings import Settings
from shared.events import Event, routing_key
from shared.topology import dead_letter_names, declare_topology
from tests.support import free_port, wait_until

REPO = Path(__file__).resolve().parents[3]


async def delete_topology(amqp_url: str, *, exchange: str, queue: str) -> None:
    """Delete a test's exchange, queue and dead letters: quorum queues would otherwise pile up on the broker."""
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel()
        for name in (queue, dead_letter_names(queue)[1]):
            await channel.queue_delete(name)
        for name in (exchange, dead_letter_names(queue)[0]):
            await channel.exchange_delete(name)


def as_message(event: Event) -> tuple[str, aio_pika.Message]:
    """(routing key, message) as the shared publisher sends the event."""
    return routing_key(event), aio_pika.Message(
        body=event.model_dump_json().encode(),
        content_type="application/json",
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        message_id=str(event.event_id),
        type=event.event_type,
    )


async def publish_raw(
    amqp_url: str, *, exchange: str, queue: str, messages: list[tuple[str, aio_pika.Message]], window: int = 200,
    pause_s: float = 0.0,
) -> None:
    """Publish with publisher confirms, `window` at a time, onto the topology analytics declares; `pause_s`
    between windows stretches a burst so that something can happen in the middle of it on a fast machine."""
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel(publisher_confirms=True)
        events = await declare_topology(channel, exchange=exchange, queue=queue)
        for start in range(0, len(messages), window):
            batch = messages[start:start + window]
            await asyncio.gather(*(events.publish(message, routing_key=key, timeout=10) for key, message in batch))
            await asyncio.sleep(pause_s)


async def dead_lettered(
    amqp_url: str, queue: str, count: int, *, timeout: float = 15.0
) -> list[aio_pika.abc.AbstractIncomingMessage]:
    """The first `count` messages of `queue`'s dead-letter queue (taken off it), waiting up to `timeout`."""
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel()
        dead = await channel.get_queue(dead_letter_names(queue)[1])
        found, deadline = [], time.monotonic() + timeout
        while len(found) < count and time.monotonic() < deadline:
            message = await dead.get(no_ack=True, fail=False)
            if message is None:
                await asyncio.sleep(0.05)
            else:
                found.append(message)
        return found


async def queue_depth(amqp_url: str, queue: str) -> int:
    """Messages ready in `queue` (not counting those delivered and not yet acked)."""
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel()
        declared = await channel.declare_queue(queue, passive=True)
        return declared.declaration_result.message_count


def stored_events(database_url: str) -> list[tuple[str, str]]:
    """(event_id, event_type) of every row of analytics' `events` table, by plain SQL; event_id in the
    usual dashed form (SQLite keeps it as 32 hex digits, PostgreSQL as a uuid)."""
    return [(str(uuid.UUID(str(event_id))), event_type) for event_id, event_type in _select_events(database_url)]


def _select_events(database_url: str) -> list[tuple]:
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        if not Path(url.database).is_file():
            return []
        with closing(sqlite3.connect(url.database, timeout=10)) as db:
            try:
                return db.execute("SELECT event_id, event_type FROM events").fetchall()
            except sqlite3.OperationalError as exc:  # the process has not created its tables yet
                if "no such table" in str(exc):
                    return []
                raise
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(text("SELECT event_id, event_type FROM events"))]
    finally:
        engine.dispose()


class AnalyticsProcess:
    """`python -m services.analytics` on a free port, with its data directory and broker names; its store is
    SQLite in the data directory unless `db_url` names another database."""

    def __init__(
        self, *, data_dir: Path, amqp_url: str, exchange: str, queue: str, token: str = "process-test-token",
        db_url: str | None = None, env: dict[str, str] | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = token
        self.database_url = db_url or Settings(data_dir=data_dir, db_url=None).database_url
        self.log_path = data_dir.parent / f"analytics-{self.port}.log"
        self._env = {k: v for k, v in os.environ.items() if k != "ANALYTICS_DB_URL"} | {
            "ANALYTICS_PORT": str(self.port),
            "CAIRN_DATA_DIR": str(data_dir),
            "AMQP_URL": amqp_url,
            "EVENTS_EXCHANGE": exchange,
            "ANALYTICS_QUEUE": queue,
            "CAIRN_SERVICE_TOKEN": token,
            "CAIRN_ENV": "test",
            # Its default is where `make up` runs retrieval: a Cairn running beside the tests would refuse the test
            # token, and that refusal keeps analytics not ready. A port nobody listens on is only reported.
            "RETRIEVAL_URLS": f"http://127.0.0.1:{free_port()}",
        } | ({"ANALYTICS_DB_URL": db_url} if db_url else {}) | (env or {})
        self.process: subprocess.Popen | None = None

    def start(self, *, ready_timeout: float = 30) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "services.analytics"],
                cwd=REPO, env=self._env, stdout=log, stderr=subprocess.STDOUT,
            )

        def ready() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"analytics exited with {self.process.returncode}:\n{self.log()}")
            try:
                return httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        try:
            wait_until(ready, timeout=ready_timeout, interval=0.1, what="the analytics process to be ready")
        except BaseException:  # the test's clean-up never learns of a process it did not get
            self.stop()
            raise

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, unacked messages return to the queue when the socket drops."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""
