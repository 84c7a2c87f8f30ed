"""A stand-in for the analytics service behind the gateway: every report of the contract
(services/analytics/models.py) with known figures, for the tests of the gateway's forwarding and of the
dashboard page. It remembers each request it got, and can answer 503 or hold no data on demand."""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from services.analytics.models import (
    CitedDocument,
    ConfidenceMix,
    ContentGap,
    ContentGapsResponse,
    DocumentsResponse,
    FeedbackFigures,
    FeedbackItem,
    FeedbackResponse,
    ModelFigures,
    ModelsResponse,
    Percentiles,
    QueryCount,
    SummaryResponse,
    TimePoint,
    TimeSeriesResponse,
    Tokens,
    TopQueriesResponse,
)
from services.analytics.reports.buckets import bucket_starts, time_zone
from services.gateway.adapters.redis_store import RedisUserStore, connect
from services.gateway.settings import Settings
from services.gateway.users import add_user
from tests.support import own_outbox

PASSWORD = "correct horse battery"
ROLES = {"ann": "user", "ana": "analyst", "ada": "admin"}
# A question carrying markup: the page must show it as text, never as HTML.
MARKUP_QUERY = '<img src=x onerror="document.title=\'pwned\'"> how do I log in?'
LINK_QUERY = '<a href="https://example.com/login">sign in again</a> & retry'  # Plotly would draw the link
EXPORT_CSV = "request_id,submitted_at,query,outcome\nr1,2026-01-01T10:00:00Z,how do I log in?,answered\n"
FEEDBACK = FeedbackFigures(ratings=3, positive=2, negative=1, score=1 / 3)


@dataclass
class StandInState:
    """What the stand-in was asked (path, query string, headers) and how it answers next."""

    seen: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    unavailable: bool = False  # answer every report with 503 `unavailable_as` (error, message)
    unavailable_as: tuple[str, str] = ("database_unavailable", "database is unavailable")
    empty: bool = False  # answer as if no request happened in any range
    delay_s: float = 0.0  # wait this long before answering a report


def _range(request: Request) -> dict:
    query = request.query_params
    parse = lambda name: datetime.fromisoformat(query[name]) if name in query else None  # noqa: E731
    return {"from_": parse("from"), "to": parse("to"), "model": query.get("model")}


def _points(start: datetime | None, end: datetime | None, bucket: str, tz: str, empty: bool) -> list[TimePoint]:
    """Made-up figures in the buckets analytics would give (its own bucketing, in the zone `tz`)."""
    if start is None or end is None or end <= start:
        return []
    zone = time_zone(tz)
    points = []
    for i, moment in enumerate(bucket_starts(start, end - timedelta(microseconds=1), bucket, zone)):
        queries = 0 if empty else (3, 5, 0, 8, 2, 6)[i % 6]
        failed = 1 if queries and i % 4 == 0 else 0
        no_answer = 1 if queries > 4 else 0
        answered = queries - failed - no_answer
        latency = Percentiles(p50=350 + 40 * (i % 5), p95=1200 + 90 * (i % 3), p99=2100 + 150 * (i % 4))
        points.append(
            TimePoint(
                start=moment.astimezone(zone), queries=queries, answered=answered, no_answer=no_answer, failed=failed,
                answered_rate=answered / queries if queries else None, latency_ms=latency if queries else Percentiles(),
            )
        )
    return points


def _summary(r: dict, empty: bool) -> SummaryResponse:
    if empty:
        return SummaryResponse(
            **r, queries=0, distinct_users=0, completed=0, answered=0, no_answer=0, small_talk=0, failed=0,
            answered_rate=None, no_answer_rate=None, failure_rate=None, failures_by_stage={},
            latency_ms=Percentiles(), mean_latency_ms=None, mean_citations=None, supported_citation_rate=None,
            confidence=ConfidenceMix(), feedback=FeedbackFigures(), tokens=Tokens(),
        )
    return SummaryResponse(
        **r, queries=42, distinct_users=5, completed=40, answered=33, no_answer=4, small_talk=1, failed=2,
        answered_rate=33 / 40, no_answer_rate=4 / 40, failure_rate=2 / 40,
        failures_by_stage={"retrieval": 1, "generation": 1},
        latency_ms=Percentiles(p50=412.4, p95=1830.0, p99=2950.6), mean_latency_ms=640.2,
        mean_citations=2.4, supported_citation_rate=0.875, confidence=ConfidenceMix(high=20, medium=12, low=6),
        feedback=FEEDBACK, tokens=Tokens(prompt=51234, completion=8765, total=59999),
    )


