"""Consumes the analytics queue with aio-pika: connects in the background, reconnects by itself."""
from __future__ import annotations

import asyncio
import logging

import aio_pika
from aio_pika.abc import AbstractQueueIterator, AbstractRobustConnection

from services.analytics.domain import EventStore
from services.analytics.handler import settle
from shared.topology import declare_topology

log = logging.getLogger(__name__)


class EventConsumer:
    """Runs `settle` on each message of `queue`, one at a time, with `prefetch` messages in flight.

    `start` returns at once: the first connection is retried with backoff until the broker
    answers, and later drops are healed by aio-pika's robust connection.
    """

    def __init__(
        self,
        *,
        amqp_url: str,
        exchange: str,
        queue: str,
        store: EventStore,
        prefetch: int = 50,
        connect_timeout_s: float = 5.0,
        max_backoff_s: float = 30.0,
    ) -> None:
        if prefetch < 1:
            raise ValueError("prefetch must be at least 1")
        self._amqp_url = amqp_url
        self._exchange = exchange
        self._queue = queue
        self._store = store
        self._prefetch = prefetch
        self._connect_timeout_s = connect_timeout_s
        self._max_backoff_s = max_backoff_s
        self._stop = asyncio.Event()
        self._connection: AbstractRobustConnection | None = None
        self._messages: AbstractQueueIterator | None = None
        self._task: asyncio.Task | None = None

    @property
    def connected(self) -> bool:
        return (
            self._task is not None
            and not self._task.done()
            and self._messages is not None
            and self._connection is not None
            and not self._connection.is_closed
            and self._connection.connected.is_set()
        )

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="analytics-consumer")

    async def close(self, timeout_s: float = 10.0) -> None:
        """Stop consuming, let the message in hand finish (up to `timeout_s`), then disconnect."""
        self._stop.set()
        if self._messages is not None:
            try:
                await asyncio.wait_for(self._messages.close(), timeout_s)
            except Exception as exc:  # the broker is gone: unacked messages return to the queue anyway
                log.warning("closing the consumer failed", extra={"error": repr(exc)})
        if self._task is not None:
            done, _ = await asyncio.wait({self._task}, timeout=timeout_s)
            if not done:
                self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._connection is not None:
            try:
                await asyncio.wait_for(self._connection.close(), timeout_s)
            except Exception as exc:
                log.warning("closing the broker connection failed", extra={"error": repr(exc)})

    async def _run(self) -> None:
        delay = 0.5
        while not self._stop.is_set():
            try:
                queue = await self._subscribe()
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("broker unavailable, retrying", extra={"error": repr(exc), "retry_in_s": delay})
                await self._disconnect()
                try:
                    await asyncio.wait_for(self._stop.wait(), delay)
                except TimeoutError:
                    pass
                delay = min(delay * 2, self._max_backoff_s)
        else:
            return
        log.info("consuming", extra={"queue": self._queue, "exchange": self._exchange})
        async with queue.iterator() as messages:
            self._messages = messages
            if self._stop.is_set():  # close() came while we were subscribing
                return
            async for message in messages:
                try:
                    await settle(message, store=self._store, stop=self._stop)
                except Exception as exc:  # channel lost mid-message: the broker redelivers it, keep consuming
                    log.warning("settling a message failed", extra={"error": repr(exc)})

    async def _subscribe(self) -> aio_pika.abc.AbstractQueue:
        self._connection = await aio_pika.connect_robust(self._amqp_url, timeout=self._connect_timeout_s)
        channel = await self._connection.channel()
        await channel.set_qos(prefetch_count=self._prefetch)
        await declare_topology(channel, exchange=self._exchange, queue=self._queue)
        return await channel.get_queue(self._queue, ensure=True)

    async def _disconnect(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            try:
                await asyncio.wait_for(connection.close(), 2)
            except Exception:  # already broken; nothing left to release
                pass
