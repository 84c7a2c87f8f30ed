"""Domain events: a versioned envelope and the four event types of DESIGN.md.

Evolving a schema: adding an optional field keeps `schema_version`; renaming, removing or
changing the meaning of a field bumps it, and consumers keep reading the older versions.
"""
from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

SCHEMA_VERSION = 1


class _Data(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Usage(_Data):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class QuerySubmittedData(_Data):
    query: str
    conversation_id: str | None = None
    model: str | None = None
    top_k: int | None = None


class ResponseGeneratedData(_Data):
    query: str
    reformulated_query: str | None = None
    answered: bool = Field(description="False when the answer says no relevant information was found.")
    no_answer: bool = Field(False, description="True when the fallback 'no relevant information' answer was given.")
    kind: Literal["answer", "no_information", "small_talk"] | None = None
    conversation_id: str | None = None
    model: str | None = None
    latency_ms: float | None = Field(None, description="Receipt to response, as timings_ms.total.")
    confidence_level: str | None = None
    confidence_score: float | None = None
    citation_count: int = 0
    supported_citations: int | None = Field(None, description="Citations whose sentences the cited passage supports.")
    grounding_score: float | None = None
    cited_doc_ids: list[str] = Field(default_factory=list)
    chunks_retrieved: int = Field(0, description="The retrieval_count: chunks retrieval returned.")
    chunks_used: int = 0
    timings_ms: dict[str, float] = Field(default_factory=dict)
    usage: Usage = Field(default_factory=Usage)
    finish_reason: str | None = None


class QueryFailedData(_Data):
    query: str
    stage: Literal["validation", "conversation", "reformulate", "retrieval", "generation", "citations", "internal"]
    error: str = Field(description="The error code of the response, e.g. retrieval_unavailable.")
    error_type: str | None = Field(None, description="The exception class behind it.")
    total_ms: float | None = None


class FeedbackReceivedData(_Data):
    rated_request_id: str
    rating: Literal[-1, 1]
    comment: str | None = None


class _Envelope(BaseModel):
    event_id: uuid.UUID = Field(default_factory=uuid.uuid4)
    schema_version: int = SCHEMA_VERSION
    occurred_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    source_service: str
    request_id: str | None = None
    trace_id: str | None = None
    user_id: str | None = None
    session_id: str | None = None


class QuerySubmitted(_Envelope):
    event_type: Literal["QuerySubmitted"] = "QuerySubmitted"
    data: QuerySubmittedData


class ResponseGenerated(_Envelope):
    event_type: Literal["ResponseGenerated"] = "ResponseGenerated"
    data: ResponseGeneratedData


class QueryFailed(_Envelope):
    event_type: Literal["QueryFailed"] = "QueryFailed"
    data: QueryFailedData


class FeedbackReceived(_Envelope):
    event_type: Literal["FeedbackReceived"] = "FeedbackReceived"
    data: FeedbackReceivedData


Event = Annotated[
    Union[QuerySubmitted, ResponseGenerated, QueryFailed, FeedbackReceived],
    Field(discriminator="event_type"),
]
_event_adapter: TypeAdapter[Event] = TypeAdapter(Event)

ROUTING_KEYS: dict[str, str] = {
    "QuerySubmitted": "analytics.query.submitted",
    "ResponseGenerated": "analytics.response.generated",
    "QueryFailed": "analytics.query.failed",
    "FeedbackReceived": "analytics.feedback.received",
}


def routing_key(event: Event) -> str:
    return ROUTING_KEYS[event.event_type]


def parse_event(raw: bytes | str) -> Event:
    """Validate a message body into its event model; raises pydantic.ValidationError."""
    return _event_adapter.validate_json(raw)
