"""The questions asked most, and the content gaps: questions answered with "no relevant information" or
with low confidence. A question is grouped with the others that read the same once lower-cased and with
their whitespace collapsed (the query_key column), and is shown as it was first asked."""
from __future__ import annotations

from sqlalchemy import Connection, and_, case, desc, func, select

from services.analytics.adapters.schema import request_outcomes as requests
from services.analytics.domain import ANSWERED, NO_ANSWER
from services.analytics.models import ContentGap, ContentGapsResponse, QueryCount, TopQueriesResponse
from services.analytics.reports.ordering import by_code_point
from services.analytics.reports.scope import Scope

_NO_ANSWER = requests.c.outcome == NO_ANSWER
_LOW_CONFIDENCE = and_(requests.c.outcome == ANSWERED, requests.c.confidence_level == "low")


def _ranked(scope: Scope):
    """The requests in scope, each with its rank among the asks of its question (1 = first asked) and
    among that question's gaps (1 = latest gap)."""
    is_gap = case((_NO_ANSWER | _LOW_CONFIDENCE, 1), else_=0)
    key = requests.c.query_key
    return (
        select(
            key,
            requests.c.query,
            requests.c.request_id,
            requests.c.submitted_at,
            requests.c.outcome,
            _NO_ANSWER.label("no_answer"),
            _LOW_CONFIDENCE.label("low_confidence"),
            is_gap.label("is_gap"),
            func.row_number()
            .over(partition_by=key, order_by=(requests.c.submitted_at, by_code_point(requests.c.request_id)))
            .label("ask_rank"),
            func.row_number()
            .over(
                partition_by=(key, is_gap),
                order_by=(desc(requests.c.submitted_at), desc(by_code_point(requests.c.request_id))),
            )
            .label("gap_rank"),
        )
        .where(*scope.conditions(), key.is_not(None))
        .subquery()
    )


def top_queries(conn: Connection, *, scope: Scope, limit: int) -> TopQueriesResponse:
    ranked = _ranked(scope)
    count, last_asked = func.count(), func.max(ranked.c.submitted_at)
    stmt = (
        select(
            func.max(case((ranked.c.ask_rank == 1, ranked.c.query))).label("query"),
            count.label("count"),
            func.count(case((ranked.c.outcome == ANSWERED, 1))).label("answered"),
            last_asked.label("last_asked"),
        )
        .group_by(ranked.c.query_key)
        .order_by(desc(count), desc(last_asked), by_code_point(ranked.c.query_key))
        .limit(limit)
    )
    items = [QueryCount(**row._mapping) for row in conn.execute(stmt)]
    return TopQueriesResponse(**scope.echo(), items=items)


def content_gaps(conn: Connection, *, scope: Scope, limit: int) -> ContentGapsResponse:
    ranked = _ranked(scope)
    gaps = func.sum(ranked.c.is_gap)
    count, last_asked = func.count(), func.max(ranked.c.submitted_at)
    stmt = (
        select(
            func.max(case((ranked.c.ask_rank == 1, ranked.c.query))).label("query"),
            count.label("count"),
            func.count(case((ranked.c.no_answer, 1))).label("no_answer"),
            func.count(case((ranked.c.low_confidence, 1))).label("low_confidence"),
            last_asked.label("last_asked"),
            func.max(case(((ranked.c.is_gap == 1) & (ranked.c.gap_rank == 1), ranked.c.request_id))).label(
                "last_request_id"
            ),
        )
        .group_by(ranked.c.query_key)
        .having(gaps > 0)
        .order_by(desc(gaps), desc(count), desc(last_asked), by_code_point(ranked.c.query_key))
        .limit(limit)
    )
    items = [ContentGap(**row._mapping) for row in conn.execute(stmt)]
    return ContentGapsResponse(**scope.echo(), items=items)
