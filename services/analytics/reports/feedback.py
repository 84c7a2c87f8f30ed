"""The ratings of the requests in scope, with their comments: the latest rating of each rated request."""
from __future__ import annotations

from sqlalchemy import Connection, desc, select

from services.analytics.adapters.schema import request_outcomes as requests
from services.analytics.models import FeedbackItem, FeedbackResponse
from services.analytics.reports.scope import Scope
from services.analytics.reports.summary import feedback_figures


def feedback(conn: Connection, *, scope: Scope, limit: int) -> FeedbackResponse:
    stmt = (
        select(
            requests.c.request_id.label("rated_request_id"),
            requests.c.rating,
            requests.c.comment,
            requests.c.rated_at,
            requests.c.rated_by.label("user_id"),
            requests.c.query,
        )
        .where(*scope.conditions(), requests.c.rating.is_not(None))
        .order_by(desc(requests.c.rated_at), requests.c.request_id)
        .limit(limit)
    )
    return FeedbackResponse(
        **scope.echo(),
        figures=feedback_figures(conn, scope=scope),
        items=[FeedbackItem(**row._mapping) for row in conn.execute(stmt)],
    )
