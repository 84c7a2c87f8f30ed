"""What to do with messages from the event queue: store them, dead-letter them with the reason, or try again;
one at a time (`settle`), or a batch committed in one transaction (`settle_batch`)."""
from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import ValidationError

from services.analytics.domain import EventRecord, EventStore, to_record
from shared.context import request_id_var
from shared.errors import DependencyUnavailable
from shared.events import OCCURRED_AT_RANGE, SCHEMA_VERSION, Event, occurred_at_in_range, parse_event
from shared.tracing import continued_trace
from shared.validation_errors import one_line

log = logging.getLogger(__name__)

MAX_REASON_CHARS = 1000
# The largest message body read as an event. The largest the services publish is a few tens of kilobytes (a
# 4,000-character question twice, citations, ids); a body of megabytes is forged or runaway, and would go
# whole into the database, the reports and the exports, or hold gigabytes in a batch.
MAX_EVENT_BYTES = 1 << 20


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

    async def ack(self, multiple: bool = False) -> None:
        """Settle the message as done; with `multiple`, also every earlier unsettled message on its channel."""
        ...

    async def nack(self, requeue: bool = True) -> None: ...


class Renewals(Protocol):
    """Where a held message goes back as a fresh copy (see `settle_batch`)."""

    async def send(self, message: InboundMessage) -> None:
        """Put a copy of `message` at the back of its queue, as if never delivered before; returns once the
        broker has confirmed it, raises otherwise."""
        ...


class DeadLetters(Protocol):
    """Where messages that cannot be stored go, each with the reason."""

    async def send(self, message: InboundMessage, *, reason: str) -> None:
        """Put a copy of `message` in the dead-letter queue stating `reason`; returns once the broker
        has confirmed it, raises otherwise."""
        ...


async def handle(body: bytes, *, store: EventStore) -> Verdict:
    parsed = _parse(body)
    if isinstance(parsed, Verdict):
        return parsed
    with _about(parsed):
        fields = _log_fields(parsed)
        try:
            new = await asyncio.to_thread(store.add, to_record(parsed))
        except DependencyUnavailable:
            log.debug("database unavailable, event held for retry", extra=fields)
            return Verdict(Outcome.RETRY)
        except Exception as exc:
            log.exception("storing event failed", extra=fields)
            return Verdict(Outcome.REQUEUE, f"store error: {exc!r}")
        log.info("event stored" if new else "duplicate event ignored", extra=fields)
        return Verdict(Outcome.ACK)


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
        await _pause(stop, delay)
        delay = min(delay * 2, max_retry_delay_s)
        verdict = await handle(message.body, store=store)
    return await _conclude(message, verdict, dead_letters=dead_letters, delivery_limit=delivery_limit)


async def settle_batch(
    messages: Sequence[InboundMessage],
    *,
    store: EventStore,
    dead_letters: DeadLetters,
    stop: asyncio.Event,
    delivery_limit: int,
    renewals: Renewals | None = None,
    retry_delay_s: float = 0.5,
    max_retry_delay_s: float = 30.0,
) -> list[Outcome]:
    """Settle `messages` as `settle` settles each, but store their events with one `add_many` (one
    transaction) and ack them only after its commit; returns what was done with each message, in order.

    Invalid messages are dead-lettered one by one first, each with its reason. While the database is down
    the batch is held and retried in place, and requeued on `stop`. The broker counts each return of a message
    against the queue's delivery limit, a connection lost or a restart of analytics too, so a long outage would
    have it dead-letter the held events: at each refusal, each held message that was returned before goes to
    `renewals` as a fresh copy and is acked (outcome RETRY), and the copy comes back to be held with a count
    of nought. Any other store error makes the batch fall back to `settle` for each of its events, so that a
    bad event is requeued (or dead-lettered on its last delivery) on its own while the others are stored.

    `messages` come in delivery order from one channel, and every message delivered before them on it is
    settled already: the stored ones are then acked by one `ack(multiple=True)` on the last of them.
    """
    outcomes: list[Outcome] = [Outcome.ACK] * len(messages)  # each place is set below
    valid: list[tuple[int, InboundMessage, Event]] = []
    for place, message in enumerate(messages):
        parsed = _parse(message.body)
        if isinstance(parsed, Verdict):
            outcomes[place] = await _conclude(
                message, parsed, dead_letters=dead_letters, delivery_limit=delivery_limit
            )
        else:
            valid.append((place, message, parsed))
    if not valid:
        return outcomes

    async def renew_returned() -> list[EventRecord]:
        nonlocal valid
        kept, error = [], None
        for place, message, event in valid:
            # After a failure the rest wait for the next retry too: each send may take its whole timeout.
            if renewals is None or _earlier_deliveries(message) == 0 or error is not None:
                kept.append((place, message, event))
                continue
            try:
                await renewals.send(message)
            except Exception as exc:  # not confirmed (the broker unreachable, say): tried at the next retry
                error = exc
                kept.append((place, message, event))
                continue
            with suppress(Exception):  # its channel closed: the broker has it back, beside the copy
                await message.ack()
            outcomes[place] = Outcome.RETRY
        if error is not None:
            unrenewed = sum(1 for _, message, _ in kept if _earlier_deliveries(message) > 0)
            log.warning("renewing held messages failed, holding them as they are",
                        extra={"messages": unrenewed, "error": repr(error)})
        valid = kept
        return [to_record(event) for _, _, event in valid]

    try:
        new = await _add_held(
            store, [to_record(event) for _, _, event in valid], stop=stop,
            delay=retry_delay_s, max_delay=max_retry_delay_s, on_hold=renew_returned,
        )
    except Exception as exc:
        if len(valid) == 1:  # nothing to isolate: requeue it as `settle` would
            place, message, event = valid[0]
            with _about(event):
                log.exception("storing event failed", extra=_log_fields(event))
            verdict = Verdict(Outcome.REQUEUE, f"store error: {exc!r}")
            outcomes[place] = await _conclude(
                message, verdict, dead_letters=dead_letters, delivery_limit=delivery_limit
            )
            return outcomes
        log.warning("storing a batch failed, storing its events one by one",
                    extra={"events": len(valid), "error": repr(exc)})
        for place, message, _ in valid:
            outcomes[place] = await settle(
                message, store=store, dead_letters=dead_letters, stop=stop, delivery_limit=delivery_limit,
                retry_delay_s=retry_delay_s, max_retry_delay_s=max_retry_delay_s,
            )
        return outcomes
    if new is None:  # stopped while the database was down: back to the queue, for this or another replica
        for place, message, _ in valid:
            await message.nack(requeue=True)
            outcomes[place] = Outcome.RETRY
        return outcomes
    if not valid:  # every message was renewed
        return outcomes
    _log_stored([event for _, _, event in valid], new)
    last = valid[-1][1]
    if len(valid) == 1:
        await last.ack()
    else:
        await last.ack(multiple=True)
    for place, _, _ in valid:
        outcomes[place] = Outcome.ACK
    return outcomes


