"""What to do with one message from the event queue: store it, dead-letter it, or try again."""
from __future__ import annotations

import asyncio
import enum
import logging
from typing import Protocol

from pydantic import ValidationError

from services.analytics.domain import EventStore, to_record
from shared.context import request_id_var
from shared.errors import DependencyUnavailable
from shared.events import parse_event

log = logging.getLogger(__name__)


class Outcome(enum.Enum):
    ACK = "ack"  # committed, or already stored earlier
    DEAD_LETTER = "dead_letter"  # not a valid event: no retry can help
    RETRY = "retry"  # the database is down: hold the message and try again in place
    REQUEUE = "requeue"  # unexpected store error: back to the queue, whose delivery limit ends a loop


class InboundMessage(Protocol):
    """The part of a broker message the handler needs (aio-pika's IncomingMessage has it)."""

    body: bytes

    async def ack(self) -> None: ...

    async def nack(self, requeue: bool = True) -> None: ...

    async def reject(self, requeue: bool = False) -> None: ...


async def handle(body: bytes, *, store: EventStore) -> Outcome:
    try:
        event = parse_event(body)
    except ValidationError as exc:
        reason = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:3])
        log.warning("invalid event dead-lettered", extra={"reason": reason[:500], "size": len(body)})
        return Outcome.DEAD_LETTER
    token = request_id_var.set(event.request_id)
    try:
        fields = {"event_id": str(event.event_id), "event_type": event.event_type}
        try:
            new = await asyncio.to_thread(store.add, to_record(event))
        except DependencyUnavailable:
            log.warning("database unavailable, event held for retry", extra=fields)
            return Outcome.RETRY
        except Exception:
            log.exception("storing event failed, requeued", extra=fields)
            return Outcome.REQUEUE
        log.info("event stored" if new else "duplicate event ignored", extra=fields)
        return Outcome.ACK
    finally:
        request_id_var.reset(token)


async def settle(
    message: InboundMessage,
    *,
    store: EventStore,
    stop: asyncio.Event,
    retry_delay_s: float = 0.5,
    max_retry_delay_s: float = 30.0,
) -> Outcome:
    """Handle `message` and ack, reject or nack it. Acks only after the commit.

    While the database is down the message is held and retried with backoff rather than
    requeued, so an outage does not spend the queue's delivery limit; on `stop` it is requeued.
    """
    delay = retry_delay_s
    outcome = await handle(message.body, store=store)
    while outcome is Outcome.RETRY and not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), delay)
        except TimeoutError:
            pass
        delay = min(delay * 2, max_retry_delay_s)
        outcome = await handle(message.body, store=store)
    if outcome is Outcome.ACK:
        await message.ack()
    elif outcome is Outcome.DEAD_LETTER:
        await message.reject(requeue=False)
    else:
        await message.nack(requeue=True)
    return outcome
