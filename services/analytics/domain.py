"""What analytics keeps of each event, and the outside systems it reads and writes through."""
from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from shared.events import Event, FeedbackReceived, QueryFailed, QuerySubmitted, ResponseGenerated

# A request's outcome, from its ResponseGenerated or QueryFailed ("pending" while it has neither).
ANSWERED, NO_ANSWER, SMALL_TALK, FAILED, PENDING = "answered", "no_answer", "small_talk", "failed", "pending"
RESPONSE_OUTCOMES = (ANSWERED, NO_ANSWER, SMALL_TALK)


@dataclass(frozen=True, kw_only=True)
class EventRecord:
    """One event as stored: the envelope, the whole event as payload, and the data fields the reports
    aggregate on, extracted once at insert time."""

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
    outcome: str | None = None
    answered: bool | None = None
    no_answer: bool | None = None
    latency_ms: float | None = None
    query_text: str | None = None
    query_key: str | None = None
    conversation_id: str | None = None
    confidence_level: str | None = None
    confidence_score: float | None = None
    citation_count: int | None = None
    supported_citations: int | None = None
    grounding_score: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    failure_stage: str | None = None
    error: str | None = None
    rated_request_id: str | None = None
    rating: int | None = None
    comment: str | None = None
    cited_documents: tuple[tuple[str, int], ...] = ()
    payload: dict[str, Any] = field(default_factory=dict)


def query_key(text: str) -> str:
    """How questions are grouped: lower-cased, with runs of whitespace collapsed to one space."""
    return " ".join(text.lower().split())


def to_record(event: Event) -> EventRecord:
    extracted: dict[str, Any] = {}
    match event:
        case QuerySubmitted(data=data):
            extracted = {"model": data.model, "conversation_id": data.conversation_id}
        case ResponseGenerated(data=data):
            extracted = {
                "model": data.model,
                "outcome": _response_outcome(kind=data.kind, answered=data.answered, no_answer=data.no_answer),
                "answered": data.answered,
                "no_answer": data.no_answer,
                "latency_ms": data.latency_ms if data.latency_ms is not None else data.timings_ms.get("total"),
                "conversation_id": data.conversation_id,
                "confidence_level": data.confidence_level.lower() if data.confidence_level else None,
                "confidence_score": data.confidence_score,
                "citation_count": data.citation_count,
                "supported_citations": data.supported_citations,
                "grounding_score": data.grounding_score,
                "prompt_tokens": data.usage.prompt_tokens,
                "completion_tokens": data.usage.completion_tokens,
                "total_tokens": data.usage.total_tokens,
                "cited_documents": tuple(Counter(data.cited_doc_ids).items()),
            }
        case QueryFailed(data=data):
            extracted = {"outcome": FAILED, "latency_ms": data.total_ms, "failure_stage": data.stage,
                         "error": data.error}
        case FeedbackReceived(data=data):
            extracted = {"rated_request_id": data.rated_request_id, "rating": data.rating, "comment": data.comment}
    if (query := getattr(event.data, "query", None)) is not None:
        extracted |= {"query_text": query, "query_key": query_key(query)}
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


def _response_outcome(*, kind: str | None, answered: bool, no_answer: bool) -> str:
    if kind == "small_talk":
        return SMALL_TALK
    if kind == "no_information" or no_answer or not answered:
        return NO_ANSWER
    return ANSWERED


class EventStore(Protocol):
    """Where analytics keeps events. Blocking calls: run them from async code with asyncio.to_thread.

    Every method raises shared.errors.DependencyUnavailable("database") when the database does not answer.
    """

    def add(self, record: EventRecord) -> bool:
        """Store the record once per event_id, committed on return; True when it was new."""
        ...

    def add_many(self, records: Sequence[EventRecord]) -> list[bool]:
        """Store the records once per event_id in one transaction, committed on return (all or none);
        for each record, True when it was new. An event_id that comes twice in `records` is new at most
        once, at its first place."""
        ...

    def ping(self) -> bool:
        """True when the database answers; never raises."""
        ...

    @property
    def writable(self) -> bool:
        """False from a write the database refused until one commits (it may answer ping all the while)."""
        ...

    def takes_writes(self, *, timeout_s: float) -> bool:
        """`writable`, or, when the last write was only cut short (cancelled, or timed out waiting for a lock),
        whether the database would take one now, asked within `timeout_s`; never raises."""
        ...

    def close(self) -> None: ...


class DocumentLibrary(Protocol):
    """The documents retrieval holds (for the never-cited report)."""

    async def document_ids(self) -> list[str]:
        """Every doc_id in the library; raises DependencyUnavailable("retrieval") when retrieval does not answer."""
        ...

    async def readiness(self) -> dict[str, bool]:
        """/readyz checks: `retrieval` answers, `retrieval_service_token` (false when it refuses analytics' token)."""
        ...
