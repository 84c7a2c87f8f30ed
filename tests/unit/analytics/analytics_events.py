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
)

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def submitted(*, at: datetime = T0, request_id: str = "r1", query: str = "How do I add a user?") -> QuerySubmitted:
    return QuerySubmitted(
        source_service="chat", occurred_at=at, request_id=request_id, user_id="u1",
        data=QuerySubmittedData(query=query, model="offline"),
    )


def responded(
    *, at: datetime = T0, request_id: str = "r1", answered: bool = True, total_ms: float | None = 100.0,
    citations: int = 2,
) -> ResponseGenerated:
    timings = {"retrieval": 10.0} | ({"total": total_ms} if total_ms is not None else {})
    return ResponseGenerated(
        source_service="chat", occurred_at=at, request_id=request_id, user_id="u1",
        data=ResponseGeneratedData(
            query="How do I add a user?", answered=answered, model="offline", citation_count=citations,
            cited_doc_ids=["guide"] * citations, timings_ms=timings,
        ),
    )


def failed(*, at: datetime = T0, request_id: str = "r9") -> QueryFailed:
    return QueryFailed(
        source_service="chat", occurred_at=at, request_id=request_id,
        data=QueryFailedData(query="q", stage="retrieval", error="retrieval_unavailable", total_ms=12.5),
    )


def feedback(*, at: datetime = T0, rated_request_id: str = "r1") -> FeedbackReceived:
    return FeedbackReceived(
        source_service="gateway", occurred_at=at, request_id="r-fb",
        data=FeedbackReceivedData(rated_request_id=rated_request_id, rating=1),
    )
