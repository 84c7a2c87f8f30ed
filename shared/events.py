"""Domain events: a versioned envelope and the four event types of DESIGN.md.

Evolving a schema: adding an optional field keeps `schema_version`; renaming, removing or
changing the meaning of a field bumps it, and consumers keep reading the older versions.
"""
from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

SCHEMA_VERSION = 1

# The occurred_at a consumer accepts: before the database (which cannot hold a UTC time before year 1 or
# after 9999) and the reports see an event. The past bound is fixed, not relative to now: the outbox and the
# queue may hand over events days or weeks late after an outage, and a dead letter may be replayed later
# still, so only a clock reset to the epoch or a forged value falls before it. The future bound follows the
# reader's clock with a day's slack, enough for skewed clocks and for a local time sent as UTC (at most 14
# hours ahead), while an event far ahead, which would sit in the future of every report, is refused.
OCCURRED_AT_MIN = datetime(2000, 1, 1, tzinfo=UTC)
OCCURRED_AT_AHEAD = timedelta(days=1)
OCCURRED_AT_RANGE = "2000-01-01T00:00:00Z to a day past the consumer's clock"


class _Data(BaseModel):
    # JSON allows 1e400, which parses to infinity: one such latency would blank every mean and percentile
    # of its range (and PostgreSQL refuses it in a JSON column), so a non-finite number makes the event invalid.
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class Usage(_Data):
    """Tokens the language model counted for one answer."""

    prompt_tokens: int = Field(0, description="Tokens of the prompt sent to the model.")
    completion_tokens: int = Field(0, description="Tokens of the answer the model wrote.")
    total_tokens: int = Field(0, description="The sum of prompt_tokens and completion_tokens.")


class QuerySubmittedData(_Data):
    query: str = Field(description="The question as the user sent it.")
    conversation_id: str | None = Field(
        None, description="The conversation the question belongs to; a new one when the request named none."
    )
    model: str | None = Field(None, description="The model asked to answer.")
    top_k: int | None = Field(None, description="How many chunks the question asked retrieval for.")


class ResponseGeneratedData(_Data):
    query: str = Field(description="The question as the user sent it.")
    reformulated_query: str | None = Field(
        None, description="The question as it was searched, which differs when a follow-up was rewritten."
    )
    answered: bool = Field(description="False when the answer says no relevant information was found.")
    no_answer: bool = Field(False, description="True when the fallback 'no relevant information' answer was given.")
    kind: Literal["answer", "no_information", "small_talk"] | None = Field(
        None,
        description="The kind of response: answer (an answer cited from the documents), no_information (nothing "
        "relevant was found, or the model's answer cited nothing) or small_talk (a greeting answered without searching).",
    )
    conversation_id: str | None = Field(None, description="The conversation the answer belongs to.")
    model: str | None = Field(
        None,
        description="The model that answered, named as chat asked it (as in QuerySubmitted), not by the endpoint's "
        "own name for it; null when no model was asked.",
    )
    latency_ms: float | None = Field(
        None, ge=0, description="Milliseconds from receiving the question to the response, the same as timings_ms.total."
    )
    confidence_level: str | None = Field(None, description="The confidence of the answer: High, Medium or Low.")
    confidence_score: float | None = Field(None, description="The confidence score of the answer, from 0 to 1.")
    citation_count: int = Field(0, description="How many citations the answer has.")
    supported_citations: int | None = Field(
        None, description="How many citations the grounding check found supported by the cited passage."
    )
    grounding_score: float | None = Field(
        None, description="How well the cited passages support the answer, from 0 to 1; null when no model was asked."
    )
    cited_doc_ids: list[str] = Field(
        default_factory=list,
        description="The document of each citation, in citation order: a document cited twice is listed twice.",
    )
    chunks_retrieved: int = Field(0, description="How many chunks retrieval returned (the retrieval count).")
    chunks_used: int = Field(0, description="Chunks given to the model as context.")
    timings_ms: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict,
        description="Milliseconds per step: reformulate, retrieval, generation, citations and total.",
    )
    usage: Usage = Field(default_factory=Usage, description="The tokens the model counted.")
    finish_reason: str | None = Field(None, description="Why the model stopped, such as stop, length or content_filter.")


