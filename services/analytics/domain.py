"""What analytics keeps of each event, the summary it answers, and the store behind both."""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from shared.events import Event, FeedbackReceived, QueryFailed, QuerySubmitted, ResponseGenerated


@dataclass(frozen=True, kw_only=True)
class EventRecord:
    """One event as stored: the envelope, the whole event as payload, and the few data fields
    that queries aggregate on, extracted once at insert time."""

    event_id: uuid.UUID
    event_type: str
    schema_version: int
    occurred_at: datetime
    source_service: str
    request_id: str | None = None
    trace_id: str | None = None
    user_id: str | None = None
    session_id: str | None = None
    model: str | None = None
    answered: bool | None = None
    latency_ms: float | None = None
    citation_count: int | None = None
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Summary:
    queries: int = 0
    answered: int = 0
    unanswered: int = 0
    failed: int = 0
    mean_latency_ms: float | None = None
    mean_citations: float | None = None


def to_record(event: Event) -> EventRecord:
    extracted: dict[str, Any] = {}
    match event:
        case QuerySubmitted(data=data):
            extracted = {"model": data.model}
        case ResponseGenerated(data=data):
            extracted = {
                "model": data.model,
                "answered": data.answered,
                "latency_ms": data.timings_ms.get("total"),
                "citation_count": data.citation_count,
            }
        case QueryFailed(data=data):
            extracted = {"latency_ms": data.total_ms}
        case FeedbackReceived():
            pass
    return EventRecord(
        event_id=event.event_id,
        event_type=event.event_type,
        schema_version=event.schema_version,
        occurred_at=event.occurred_at,
        source_service=event.source_service,
        request_id=event.request_id,
        trace_id=event.trace_id,
        user_id=event.user_id,
        session_id=event.session_id,
        payload=event.model_dump(mode="json"),
        **extracted,
    )


class EventStore(Protocol):
    """Where analytics keeps events. Blocking calls: run them from async code with asyncio.to_thread.

    Every method raises shared.errors.DependencyUnavailable("database") when the database does not answer.
    """

    def add(self, record: EventRecord) -> bool:
        """Store the record once per event_id, committed on return; True when it was new."""
        ...

    def summary(self, *, start: datetime | None = None, end: datetime | None = None) -> Summary:
        """Counts and means over events with start <= occurred_at < end (open where None)."""
        ...

    def ping(self) -> bool:
        """True when the database answers; never raises."""
        ...

    def close(self) -> None: ...