async def _add_held(
    store: EventStore, records: list[EventRecord], *, stop: asyncio.Event, delay: float, max_delay: float,
    on_hold: Callable[[], Awaitable[list[EventRecord]]] | None = None,
) -> list[bool] | None:
    """store.add_many(records), retried with backoff while the database is down; None when `stop` came first.
    `on_hold`, called at each refusal, returns the records still to hold. The store says once why it refuses
    writes; each retry is only a debug line."""
    while True:
        if not records:
            return []
        try:
            return await asyncio.to_thread(store.add_many, records)
        except DependencyUnavailable:
            if stop.is_set():
                return None
            if on_hold is not None:
                records = await on_hold()
                if not records:
                    return []
            log.debug("database unavailable, events held for retry", extra={"events": len(records)})
            await _pause(stop, delay)
            delay = min(delay * 2, max_delay)


async def _conclude(
    message: InboundMessage, verdict: Verdict, *, dead_letters: DeadLetters, delivery_limit: int
) -> Outcome:
    """Ack, dead-letter or requeue `message` as `verdict` says; returns what was done."""
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


def _parse(body: bytes) -> Event | Verdict:
    """The event in `body`, or the verdict to dead-letter it with the reason."""
    if len(body) > MAX_EVENT_BYTES:
        return Verdict(Outcome.DEAD_LETTER, f"body: {len(body)} bytes, more than an event may have ({MAX_EVENT_BYTES})")
    try:
        event = parse_event(body)
    except ValidationError as exc:
        return Verdict(Outcome.DEAD_LETTER, _describe(exc))
    if not 1 <= event.schema_version <= SCHEMA_VERSION:
        return Verdict(
            Outcome.DEAD_LETTER, f"schema_version: {event.schema_version} is not supported (1 to {SCHEMA_VERSION})"
        )
    if not occurred_at_in_range(event.occurred_at, now=datetime.now(UTC)):
        return Verdict(
            Outcome.DEAD_LETTER, f"occurred_at: {event.occurred_at.isoformat()} is out of range ({OCCURRED_AT_RANGE})"
        )
    return event


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    try:
        async with asyncio.timeout(seconds):
            await stop.wait()
    except TimeoutError:
        pass


def _log_fields(event: Event) -> dict[str, str]:
    return {"event_id": str(event.event_id), "event_type": event.event_type}


def _log_stored(events: list[Event], new: list[bool]) -> None:
    if not log.isEnabledFor(logging.INFO):  # the per-event lines are skipped whole under load
        return
    for event, is_new in zip(events, new, strict=True):
        with _about(event):
            log.info("event stored" if is_new else "duplicate event ignored", extra=_log_fields(event))


@contextmanager
def _about(event: Event) -> Iterator[None]:
    """Log lines within carry the event's request id and trace id (the trace its traceparent names)."""
    token = request_id_var.set(event.request_id)
    try:
        with continued_trace(event.traceparent):
            yield
    finally:
        request_id_var.reset(token)


def _describe(exc: ValidationError) -> str:
    """The first few errors as `loc: message`, e.g. `QuerySubmitted.data.query: Field required`."""
    return "; ".join(one_line(error) for error in exc.errors()[:3])


def _earlier_deliveries(message: InboundMessage) -> int:
    """How often the broker has delivered the message before (quorum queues send `x-delivery-count`)."""
    try:
        return int((message.headers or {}).get("x-delivery-count", 0))
    except (TypeError, ValueError):
        return 0