def analytics_stand_in(state: StandInState) -> FastAPI:
    app = FastAPI()
    now = datetime(2026, 1, 1, 10, tzinfo=UTC)

    @app.middleware("http")
    async def remember(request: Request, call_next):
        if request.url.path.startswith("/analytics/"):
            state.seen.append((request.url.path, request.url.query, dict(request.headers)))
            await asyncio.sleep(state.delay_s)
            if state.unavailable:
                error, message = state.unavailable_as
                return JSONResponse({"error": error, "message": message}, status_code=503, headers={"Retry-After": "7"})
        return await call_next(request)

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/analytics/summary", response_model=SummaryResponse)
    async def summary(request: Request) -> SummaryResponse:
        return _summary(_range(request), state.empty)

    @app.get("/analytics/timeseries", response_model=TimeSeriesResponse)
    async def timeseries(request: Request, bucket: str = "hour", tz: str = "UTC") -> TimeSeriesResponse:
        r = _range(request)
        points = _points(r["from_"], r["to"], bucket, tz, state.empty)
        return TimeSeriesResponse(**r, bucket=bucket, tz=tz, points=points)

    @app.get("/analytics/top-queries", response_model=TopQueriesResponse)
    async def top_queries(request: Request, limit: int = 10) -> TopQueriesResponse:
        items = [
            QueryCount(query="How do I add a user?", count=9, answered=9, last_asked=now),
            QueryCount(query="What does the gateway do with a bearer token that has expired?", count=6, answered=5, last_asked=now),
            QueryCount(query=MARKUP_QUERY, count=4, answered=2, last_asked=now),
            QueryCount(query="hello", count=2, answered=2, last_asked=now),
            QueryCount(query=LINK_QUERY, count=1, answered=1, last_asked=now),
        ]
        return TopQueriesResponse(**_range(request), items=[] if state.empty else items[:limit])

    @app.get("/analytics/gaps", response_model=ContentGapsResponse)
    async def gaps(request: Request, limit: int = 10) -> ContentGapsResponse:
        items = [
            ContentGap(query="Can Cairn read scanned PDFs?", count=4, no_answer=3, low_confidence=1,
                       last_asked=now, last_request_id="r9"),
            ContentGap(query="Which vector databases besides Chroma work?", count=3, no_answer=1, low_confidence=1,
                       last_asked=now, last_request_id="r8"),
        ]
        return ContentGapsResponse(**_range(request), items=[] if state.empty else items[:limit])

    @app.get("/analytics/documents", response_model=DocumentsResponse)
    async def documents(request: Request, limit: int = 10) -> DocumentsResponse:
        cited = [
            CitedDocument(doc_id="docs/users-and-roles.md", citations=31, requests=18),
            CitedDocument(doc_id="docs/getting-started.md", citations=17, requests=12),
            CitedDocument(doc_id="docs/analytics.md", citations=6, requests=4),
        ]
        never = ["docs/benchmarks.md", "docs/operations.md"]
        return DocumentsResponse(**_range(request), most_cited=[] if state.empty else cited[:limit], never_cited=never)

    @app.get("/analytics/models", response_model=ModelsResponse)
    async def models(request: Request) -> ModelsResponse:
        items = [
            ModelFigures(model="offline", requests=30, share=0.75, latency_ms=Percentiles(p50=380, p95=1500, p99=2400),
                         tokens=Tokens(prompt=40000, completion=6000, total=46000), mean_total_tokens=1533.3),
            ModelFigures(model="gpt-4o-mini", requests=10, share=0.25, latency_ms=Percentiles(p50=900, p95=2600, p99=3100),
                         tokens=Tokens(prompt=11234, completion=2765, total=13999), mean_total_tokens=1399.9,
                         cost_usd=0.0033441),
        ]
        model = request.query_params.get("model")
        chosen = [m for m in items if not model or m.model == model]
        return ModelsResponse(**_range(request), items=[] if state.empty else chosen)

    @app.get("/analytics/feedback", response_model=FeedbackResponse)
    async def feedback(request: Request, limit: int = 20) -> FeedbackResponse:
        items = [
            FeedbackItem(rated_request_id="r1", rating=1, comment="Exactly the command I needed.", rated_at=now,
                         user_id="u1", query="How do I add a user?"),
            FeedbackItem(rated_request_id="r2", rating=-1, comment=MARKUP_QUERY, rated_at=now,
                         user_id="u2", query="Can Cairn read scanned PDFs?"),
            FeedbackItem(rated_request_id="r3", rating=1, comment=None, rated_at=now, user_id="u1", query=None),
        ]
        if state.empty:
            return FeedbackResponse(**_range(request), figures=FeedbackFigures(), items=[])
        return FeedbackResponse(**_range(request), figures=FEEDBACK, items=items[:limit])

    @app.get("/analytics/export.csv")
    async def export(request: Request) -> Response:
        return Response(
            EXPORT_CSV,
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": 'attachment; filename="cairn-requests.csv"'},
        )

    return app


def seed_users(redis_url: str, prefix: str) -> None:
    """The users ann (user), ana (analyst) and ada (admin) under a Redis prefix, all with PASSWORD."""

    async def seed() -> None:
        redis = connect(redis_url, timeout_s=2)
        users = RedisUserStore(redis, prefix=prefix, timeout_s=2)
        for name, role in ROLES.items():
            await add_user(users=users, username=name, password=PASSWORD, roles=[role])
        await redis.aclose()

    # On a thread of its own: Playwright's sync API keeps an event loop running on the test's thread.
    with ThreadPoolExecutor(max_workers=1) as thread:
        thread.submit(asyncio.run, seed()).result()


def gateway_settings(redis_url: str, amqp_url: str, prefix: str, analytics_url: str) -> Settings:
    """A gateway in front of `analytics_url`, with the users of seed_users, on its own prefix, exchange and queue."""
    seed_users(redis_url, prefix)
    return Settings(
        redis_url=redis_url,
        redis_prefix=prefix,
        analytics_url=analytics_url,
        amqp_url=amqp_url,
        events_exchange=f"{prefix}.events",
        analytics_queue=f"{prefix}.analytics",
        outbox_path=own_outbox(),
    )