class QueryFailedData(_Data):
    query: str = Field(description="The question as the user sent it.")
    stage: Literal[
        "validation", "conversation", "reformulate", "retrieval", "generation", "citations", "internal", "interrupted"
    ] = Field(
        description="The step that was running when the question failed; `interrupted` (published by the gateway): "
        "the connection to chat broke after the question reached it, as when the chat process dies mid-question."
    )
    error: str = Field(description="The error code of the response, such as retrieval_unavailable.")
    error_type: str | None = Field(None, description="The name of the exception class behind the error.")
    total_ms: float | None = Field(None, ge=0, description="Milliseconds from receiving the question to the failure.")


class FeedbackReceivedData(_Data):
    rated_request_id: str = Field(description="The request_id of the answer that was rated.")
    rating: Literal[-1, 1] = Field(description="1 for a helpful answer, -1 for an unhelpful one.")
    comment: str | None = Field(None, description="What the user wrote with the rating, if anything.")


class _Envelope(BaseModel):
    event_id: uuid.UUID = Field(
        default_factory=uuid.uuid4,
        description="Identifies the event; also the message_id. A consumer stores each event_id once.",
    )
    schema_version: int = Field(SCHEMA_VERSION, description="The version of the event's schema, starting at 1.")
    occurred_at: datetime = Field(
        default_factory=lambda: datetime.now(UTC),
        description="When the event happened, in UTC. A consumer refuses an event from before 2000 or more "
        "than a day ahead of its clock.",
    )
    source_service: str = Field(description="The service that published the event, such as chat.")
    request_id: str | None = Field(None, description="The id of the request, the same one found in the logs.")
    trace_id: str | None = Field(None, description="The W3C trace id of the request, the same one found in the logs.")
    traceparent: str | None = Field(
        None,
        description="The W3C traceparent of the span that published the event, which names the trace and the span "
        "so a tracing backend can link the event to the request's spans.",
    )
    user_id: str | None = Field(None, description="The user who made the request.")
    session_id: str | None = Field(None, description="The login session of that user.")


class QuerySubmitted(_Envelope):
    """Published by chat when it receives a question. A question chat refused after receiving it (a 4xx
    QueryFailed, such as conversation_not_found) may be sent again with the same request_id, which publishes
    another: a request_id is one question, as its latest QuerySubmitted asks it, with the latest outcome of that
    last try (pending until it has one)."""

    event_type: Literal["QuerySubmitted"] = "QuerySubmitted"
    data: QuerySubmittedData


class ResponseGenerated(_Envelope):
    """Published by chat when it returns an answer, as one response or as the done event of a stream."""

    event_type: Literal["ResponseGenerated"] = "ResponseGenerated"
    data: ResponseGeneratedData


class QueryFailed(_Envelope):
    """Published by chat when a question fails after it was received."""

    event_type: Literal["QueryFailed"] = "QueryFailed"
    data: QueryFailedData


class FeedbackReceived(_Envelope):
    """Published by the gateway when a user rates an answer; a later rating of the same answer replaces it."""

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


def occurred_at_in_range(occurred_at: datetime, *, now: datetime) -> bool:
    """Whether `occurred_at` lies in OCCURRED_AT_RANGE, a time without an offset read as UTC."""
    if occurred_at.tzinfo is None:
        occurred_at = occurred_at.replace(tzinfo=UTC)
    try:
        occurred_at = occurred_at.astimezone(UTC)
    except OverflowError:  # before year 1 or after 9999 in UTC, such as 0001-01-01T03:00+05:00
        return False
    return OCCURRED_AT_MIN <= occurred_at <= now + OCCURRED_AT_AHEAD


def parse_event(raw: bytes | str) -> Event:
    """Validate a message body into its event model; raises pydantic.ValidationError."""
    return _event_adapter.validate_json(raw)
