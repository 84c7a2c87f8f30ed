"""The analytics API's responses: the contract the dashboard and the gateway's /api/analytics/... rely on.

Every report covers the requests submitted in [from, to) (a QuerySubmitted's occurred_at), optionally only
those of one `model`. A request's outcome is that of its ResponseGenerated or QueryFailed; one with neither
yet is `pending`: it counts as a question asked, in no outcome, rate or latency. Rates are shares of the
requests with an outcome, null when there are none. Latencies are milliseconds from receipt to response
(ResponseGenerated.latency_ms, else QueryFailed.total_ms); percentiles are linear interpolation between
closest ranks (numpy's default method, PostgreSQL's percentile_cont), null when there is no value.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Bucket = Literal["minute", "hour", "day"]
Outcome = Literal["answered", "no_answer", "small_talk", "failed", "pending"]


class _Range(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    from_: datetime | None = Field(None, alias="from", description="Start of the range (inclusive), UTC.")
    to: datetime | None = Field(None, description="End of the range (exclusive), UTC.")
    model: str | None = Field(
        None,
        description="Only requests answered by (or asked of) this model; `unknown` also selects the requests "
        "whose events name no model, as the models report counts them.",
    )


class Percentiles(BaseModel):
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None


class ConfidenceMix(BaseModel):
    """Responses by confidence level (no_answer and small-talk responses included)."""

    high: int = 0
    medium: int = 0
    low: int = 0


class FeedbackFigures(BaseModel):
    ratings: int = Field(0, description="Rated requests; a request rated again counts once, with its latest rating.")
    positive: int = 0
    negative: int = 0
    score: float | None = Field(None, description="(positive - negative) / ratings, in [-1, 1]; null without ratings.")


class Tokens(BaseModel):
    prompt: int = 0
    completion: int = 0
    total: int = 0


class SummaryResponse(_Range):
    queries: int = Field(description="Requests submitted (QuerySubmitted).")
    distinct_users: int
    completed: int = Field(description="Requests with an outcome (ResponseGenerated or QueryFailed).")
    answered: int = Field(description="Responses with an answer (not no_answer, not small talk).")
    no_answer: int = Field(description="Responses saying no relevant information was found.")
    small_talk: int
    failed: int = Field(description="QueryFailed outcomes.")
    answered_rate: float | None
    no_answer_rate: float | None
    failure_rate: float | None
    failures_by_stage: dict[str, int] = Field(description="QueryFailed outcomes by stage (retrieval, generation, ...).")
    latency_ms: Percentiles
    mean_latency_ms: float | None
    mean_citations: float | None = Field(description="Mean citations per answered response.")
    supported_citation_rate: float | None = Field(
        description="Supported citations / citations over responses that report support."
    )
    confidence: ConfidenceMix
    feedback: FeedbackFigures
    tokens: Tokens


class TimePoint(BaseModel):
    start: datetime = Field(
        description="Start of the bucket, with the offset `tz` has at that instant (Z when it is zero)."
    )
    queries: int
    answered: int
    no_answer: int
    failed: int
    answered_rate: float | None
    latency_ms: Percentiles


class TimeSeriesResponse(_Range):
    bucket: Bucket
    tz: str = Field(
        "UTC",
        description="The IANA time zone whose clock the buckets follow: a bucket starts where that clock shows a "
        "new minute, hour or day, so a day around a daylight saving change lasts 23 or 25 hours.",
    )
    points: list[TimePoint] = Field(
        description="One per bucket from the bucket holding `from` to the one holding the instant before `to`, "
        "empty buckets included (zeros); without from/to, from the first to the last request."
    )


class QueryCount(BaseModel):
    query: str = Field(description="The question as first asked (grouped case- and whitespace-insensitively).")
    count: int
    answered: int = Field(description="Of those, answered (the outcome answered).")
    last_asked: datetime


class TopQueriesResponse(_Range):
    items: list[QueryCount]


class ContentGap(BaseModel):
    query: str
    count: int = Field(description="Times asked in the range.")
    no_answer: int = Field(description="Of those, answered with 'no relevant information'.")
    low_confidence: int = Field(description="Of those, answered with low confidence.")
    last_asked: datetime
    last_request_id: str


class ContentGapsResponse(_Range):
    items: list[ContentGap] = Field(description="Questions with a no_answer or low-confidence response, most frequent first.")


class CitedDocument(BaseModel):
    doc_id: str
    citations: int = Field(description="Citations of the document in answers.")
    requests: int = Field(description="Answers citing it at least once.")


class DocumentsResponse(_Range):
    most_cited: list[CitedDocument]
    never_cited: list[str] = Field(
        description="Documents in retrieval's library that no answer in the range cites, in doc_id order (at most `limit`)."
    )
    never_cited_total: int = Field(
        description="How many documents of the library no answer in the range cites; more than `never_cited` "
        "holds when the list was cut to `limit`."
    )

    @model_validator(mode="before")
    @classmethod
    def _total_of_an_uncut_list(cls, data: Any) -> Any:
        # A response built without the total (as before it existed) lists every never-cited document.
        if isinstance(data, dict) and "never_cited_total" not in data and isinstance(data.get("never_cited"), list):
            return {**data, "never_cited_total": len(data["never_cited"])}
        return data


class ModelFigures(BaseModel):
    model: str = Field(description="The model; `unknown` for requests whose events name none.")
    requests: int = Field(description="Requests with an outcome answered by or asked of this model.")
    share: float = Field(description="Its share of all requests with an outcome in the range, in [0, 1].")
    latency_ms: Percentiles
    tokens: Tokens
    mean_total_tokens: float | None = Field(description="Total tokens per response of this model; null without one.")
    cost_usd: float | None = Field(
        None, description="Its prompt and completion tokens at its MODEL_PRICES price, in US dollars; null without one."
    )


class ModelsResponse(_Range):
    items: list[ModelFigures]


class FeedbackItem(BaseModel):
    rated_request_id: str
    rating: Literal[-1, 1]
    comment: str | None
    rated_at: datetime
    user_id: str | None = Field(description="Who rated.")
    query: str | None = Field(description="The rated question, when its QuerySubmitted was received.")


class FeedbackResponse(_Range):
    figures: FeedbackFigures
    items: list[FeedbackItem] = Field(description="The latest rating of each rated request, newest first.")
