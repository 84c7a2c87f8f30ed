"""RabbitMQ topology and the event publisher used by every service that emits events.

The publisher never makes a request wait on the broker: `submit` queues the event in memory
and a background task publishes it (persistent, with publisher confirms), retrying with
backoff while the broker is down, in order.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Protocol

import aio_pika
from aio_pika.abc import AbstractExchange, AbstractRobustConnection

from shared.events import Event, routing_key
from shared.topology import ANALYTICS_BINDING, dead_letter_names, declare_topology

__all__ = ["ANALYTICS_BINDING", "EventPublisher", "RabbitEventPublisher", "dead_letter_names", "declare_topology"]

log = logging.getLogger(__name__)

class EventPublisher(Protocol):
    """Emits domain events without ever failing or delaying the caller."""

    def submit(self, event: Event) -> None: ...

    async def start(self) -> None: ...

    async def close(self, timeout: float = 5.0) -> None: ...

    @property
    def backlog(self) -> int: ...


class RabbitEventPublisher:
    def __init__(
        self,
        *,
        amqp_url: str,
        exchange: str,
        queue: str | None,
        max_backlog: int = 100_000,
        publish_timeout: float = 5.0,
    ) -> None:
        self._amqp_url = amqp_url
        self._exchange_name = exchange
        self._queue_name = queue
        self._publish_timeout = publish_timeout
        self._backlog: asyncio.Queue[Event] = asyncio.Queue(maxsize=max_backlog)
        self._connection: AbstractRobustConnection | None = None
        self._exchange: AbstractExchange | None = None
        self._task: asyncio.Task | None = None
        self.published = 0

    @property
    def backlog(self) -> int:
        return self._backlog.qsize()

    @property
    def connected(self) -> bool:
        return self._connection is not None and not self._connection.is_closed

    def submit(self, event: Event) -> None:
        try:
            self._backlog.put_nowait(event)
        except asyncio.QueueFull:
            log.error("event backlog full, event dropped", extra={"event_id": str(event.event_id)})

    async def start(self) -> None:
        self._task = asyncio.create_task(self._drain(), name="event-publisher")

    async def close(self, timeout: float = 5.0) -> None:
        """Give queued events `timeout` seconds to go out, then stop."""
        if self._task:
            try:
                await asyncio.wait_for(self._backlog.join(), timeout)
            except TimeoutError:
                log.warning("closing with unpublished events", extra={"backlog": self.backlog})
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._connection:
            await self._connection.close()

    async def _drain(self) -> None:
        delay = 0.5
        while True:
            event = await self._backlog.get()
            while True:
                try:
                    await self._publish(event)
                    self.published += 1
                    delay = 0.5
                    break
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # broker down, channel closed, nack: keep the event, retry
                    log.warning("event publish failed, retrying", extra={"error": repr(exc), "retry_in_s": delay})
                    await self._reset()
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 10.0)
            self._backlog.task_done()

    async def _publish(self, event: Event) -> None:
        exchange = await self._ensure_exchange()
        message = aio_pika.Message(
            body=event.model_dump_json().encode(),
            content_type="application/json",
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            message_id=str(event.event_id),
            type=event.event_type,
            timestamp=event.occurred_at,
        )
        await exchange.publish(message, routing_key=routing_key(event), timeout=self._publish_timeout)

    async def _ensure_exchange(self) -> AbstractExchange:
        if self._exchange is None:
            self._connection = await aio_pika.connect_robust(self._amqp_url, timeout=self._publish_timeout)
            channel = await self._connection.channel(publisher_confirms=True)
            self._exchange = await declare_topology(channel, exchange=self._exchange_name, queue=self._queue_name)
        return self._exchange

    async def _reset(self) -> None:
        connection, self._connection, self._exchange = self._connection, None, None
        if connection:
            try:
                await asyncio.wait_for(connection.close(), 2)
            except Exception:  # already broken; nothing left to release
                pass
