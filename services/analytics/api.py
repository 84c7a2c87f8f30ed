from __future__ import annotations

import asyncio

from fastapi import APIRouter

from services.analytics.deps import RangeDep, StoreDep
from services.analytics.models import SummaryResponse

router = APIRouter(prefix="/analytics", tags=["analytics"])

_ERRORS = {401: {"description": "Missing or wrong service token"}, 503: {"description": "Database unavailable"}}


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
