"""What to do with one message from the event queue: store it, dead-letter it with the reason, or try again."""
from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError

from services.analytics.domain import EventStore, to_record
from shared.context import request_id_var
from shared.errors import DependencyUnavailable
from shared.events import SCHEMA_VERSION, parse_event

log = logging.getLogger(__name__)

MAX_REASON_CHARS = 1000


class Outcome(enum.Enum):
    ACK = "ack"  # committed, or already stored earlier
    DEAD_LETTER = "dead_letter"  # not a valid event (or its last delivery failed): no retry can help
    RETRY = "retry"  # the database is down: hold the message and try again in place
    REQUEUE = "requeue"  # unexpected store error: back to the queue, whose delivery limit ends a loop


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    reason: str = ""  # why, for DEAD_LETTER and REQUEUE


class InboundMessage(Protocol):
    """The part of a broker message the handler needs (aio-pika's IncomingMessage has it)."""

    body: bytes
    headers: Mapping[str, Any]

    async def ack(self) -> None: ...

    async def nack(self, requeue: bool = True) -> None: ...


class DeadLetters(Protocol):
    """Where messages that cannot be stored go, each with the reason."""

    async def send(self, message: InboundMessage, *, reason: str) -> None:
        """Put a copy of `message` in the dead-letter queue stating `reason`; returns once the broker
        has confirmed it, raises otherwise."""
        ...


async def handle(body: bytes, *, store: EventStore) -> Verdict:
    try:
        event = parse_event(body)
    except ValidationError as exc:
        return Verdict(Outcome.DEAD_LETTER, _describe(exc))
    if not 1 <= event.schema_version <= SCHEMA_VERSION:
        unsupported = f"schema_version: {event.schema_version} is not supported (1 to {SCHEMA_VERSION})"
        return Verdict(Outcome.DEAD_LETTER, unsupported)
    token = request_id_var.set(event.request_id)
    try:
        fields = {"event_id": str(event.event_id), "event_type": event.event_type}
        try:
            new = await asyncio.to_thread(store.add, to_record(event))
        except DependencyUnavailable:
            log.warning("database unavailable, event held for retry", extra=fields)
            return Verdict(Outcome.RETRY)
        except Exception as exc:
            log.exception("storing event failed", extra=fields)
            return Verdict(Outcome.REQUEUE, f"store error: {exc!r}")
        log.info("event stored" if new else "duplicate event ignored", extra=fields)
        return Verdict(Outcome.ACK)
    finally:
        request_id_var.reset(token)


async def settle(
    message: InboundMessage,
    *,
    store: EventStore,
    dead_letters: DeadLetters,
    stop: asyncio.Event,
    delivery_limit: int,
    retry_delay_s: float = 0.5,
    max_retry_delay_s: float = 30.0,
) -> Outcome:
    """Handle `message`, then ack, dead-letter or requeue it; returns what was done. Acks only after the
    commit, or after the broker confirmed the dead-letter copy (if that fails, the message is requeued).

    While the database is down the message is held and retried with backoff rather than requeued, so an
    outage does not spend the queue's delivery limit; on `stop` it is requeued. A store error on the last
    delivery the queue allows (`delivery_limit`) dead-letters the message with the error as the reason,
    instead of leaving the broker to dead-letter it with none.
    """
    delay = retry_delay_s
    verdict = await handle(message.body, store=store)
    while verdict.outcome is Outcome.RETRY and not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), delay)
        except TimeoutError:
            pass
        delay = min(delay * 2, max_retry_delay_s)
        verdict = await handle(message.body, store=store)
    if verdict.outcome is Outcome.REQUEUE and _earlier_deliveries(message) >= delivery_limit:
        verdict = Verdict(Outcome.DEAD_LETTER, f"{verdict.reason} (last of {delivery_limit + 1} deliveries)")
    if verdict.outcome is Outcome.ACK:
        await message.ack()
    elif verdict.outcome is Outcome.DEAD_LETTER:
        reason = verdict.reason[:MAX_REASON_CHARS]
        try:
            await dead_letters.send(message, reason=reason)
        except Exception as exc:  # not confirmed: requeue, so the message is always in one queue or the other
            log.warning("dead-lettering failed, message requeued", extra={"error": repr(exc), "reason": reason})
            await message.nack(requeue=True)
            return Outcome.REQUEUE
        log.warning("message dead-lettered", extra={"reason": reason, "size": len(message.body)})
        await message.ack()
    else:
        await message.nack(requeue=True)
    return verdict.outcome


def _describe(exc: ValidationError) -> str:
    """The first few errors as `loc: message`, e.g. `QuerySubmitted.data.query: Field required`."""
    parts = []
    for error in exc.errors()[:3]:
        where = ".".join(map(str, error["loc"]))
        parts.append(f"{where}: {error['msg']}" if where else error["msg"])
    return "; ".join(parts)


def _earlier_deliveries(message: InboundMessage) -> int:
    """How often the broker has delivered the message before (quorum queues send `x-delivery-count`)."""
    try:
        return int((message.headers or {}).get("x-delivery-count", 0))
    except (TypeError, ValueError):
        return 0
