"""Event factories shared by the analytics tests."""
from __future__ import annotations

from datetime import UTC, datetime

from shared.events import (
    FeedbackReceived,
    FeedbackReceivedData,
    QueryFailed,
    QueryFailedData,
    QuerySubmitted,
    QuerySubmittedData,
    ResponseGenerated,
    ResponseGeneratedData,
    Usage,
)

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def submitted(
    *, at: datetime = T0, request_id: str = "r1", query: str = "How do I add a user?", user_id: str | None = "u1",
    model: str | None = "offline",
) -> QuerySubmitted:
    return QuerySubmitted(
        source_service="chat", occurred_at=at, request_id=request_id, user_id=user_id,
        data=QuerySubmittedData(query=query, model=model),
    )


def responded(
    *, at: datetime = T0, request_id: str = "r1", answered: bool = True, total_ms: float | None = 100.0,
    citations: int = 2, kind: str | None = None, model: str | None = "offline", confidence: str | None = None,
    supported: int | None = None, tokens: tuple[int, int, int] = (0, 0, 0), docs: list[str] | None = None,
    query: str = "How do I add a user?",
) -> ResponseGenerated:
    """A response; `total_ms` is reported as timings_ms.total only (as events before latency_ms did)."""
    timings = {"retrieval": 10.0} | ({"total": total_ms} if total_ms is not None else {})
    prompt, completion, total = tokens
    return ResponseGenerated(
        source_service="chat", occurred_at=at, request_id=request_id, user_id="u1",
        data=ResponseGeneratedData(
            query=query, answered=answered, no_answer=kind == "no_information", kind=kind, model=model,
            citation_count=citations, supported_citations=supported, confidence_level=confidence,
            cited_doc_ids=["guide"] * citations if docs is None else docs, timings_ms=timings,
            usage=Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=total),
        ),
    )


def failed(
    *, at: datetime = T0, request_id: str = "r9", stage: str = "retrieval", error: str = "retrieval_unavailable",
    total_ms: float | None = 12.5,
) -> QueryFailed:
    return QueryFailed(
        source_service="chat", occurred_at=at, request_id=request_id,
        data=QueryFailedData(query="q", stage=stage, error=error, total_ms=total_ms),
    )


def feedback(
    *, at: datetime = T0, rated_request_id: str = "r1", rating: int = 1, comment: str | None = None,
    user_id: str | None = None,
) -> FeedbackReceived:
    return FeedbackReceived(
        source_service="gateway", occurred_at=at, request_id="r-fb", user_id=user_id,
        data=FeedbackReceivedData(rated_request_id=rated_request_id, rating=rating, comment=comment),
    )
