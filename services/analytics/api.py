from __future__ import annotations

import asyncio

from fastapi import APIRouter

from services.analytics.deps import RangeDep, StoreDep
from services.analytics.models import SummaryResponse
from shared.web import error_responses

router = APIRouter(prefix="/analytics", tags=["analytics"])

_ERRORS = error_responses(
    {
        401: "Missing or wrong service token",
        422: "from or to is not an ISO 8601 date-time, or from is after to (invalid_request)",
        503: "Database unavailable (database_unavailable)",
    }
)


@router.get("/summary", response_model=SummaryResponse, responses=_ERRORS)
async def summary(store: StoreDep, time_range: RangeDep) -> SummaryResponse:
    """Query volume, answer rate, latency and citations for events in [from, to)."""
    result = await asyncio.to_thread(store.summary, start=time_range.start, end=time_range.end)
    return SummaryResponse(
        from_=time_range.start,
        to=time_range.end,
        queries=result.queries,
        answered=result.answered,
        unanswered=result.unanswered,
        failed=result.failed,
        mean_latency_ms=result.mean_latency_ms,
        mean_citations=result.mean_citations,
    )
