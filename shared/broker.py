"""The event publisher used by every service that emits events.

The publisher never makes a request wait on the broker: `submit` appends the event to an outbox (a
local SQLite file in the services, see shared/outbox.py) and returns. A background task sends the
outbox oldest first as persistent messages with publisher confirms, in windows of up to `window`
messages in flight, and forgets an event only after RabbitMQ confirmed it. While the broker is down it
retries with a capped backoff; after a restart of the process it resumes from the file.

Messages are mandatory: one that no queue took comes back before its confirm, since a confirm alone says
only that the broker has it, and the event stays in the outbox while the next connection declares the
analytics queue again (an operator may have deleted it). An event no attempt could deliver is dropped and
counted in cairn_events_dropped_total rather than holding up every event behind it: one returned from an
exchange we declare no queue for, one the broker refuses (over its max_message_size), a damaged row.

Events go out in batches: the first event kept after a send waits up to `linger_s` (EVENTS_LINGER_S) for
others, unless `window` events are waiting, and `close` sends at once what waits. A batch costs the broker
and the analytics consumer far less per event than events sent one by one, and it keeps their work away
from most requests: on 2 cores, events sent as they came slowed the retrieval that the next answer waits
on (measured through the gateway at one client: /api/chat p50 5-9 ms higher with one event sent during
each request; batches of a second cut the broker's and the consumer's CPU per request about threefold).

An event may be published twice: when the process dies between the broker's confirm and the removal
from the outbox, the event is sent again at the next start. The analytics consumer is idempotent on
`event_id` (the message_id), so a repeat changes nothing.
"""
from __future__ import annotations

import asyncio
import logging
import sqlite3
from datetime import UTC, datetime
from typing import Protocol

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractExchange
from aio_pika.exceptions import ChannelPreconditionFailed
from pamqp.commands import Basic

from shared.events import Event, occurred_at_in_range, routing_key
from shared.outbox import EVENTS_DROPPED, Outbox, PendingEvent, open_outbox
from shared.settings import CommonSettings
from shared.topology import ANALYTICS_BINDING, dead_letter_names, declare_topology

__all__ = [
    "ANALYTICS_BINDING",
    "EventPublisher",
    "RabbitEventPublisher",
    "dead_letter_names",
    "declare_topology",
    "open_publisher",
]

log = logging.getLogger(__name__)

RETRY_FIRST_S = 0.5
_CANCEL_AGAIN_S = 0.5
RETRY_CAP_S = 5.0
LINGER_S = 1.0  # the longest an event waits for others before it is sent


class Unroutable(Exception):
    """RabbitMQ returned events because no queue was bound for them; they stay in the outbox."""


class EventPublisher(Protocol):
    """Emits domain events without ever failing or delaying the caller."""

    def submit(self, event: Event) -> None: ...

    async def start(self) -> None: ...

    async def close(self, timeout: float = 5.0) -> None: ...

    @property
    def backlog(self) -> int: ...


