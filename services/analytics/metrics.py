"""Analytics' metrics: messages settled, dead letters, queue depths (consumer lag) and event age."""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol

from prometheus_client import Counter, Gauge

from services.analytics.handler import Outcome

log = logging.getLogger(__name__)

QUEUE_POLL_S = 2.0  # how often the queue depths are read from the broker

MESSAGES = Counter("cairn_analytics_messages_total", "Messages the consumer settled, by outcome", ["outcome"])
DEAD_LETTERS = Counter(
    "cairn_analytics_dead_letters_total",
    "Messages the consumer sent to the dead-letter queue: invalid_event, unsupported_schema or delivery_limit",
    ["reason"],
)
QUEUE_MESSAGES = Gauge(
    "cairn_analytics_queue_messages",
    "Messages ready in a queue, read from the broker every few seconds: events (the consumer's lag) or "
    "dead_letters",
    ["queue"],
)
DATABASE_WRITABLE = Gauge(
    "cairn_analytics_database_writable",
    "0 from a write of events the database refused (down, read-only, out of disk, ...) until one commits, else 1",
)
EVENT_AGE = Gauge(
    "cairn_analytics_event_age_seconds",
    "Seconds from occurred_at (to the second) to consumption, for the newest event of the last batch",
)

for _outcome in Outcome:
    MESSAGES.labels(_outcome.value)
for _reason in ("invalid_event", "unsupported_schema", "delivery_limit"):
    DEAD_LETTERS.labels(_reason)


class _Stamped(Protocol):
    timestamp: datetime | None


class _PassiveQueue(Protocol):
    async def declare(self, timeout: float | None = None) -> object: ...


def settled(messages: Sequence[_Stamped], outcomes: Sequence[Outcome]) -> None:
    """Count a settled batch by outcome, and set the event age from its newest message's timestamp."""
    for outcome in outcomes:
        MESSAGES.labels(outcome.value).inc()
    stamps = [m.timestamp for m in messages if m.timestamp is not None]
    if stamps:
        EVENT_AGE.set(max(0.0, time.time() - max(stamps).timestamp()))


def dead_lettered(reason: str) -> None:
    DEAD_LETTERS.labels(dead_letter_kind(reason)).inc()


def dead_letter_kind(reason: str) -> str:
    """The reason's kind, for a label: the reason itself names fields and errors, too many values."""
    if reason.endswith("deliveries)"):
        return "delivery_limit"
    if reason.startswith("schema_version:"):
        return "unsupported_schema"
    return "invalid_event"


async def poll_queue_depths(queues: Mapping[str, _PassiveQueue], *, every_s: float = QUEUE_POLL_S) -> None:
    """Set `cairn_analytics_queue_messages` for each queue (label -> a passively declared queue) every
    `every_s` until cancelled; while the broker is away the last values stay."""
    while True:
        for label, queue in queues.items():
            try:
                declared = await queue.declare(timeout=every_s)
                QUEUE_MESSAGES.labels(label).set(declared.message_count or 0)  # type: ignore[attr-defined]
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.debug("reading a queue depth failed", extra={"queue": label, "error": repr(exc)})
        await asyncio.sleep(every_s)
