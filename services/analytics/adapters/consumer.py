"""Consumes the analytics queue with aio-pika: connects in the background, reconnects by itself, and
dead-letters what it cannot store with the reason."""
from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections import Counter
from datetime import UTC, datetime

import aio_pika
from aio_pika.abc import (
    AbstractExchange,
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustChannel,
    AbstractRobustConnection,
)
from aio_pika.exceptions import ChannelInvalidStateError

from services.analytics import metrics
from services.analytics.adapters.amqp_timestamps import read_unreadable_timestamps_as_absent
from services.analytics.domain import EventStore
from services.analytics.handler import Outcome, settle_batch
from shared.topology import DELIVERY_LIMIT, dead_letter_names, declare_topology

log = logging.getLogger(__name__)

# Headers the broker sets on each delivery; the dead-letter queue sets its own.
_BROKER_HEADERS = {"x-delivery-count"}


class DeadLetterPublisher:
    """Publishes a copy of a message to the dead-letter exchange with headers saying why, where it came
    from and who rejected it: `x-cairn-dead-reason`, `x-cairn-dead-routing-key`, `x-cairn-dead-queue`,
    `x-cairn-dead-consumer`, `x-cairn-dead-at`. Needs a channel with publisher confirms that raises on
    returns, so `send` returns only once the copy is in the dead-letter queue."""

    def __init__(self, exchange: AbstractExchange, *, queue: str, consumer: str, timeout_s: float = 5.0) -> None:
        self._exchange = exchange
        self._queue = queue
        self._consumer = consumer
        self._timeout_s = timeout_s

    async def send(self, message: AbstractIncomingMessage, *, reason: str) -> None:
        routing_key = _routing_key(message)
        copy = _copy(message, {
            "x-cairn-dead-reason": reason,
            "x-cairn-dead-routing-key": routing_key,
            "x-cairn-dead-queue": self._queue,
            "x-cairn-dead-consumer": self._consumer,
            "x-cairn-dead-at": datetime.now(UTC).isoformat(timespec="milliseconds"),
        })
        await _publish_once_open(self._exchange, copy, routing_key=routing_key, timeout_s=self._timeout_s)
        metrics.dead_lettered(reason)


class QueueRenewals:
    """Puts a fresh copy of a held message at the back of `queue` through the default exchange, without the
    broker's delivery count, and with its routing key in `x-cairn-routing-key` (the copy's own is the queue's
    name). Needs a channel with publisher confirms that raises on returns, as DeadLetterPublisher does."""

    def __init__(self, default_exchange: AbstractExchange, *, queue: str, timeout_s: float = 5.0) -> None:
        self._exchange = default_exchange
        self._queue = queue
        self._timeout_s = timeout_s

    async def send(self, message: AbstractIncomingMessage) -> None:
        copy = _copy(message, {"x-cairn-routing-key": _routing_key(message)})
        await _publish_once_open(self._exchange, copy, routing_key=self._queue, timeout_s=self._timeout_s)


async def _publish_once_open(
    exchange: AbstractExchange, message: aio_pika.Message, *, routing_key: str, timeout_s: float
) -> None:
    """Publish, within `timeout_s`, once the exchange's channel is open. After a reconnection the robust
    connection reopens its channels one by one, and the one we consume on may deliver before this one is
    back: publishing then fails at once, and a held message would wait a whole retry to be renewed."""
    async with asyncio.timeout(timeout_s):
        if isinstance(exchange.channel, AbstractRobustChannel):
            await exchange.channel.ready()
        await exchange.publish(message, routing_key=routing_key)


def _routing_key(message: AbstractIncomingMessage) -> str:
    """The key the message was published with, also after QueueRenewals sent it again."""
    return str((message.headers or {}).get("x-cairn-routing-key") or message.routing_key or "")


def _copy(message: AbstractIncomingMessage, headers: dict) -> aio_pika.Message:
    """A persistent copy of `message` with `headers` added to its own, less those the broker set."""
    return aio_pika.Message(
        body=message.body,
        headers={k: v for k, v in (message.headers or {}).items() if k not in _BROKER_HEADERS} | headers,
        content_type=message.content_type,
        content_encoding=message.content_encoding,
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        message_id=message.message_id,
        correlation_id=message.correlation_id,
        timestamp=message.timestamp,
        type=message.type,
        app_id=message.app_id,
    )


