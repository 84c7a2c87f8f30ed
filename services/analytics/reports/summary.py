"""The summary: volume, outcomes, latency, citations, confidence, feedback and tokens of the requests in scope."""
from __future__ import annotations

from sqlalchemy import Connection, case, distinct, func, select

from services.analytics.adapters.schema import request_outcomes as requests
from services.analytics.domain import ANSWERED, FAILED, NO_ANSWER, PENDING, RESPONSE_OUTCOMES, SMALL_TALK
from services.analytics.models import ConfidenceMix, FeedbackFigures, SummaryResponse, Tokens
from services.analytics.reports.percentiles import mean, percentiles, ratio
from services.analytics.reports.scope import Scope


def _count_where(condition):
    return func.count(case((condition, 1)))


def _sum(column, condition=None):
    return func.coalesce(func.sum(column if condition is None else case((condition, column))), 0)


def summary(conn: Connection, *, scope: Scope) -> SummaryResponse:
    outcome, responded, rating = requests.c.outcome, requests.c.outcome.in_(RESPONSE_OUTCOMES), requests.c.rating
    reports_support = responded & requests.c.supported_citations.is_not(None)
    row = conn.execute(
        select(
            func.count().label("queries"),
            func.count(distinct(requests.c.user_id)).label("distinct_users"),
            _count_where(outcome != PENDING).label("completed"),
            _count_where(outcome == ANSWERED).label("answered"),
            _count_where(outcome == NO_ANSWER).label("no_answer"),
            _count_where(outcome == SMALL_TALK).label("small_talk"),
            _count_where(outcome == FAILED).label("failed"),
            _sum(requests.c.citation_count, outcome == ANSWERED).label("answer_citations"),
            _sum(requests.c.supported_citations, reports_support).label("supported"),
            _sum(requests.c.citation_count, reports_support).label("checked_citations"),
            *(_count_where(responded & (requests.c.confidence_level == level)).label(level)
              for level in ("high", "medium", "low")),
            *(_sum(getattr(requests.c, f"{part}_tokens")).label(part) for part in ("prompt", "completion", "total")),
            # The feedback figures' counts, here rather than in a query of their own: each query over the view
            # joins the whole events table again (about a quarter of the summary's time).
            func.count(rating).label("ratings"),
            _count_where(rating > 0).label("positive"),
            _count_where(rating < 0).label("negative"),
        ).where(*scope.conditions())
    ).one()
    latencies = latency_values(conn, scope=scope)
    return SummaryResponse(
        **scope.echo(),
        queries=row.queries,
        distinct_users=row.distinct_users,
        completed=row.completed,
        answered=row.answered,
        no_answer=row.no_answer,
        small_talk=row.small_talk,
        failed=row.failed,
        answered_rate=ratio(row.answered, row.completed),
        no_answer_rate=ratio(row.no_answer, row.completed),
        failure_rate=ratio(row.failed, row.completed),
        failures_by_stage=failures_by_stage(conn, scope=scope),
        latency_ms=percentiles(latencies),
        mean_latency_ms=mean(latencies),
        mean_citations=ratio(row.answer_citations, row.answered),
        supported_citation_rate=ratio(row.supported, row.checked_citations),
        confidence=ConfidenceMix(high=row.high, medium=row.medium, low=row.low),
        feedback=feedback_figures_of(row.ratings, row.positive, row.negative),
        tokens=Tokens(prompt=row.prompt, completion=row.completion, total=row.total),
    )


def latency_values(conn: Connection, *, scope: Scope) -> list[float]:
    """The latencies of the requests with an outcome, in increasing order."""
    latency = requests.c.latency_ms
    stmt = (
        select(latency)
        .where(*scope.conditions(), requests.c.outcome != PENDING, latency.is_not(None))
        .order_by(latency)
    )
    return list(conn.scalars(stmt))


def failures_by_stage(conn: Connection, *, scope: Scope) -> dict[str, int]:
    stage = func.coalesce(requests.c.failure_stage, "unknown")
    stmt = (
        select(stage, func.count())
        .where(*scope.conditions(), requests.c.outcome == FAILED)
        .group_by(stage)
        .order_by(stage)
    )
    return {name: count for name, count in conn.execute(stmt)}


def feedback_figures_of(ratings: int, positive: int, negative: int) -> FeedbackFigures:
    """The feedback figures of `ratings` ratings (requests rated), `positive` and `negative` among them."""
    return FeedbackFigures(
        ratings=ratings, positive=positive, negative=negative, score=ratio(positive - negative, ratings)
    )