class RabbitEventPublisher:
    """Drains an outbox into the topic exchange. Without an `outbox` the events wait in memory only."""

    def __init__(
        self,
        *,
        amqp_url: str,
        exchange: str,
        queue: str | None,
        outbox: Outbox | None = None,
        window: int = 100,
        publish_timeout: float = 5.0,
        linger_s: float = LINGER_S,
    ) -> None:
        if window <= 0 or linger_s < 0:
            raise ValueError("window must be positive and linger_s not negative")
        self._amqp_url = amqp_url
        self._exchange_name = exchange
        self._queue_name = queue
        self._outbox = outbox if outbox is not None else Outbox(durable=None, max_events=100_000, service="events")
        self._window = window
        self._publish_timeout = publish_timeout
        self._linger_s = linger_s
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None
        self._exchanges: dict[str, AbstractExchange] = {}
        self._task: asyncio.Task | None = None
        self._wake = asyncio.Event()  # set by submit: there is something to send
        self._idle = asyncio.Event()  # set by the drainer: the outbox is empty
        # While set, the newest events linger: the drainer waits for a wake, at the latest this timer's.
        self._linger_timer: asyncio.TimerHandle | None = None
        # After the broker refused a message of a window (one over its max_message_size closes the channel,
        # failing the whole window) this many events go one at a time, so that the refused one is found.
        self._one_by_one = 0
        self.published = 0

    @property
    def backlog(self) -> int:
        return len(self._outbox)

    @property
    def connected(self) -> bool:
        return self._connection is not None and not self._connection.is_closed

    def submit(self, event: Event) -> None:
        """Keep the event and have it sent with the batch it joins (see the module's docstring)."""
        if not occurred_at_in_range(event.occurred_at, now=datetime.now(UTC)):
            # The consumer would dead-letter it, and one before 1970 cannot even be sent (an AMQP timestamp
            # is unsigned): it would stay at the head of the outbox, failing every window.
            EVENTS_DROPPED.labels(self._outbox.service, "invalid_occurred_at").inc()
            log.error(
                "event refused: occurred_at out of range, is the clock wrong?",
                extra={"event_id": str(event.event_id), "occurred_at": event.occurred_at.isoformat()},
            )
            return
        try:
            pending = PendingEvent(
                event_id=str(event.event_id),
                event_type=event.event_type,
                occurred_at=event.occurred_at.isoformat(),
                exchange=self._exchange_name,
                routing_key=routing_key(event),
                body=event.model_dump_json().encode(),
            )
            if not self._outbox.put(pending):
                return
        except Exception:  # the contract: a request never fails because of its events
            EVENTS_DROPPED.labels(self._outbox.service, "error").inc()
            log.exception("event could not be kept", extra={"event_id": str(event.event_id)})
            return
        self._idle.clear()
        if self._linger_s == 0 or len(self._outbox) >= self._window:
            self._send_soon()
        elif self._linger_timer is None:  # else the batch this event joins is already timed
            self._linger()

    def _linger(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop to time the wait: send at once
            self._send_soon()
            return
        self._linger_timer = loop.call_later(self._linger_s, self._send_soon)

    def _send_soon(self) -> None:
        if self._linger_timer is not None:
            self._linger_timer.cancel()
            self._linger_timer = None
        self._wake.set()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._drain(), name="event-publisher")

    async def close(self, timeout: float = 5.0) -> None:
        """Give pending events `timeout` seconds to go out; those left in the file go out at the next start."""
        self._send_soon()  # lingering events go now
        if self._task:
            try:
                async with asyncio.timeout(timeout):
                    await self._idle.wait()
            except TimeoutError:
                log.warning("closing with unpublished events", extra={"backlog": self.backlog})
            # Asked again until it ends: a cancellation can be lost inside a library (asyncio.wait_for in Python
            # 3.11, in aio_pika's connect, returns a connection attempt's refusal that came as it was cancelled,
            # and the drainer would take it for the broker being down and go on retrying).
            self._task.cancel()
            while not (await asyncio.wait({self._task}, timeout=_CANCEL_AGAIN_S))[0]:
                self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)  # done: takes its outcome, so none is reported
        await self._reset()
        self._outbox.close()

    async def _drain(self) -> None:
        delay = RETRY_FIRST_S
        while True:
            try:
                error = await self._send_next_window()
            except (OSError, sqlite3.Error) as exc:  # the outbox file failed to read: its events wait there
                error = exc
            except Exception as exc:  # a defect: logged with its traceback, and the task keeps draining
                log.exception("event publisher failed unexpectedly")
                error = exc
            if error is None:
                if delay > RETRY_FIRST_S:
                    log.info("event broker reachable again", extra={"backlog": self.backlog})
                delay = RETRY_FIRST_S
                continue
            log.warning(
                "event publish failed, retrying",
                extra={"error": repr(error), "retry_in_s": delay, "backlog": self.backlog},
            )
            await self._reset()
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_CAP_S)

    async def _send_next_window(self) -> BaseException | None:
        """Send the oldest events (or wait for some); the first error, None when all were confirmed."""
        if self._outbox.checkpoint_due():
            await asyncio.to_thread(self._outbox.checkpoint)
        if self._linger_timer is not None:
            await self._wake.wait()
        self._wake.clear()
        batch = self._outbox.oldest(1 if self._one_by_one else self._window)
        if not batch:
            self._idle.set()
            await self._wake.wait()
            return None
        confirmed, dropped, error = await self._publish_window(batch)
        self._outbox.remove(confirmed + dropped)
        self.published += len(confirmed)
        return error

    async def _publish_window(
        self, batch: list[PendingEvent]
    ) -> tuple[list[PendingEvent], list[PendingEvent], BaseException | None]:
        """Publish every event of the batch at once and wait for all confirms: (events a queue took,
        events dropped because no attempt could ever deliver them, first error)."""
        try:
            exchanges = {name: await self._exchange(name) for name in {e.exchange for e in batch}}
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except Exception as exc:  # broker down or refusing: nothing was sent
            return [], [], exc
        messages, dropped = self._messages(batch)
        batch = [e for e in batch if e.id in messages]
        results = await asyncio.gather(
            *(
                exchanges[e.exchange].publish(
                    messages[e.id], routing_key=e.routing_key, mandatory=True, timeout=self._publish_timeout
                )
                for e in batch
            ),
            return_exceptions=True,
        )
        confirmed, unroutable, error = self._outcomes(batch, results)
        dropped += unroutable
        if any(isinstance(result, ChannelPreconditionFailed) for result in results):
            # The broker refused a message and closed the channel, failing the rest of the window. Alone in
            # its window, that event is dropped: sent again it would be refused again, holding up the others.
            if len(batch) == 1:
                self._drop_refused(batch[0], error)
                dropped.append(batch[0])
                self._one_by_one, error = 0, None
                await self._reset()
            else:
                self._one_by_one = len(batch)
        elif self._one_by_one and confirmed:
            self._one_by_one -= 1
        return confirmed, dropped, error

    def _outcomes(
        self, batch: list[PendingEvent], results: list
    ) -> tuple[list[PendingEvent], list[PendingEvent], BaseException | None]:
        """(events a queue took, unroutable events dropped, first error) from the publishes' results."""
        confirmed, dropped, returned, error = [], [], 0, None
        for event, result in zip(batch, results):
            if isinstance(result, BaseException):
                error = error or result
            elif isinstance(result, Basic.Ack):
                confirmed.append(event)
            # Returned (and then confirmed): no queue is bound for it, so RabbitMQ stored it nowhere.
            elif self._queue_for(event.exchange):  # our queue was deleted: declared again on the next connection
                returned += 1
            else:  # nothing we declare will ever take it: retrying would hold up every later event
                EVENTS_DROPPED.labels(self._outbox.service, "unroutable").inc()
                log.error(
                    "event unroutable, dropped: no queue is bound to its exchange",
                    extra={"event_id": event.event_id, "exchange": event.exchange, "routing_key": event.routing_key},
                )
                dropped.append(event)
        if returned and error is None:
            error = Unroutable(f"{returned} events returned unroutable: the queue {self._queue_name} is missing")
        return confirmed, dropped, error

    def _drop_refused(self, event: PendingEvent, error: BaseException) -> None:
        EVENTS_DROPPED.labels(self._outbox.service, "refused").inc()
        log.error(
            "event refused by the broker, dropped",
            extra={"event_id": event.event_id, "size": len(event.body), "error": str(error)},
        )

    def _messages(self, batch: list[PendingEvent]) -> tuple[dict[int, aio_pika.Message], list[PendingEvent]]:
        """The message of each event by its id, and the events that cannot be one (a damaged row of the
        file): those would fail every attempt and hold up every event behind them, so they are dropped."""
        messages, dropped = {}, []
        for event in batch:
            try:
                messages[event.id] = _message(event)
            except Exception:
                EVENTS_DROPPED.labels(self._outbox.service, "error").inc()
                log.exception("event cannot be sent, dropped", extra={"event_id": event.event_id})
                dropped.append(event)
        return messages, dropped

    def _queue_for(self, exchange: str) -> str | None:
        # Events go to the exchange configured when they were submitted; the analytics queue is declared
        # only for today's exchange, so events an earlier configuration addressed elsewhere stay there.
        return self._queue_name if exchange == self._exchange_name else None

    async def _exchange(self, name: str) -> AbstractExchange:
        if name in self._exchanges:
            return self._exchanges[name]
        if self._channel is None:
            self._connection = await aio_pika.connect(self._amqp_url, timeout=self._publish_timeout)
            self._channel = await self._connection.channel(publisher_confirms=True)
        self._exchanges[name] = await declare_topology(self._channel, exchange=name, queue=self._queue_for(name))
        return self._exchanges[name]

    async def _reset(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        self._exchanges = {}
        if connection:
            try:
                async with asyncio.timeout(2):
                    await connection.close()
            except Exception:  # already broken; nothing left to release
                pass


def _message(event: PendingEvent) -> aio_pika.Message:
    return aio_pika.Message(
        body=event.body,
        content_type="application/json",
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        message_id=event.event_id,
        type=event.event_type,
        timestamp=datetime.fromisoformat(event.occurred_at),
    )


def open_publisher(settings: CommonSettings, *, service: str) -> RabbitEventPublisher:
    """The publisher a service runs: its outbox file from OUTBOX_PATH (or the data directory), bounded."""
    outbox = open_outbox(path=settings.outbox_file(service), max_events=settings.outbox_max_events, service=service)
    return RabbitEventPublisher(
        amqp_url=settings.amqp_url, exchange=settings.events_exchange, queue=settings.analytics_queue, outbox=outbox,
        linger_s=settings.events_linger_s,
    )