class EventConsumer:
    """Settles the messages of `queue` in batches with `settle_batch`: each batch is what has arrived of the
    `prefetch` messages in flight, up to `batch_size`, waiting at most `batch_wait_ms` for more after the
    first; its events are committed in one transaction, then acked. What cannot be stored goes to the
    dead-letter queue through a `DeadLetterPublisher` signed with `name`.

    `start` returns at once: the first connection is retried with backoff until the broker
    answers, and later drops are healed by aio-pika's robust connection. Several replicas may consume
    the same queue: each message goes to one of them, and a redelivered event is stored only once.
    """

    def __init__(
        self,
        *,
        amqp_url: str,
        exchange: str,
        queue: str,
        store: EventStore,
        prefetch: int = 50,
        batch_size: int = 100,
        batch_wait_ms: float = 5.0,
        connect_timeout_s: float = 5.0,
        max_backoff_s: float = 30.0,
        name: str | None = None,
    ) -> None:
        if prefetch < 1:
            raise ValueError("prefetch must be at least 1")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if batch_wait_ms < 0:
            raise ValueError("batch_wait_ms must not be negative")
        read_unreadable_timestamps_as_absent()  # one bad message must not drop the connection
        self.name = name or f"analytics@{socket.gethostname()}:{os.getpid()}"
        self.outcomes: Counter[Outcome] = Counter()  # what was done with each message settled
        self._amqp_url = amqp_url
        self._exchange = exchange
        self._queue = queue
        self._store = store
        self._prefetch = prefetch
        # The broker sends no more than `prefetch` unacked messages, so a larger batch would never fill.
        self._batch_size = min(batch_size, prefetch)
        self._batch_wait_s = batch_wait_ms / 1000
        self._connect_timeout_s = connect_timeout_s
        self._max_backoff_s = max_backoff_s
        self._stop = asyncio.Event()
        self._connection: AbstractRobustConnection | None = None
        # Deliveries not yet taken into a batch; None wakes the batch loop to stop.
        self._inbox: asyncio.Queue[AbstractIncomingMessage | None] = asyncio.Queue()
        self._source: AbstractQueue | None = None
        self._consumer_tag: str | None = None
        self._task: asyncio.Task | None = None
        self._depths: dict[str, AbstractQueue] = {}  # passively declared on a channel of their own, for metrics

    @property
    def connected(self) -> bool:
        return (
            self._task is not None
            and not self._task.done()
            and self._consumer_tag is not None
            and self._connection is not None
            and not self._connection.is_closed
            and self._connection.connected.is_set()
        )

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="analytics-consumer")

    async def close(self, timeout_s: float = 10.0) -> None:
        """Stop consuming, let the batch in hand finish (up to `timeout_s`), then disconnect.

        Prefetched messages not yet in a batch go back to the queue at once. The batch in hand is committed
        and acked; if `timeout_s` passes first it stays unacked and the broker redelivers it when the
        connection closes, where the idempotent insert makes the second delivery change nothing."""
        self._stop.set()
        try:
            async with asyncio.timeout(timeout_s):
                await self._cancel_deliveries()
        except Exception as exc:  # the broker is gone: unacked messages return to the queue anyway
            log.warning("closing the consumer failed", extra={"error": repr(exc)})
        await self._requeue_waiting()
        self._inbox.put_nowait(None)
        if self._task is not None:
            done, _ = await asyncio.wait({self._task}, timeout=timeout_s)
            if not done:
                self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._connection is not None:
            try:
                async with asyncio.timeout(timeout_s):
                    await self._connection.close()
            except Exception as exc:
                log.warning("closing the broker connection failed", extra={"error": repr(exc)})

    async def _run(self) -> None:
        delay = 0.5
        while not self._stop.is_set():
            try:
                queue, dead_letters, renewals = await self._subscribe()
                if self._stop.is_set():  # close() came while we were subscribing
                    return
                # Within the retries: a broker drop right here would otherwise end consuming for good.
                # A robust queue consumes again with the same callback after a reconnection.
                self._source, self._consumer_tag = queue, await queue.consume(self._inbox.put)
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("broker unavailable, retrying", extra={"error": repr(exc), "retry_in_s": delay})
                await self._disconnect()
                try:
                    async with asyncio.timeout(delay):
                        await self._stop.wait()
                except TimeoutError:
                    pass
                delay = min(delay * 2, self._max_backoff_s)
        else:
            return
        log.info("consuming", extra={"queue": self._queue, "exchange": self._exchange, "consumer": self.name})
        depths = asyncio.create_task(metrics.poll_queue_depths(self._depths), name="analytics-queue-depths")
        try:
            while not self._stop.is_set():
                batch = await self._next_batch()
                if batch:
                    await self._settle(batch, dead_letters, renewals)
        finally:
            depths.cancel()
            await self._requeue_waiting()

    async def _next_batch(self) -> list[AbstractIncomingMessage]:
        """The next message and those that follow it within `batch_wait_s`, up to `batch_size`; [] on stop."""
        first = await self._inbox.get()
        if first is None:
            return []
        if self._stop.is_set():  # delivered while closing: leave it to others
            await _requeue(first)
            return []
        batch = [first]
        deadline = asyncio.get_running_loop().time() + self._batch_wait_s
        while len(batch) < self._batch_size:
            try:
                message = self._inbox.get_nowait()
            except asyncio.QueueEmpty:
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    break
                try:
                    async with asyncio.timeout(remaining):
                        message = await self._inbox.get()
                except TimeoutError:
                    break
            if message is None:  # stopping: finish what is in hand
                break
            batch.append(message)
        return batch

    async def _settle(
        self, batch: list[AbstractIncomingMessage], dead_letters: DeadLetterPublisher, renewals: QueueRenewals
    ) -> None:
        # Deliveries of a channel that closed since are back in the queue, and come again on the new one.
        batch = [message for message in batch if not _returned(message)]
        if not batch:
            return
        # A batch held while the database is down is let go when its channel closes: the broker has its
        # messages back, and delivers them again to be held (and renewed) on the new channel.
        released, closing = asyncio.Event(), batch[-1].channel.closing
        watch = asyncio.create_task(self._release_on_stop_or(closing, released))
        try:
            outcomes = await settle_batch(
                batch, store=self._store, dead_letters=dead_letters, stop=released, delivery_limit=DELIVERY_LIMIT,
                renewals=renewals,
            )
            self.outcomes.update(outcomes)
            metrics.settled(batch, outcomes)
        except Exception as exc:  # channel lost mid-batch: the broker redelivers what was not settled
            log.warning("settling a batch failed", extra={"error": repr(exc), "messages": len(batch)})
            # Return the rest now, should the channel be alive: a later ack(multiple=True) would ack them.
            for message in batch:
                if not message.processed:
                    await _requeue(message)
        finally:
            watch.cancel()
            closing.cancel()  # an observer of the channel: it would stay until the channel closes

    async def _release_on_stop_or(self, closing: asyncio.Future, released: asyncio.Event) -> None:
        stopping = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({closing, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        released.set()

    async def _cancel_deliveries(self) -> None:
        source, tag, self._consumer_tag = self._source, self._consumer_tag, None
        connection = self._connection
        # Without a connection there is nothing to cancel: the broker forgot the consumer with the channel.
        if source is not None and tag is not None and connection is not None and connection.connected.is_set():
            await source.cancel(tag)

    async def _requeue_waiting(self) -> None:
        """Return the deliveries no batch has taken yet to the queue, for this or another replica."""
        while True:
            try:
                message = self._inbox.get_nowait()
            except asyncio.QueueEmpty:
                return
            if message is not None:
                await _requeue(message)

    async def _subscribe(self) -> tuple[AbstractQueue, DeadLetterPublisher, QueueRenewals]:
        self._connection = await aio_pika.connect_robust(self._amqp_url, timeout=self._connect_timeout_s)
        channel = await self._connection.channel()
        await channel.set_qos(prefetch_count=self._prefetch)
        await declare_topology(channel, exchange=self._exchange, queue=self._queue)
        # A channel of its own, so a failed dead-letter publish cannot close the one we consume on.
        dead_channel = await self._connection.channel(publisher_confirms=True, on_return_raises=True)
        dlx = await dead_channel.get_exchange(dead_letter_names(self._queue)[0], ensure=True)
        dead_letters = DeadLetterPublisher(dlx, queue=self._queue, consumer=self.name)
        renewals = QueueRenewals(dead_channel.default_exchange, queue=self._queue)
        # A passive declare of a missing queue closes its channel: never the one we consume on.
        watch = await self._connection.channel()
        dead_queue = dead_letter_names(self._queue)[1]
        self._depths = {"events": await watch.get_queue(self._queue), "dead_letters": await watch.get_queue(dead_queue)}
        return await channel.get_queue(self._queue, ensure=True), dead_letters, renewals

    async def _disconnect(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            try:
                async with asyncio.timeout(2):
                    await connection.close()
            except Exception:  # already broken; nothing left to release
                pass


def _returned(message: AbstractIncomingMessage) -> bool:
    """Whether the channel `message` came on has closed, which returned it to the queue."""
    try:
        return message.channel.is_closed
    except ChannelInvalidStateError:
        return True


async def _requeue(message: AbstractIncomingMessage) -> None:
    try:
        await message.nack(requeue=True)
    except Exception as exc:  # its channel is closed: the broker has requeued it already
        log.debug("requeueing a message failed", extra={"error": repr(exc)})
