"""The analysts' reports, each over the requests submitted in [from, to), optionally of one model."""
from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Send
from starlette.types import Scope as ASGIScope

from services.analytics.deps import (
    ExportSlotsDep,
    LibraryDep,
    LimitQuery,
    PricesDep,
    ScopeDep,
    StoreDep,
    TimeZoneQuery,
)
from services.analytics.export_slots import ExportStream
from services.analytics.models import (
    Bucket,
    ContentGapsResponse,
    DocumentsResponse,
    FeedbackResponse,
    ModelsResponse,
    SummaryResponse,
    TimeSeriesResponse,
    TopQueriesResponse,
)
from services.analytics.reports import documents as documents_report
from services.analytics.reports import export, per_model, queries
from services.analytics.reports import feedback as feedback_report
from services.analytics.reports import summary as summary_report
from services.analytics.reports import timeseries as timeseries_report
from services.analytics.reports.buckets import DEFAULT_ZONE
from shared.json_body import StrictJsonRoute
from shared.web import error_responses

router = APIRouter(route_class=StrictJsonRoute, prefix="/analytics", tags=["analytics"])

_BAD_INPUT = (
    "from or to is not an ISO 8601 date-time, from is after to, or a parameter is out of range (invalid_request)"
)
_STATUSES = {
    401: "Missing or wrong service token",
    422: _BAD_INPUT,
    503: "Database unavailable, busy with every connection in use, or a query cancelled at "
    "ANALYTICS_STATEMENT_TIMEOUT_S (database_unavailable; when busy, with Retry-After)",
}
_ERRORS = error_responses(_STATUSES)
_TIMESERIES_ERRORS = error_responses(
    _STATUSES | {422: f"{_BAD_INPUT}; tz is no IANA time zone name; or more than 10,000 buckets"}
)
_DOCUMENTS_ERRORS = error_responses(
    _STATUSES | {503: f"{_STATUSES[503]}, or retrieval did not list its documents (retrieval_unavailable)"}
)
_EXPORT_STATUSES = _STATUSES | {
    429: "ANALYTICS_MAX_EXPORTS exports are streaming already (too_many_exports, with Retry-After)"
}


class CsvResponse(StreamingResponse):
    media_type = "text/csv"

    # status_code stated: FastAPI reads the route's status from this signature's default for its OpenAPI.
    def __init__(self, rows: ExportStream, status_code: int = 200, **kwargs: Any) -> None:
        super().__init__(rows, status_code=status_code, **kwargs)
        self._rows = rows

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._rows.close()


def _json_errors(described: dict[int, str]) -> dict[int | str, dict]:
    """Error responses with their JSON body declared by hand: FastAPI would give a route's error models the
    route's own media type, text/csv for the export."""
    body = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    return {status: {"description": text, "content": body} for status, text in described.items()}


@router.get("/summary", response_model=SummaryResponse, responses=_ERRORS)
async def summary(store: StoreDep, scope: ScopeDep) -> SummaryResponse:
    """Volume, outcomes and their rates, latency percentiles, citations, confidence, feedback and tokens."""
    return await asyncio.to_thread(store.read, summary_report.summary, scope=scope)


@router.get("/timeseries", response_model=TimeSeriesResponse, responses=_TIMESERIES_ERRORS)
async def timeseries(
    store: StoreDep,
    scope: ScopeDep,
    bucket: Bucket = Query("hour", description="Width of a point: a minute, hour or day of tz's clock"),
    tz: TimeZoneQuery = DEFAULT_ZONE,
) -> TimeSeriesResponse:
    """Volume, outcomes, answer rate and latency percentiles per minute, hour or day, empty buckets included."""
    return await asyncio.to_thread(store.read, timeseries_report.timeseries, scope=scope, bucket=bucket, tz=tz)


@router.get("/top-queries", response_model=TopQueriesResponse, responses=_ERRORS)
async def top_queries(store: StoreDep, scope: ScopeDep, limit: LimitQuery = 20) -> TopQueriesResponse:
    """The questions asked most often."""
    return await asyncio.to_thread(store.read, queries.top_queries, scope=scope, limit=limit)


@router.get("/gaps", response_model=ContentGapsResponse, responses=_ERRORS)
async def gaps(store: StoreDep, scope: ScopeDep, limit: LimitQuery = 20) -> ContentGapsResponse:
    """Content gaps: questions answered with "no relevant information" or with low confidence."""
    return await asyncio.to_thread(store.read, queries.content_gaps, scope=scope, limit=limit)


@router.get("/documents", response_model=DocumentsResponse, responses=_DOCUMENTS_ERRORS)
async def documents(
    store: StoreDep, library: LibraryDep, scope: ScopeDep, limit: LimitQuery = 20
) -> DocumentsResponse:
    """The documents cited most, and the documents of retrieval's library that no answer cites."""
    doc_ids = await library.document_ids()
    return await asyncio.to_thread(
        store.read, documents_report.documents, scope=scope, library=doc_ids, limit=limit
    )


@router.get("/models", response_model=ModelsResponse, responses=_ERRORS)
async def models(store: StoreDep, prices: PricesDep, scope: ScopeDep, limit: LimitQuery = 20) -> ModelsResponse:
    """Requests, share, latency percentiles, tokens and their cost per model."""
    return await asyncio.to_thread(store.read, per_model.models, scope=scope, limit=limit, prices=prices)


@router.get("/feedback", response_model=FeedbackResponse, responses=_ERRORS)
async def feedback(store: StoreDep, scope: ScopeDep, limit: LimitQuery = 20) -> FeedbackResponse:
    """Rating figures, and the latest rating of each rated request with its comment, newest first."""
    return await asyncio.to_thread(store.read, feedback_report.feedback, scope=scope, limit=limit)


@router.get(
    "/export.csv",
    response_class=CsvResponse,
    responses={200: {"description": "One row per request, oldest first (columns in docs/analytics.md)",
                     "content": {"text/csv": {"schema": {"type": "string"}}}}, **_json_errors(_EXPORT_STATUSES)},
)
async def export_csv(store: StoreDep, slots: ExportSlotsDep, scope: ScopeDep) -> CsvResponse:
    """The per-request view as CSV, streamed; at most ANALYTICS_MAX_EXPORTS at once."""
    slots.take()
    try:
        rows = await asyncio.to_thread(store.stream, export.statement(scope))
    except BaseException:
        slots.release()
        raise
    return CsvResponse(
        slots.stream(export.csv_chunks(rows), holding=rows),
        headers={"Content-Disposition": 'attachment; filename="cairn-requests.csv"'},
    )
