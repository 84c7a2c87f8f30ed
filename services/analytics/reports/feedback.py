"""The ratings of the requests in scope, with their comments: the latest rating of each rated request."""
from __future__ import annotations

from sqlalchemy import Connection, case, desc, func, select

from services.analytics.adapters.schema import request_outcomes as requests
from services.analytics.models import FeedbackItem, FeedbackResponse
from services.analytics.reports.ordering import by_code_point
from services.analytics.reports.scope import Scope
from services.analytics.reports.summary import feedback_figures_of


_ITEM = (
    requests.c.request_id.label("rated_request_id"),
    requests.c.rating,
    requests.c.comment,
    requests.c.rated_at,
    requests.c.rated_by.label("user_id"),
    requests.c.query,
)


def feedback(conn: Connection, *, scope: Scope, limit: int) -> FeedbackResponse:
    rating = requests.c.rating
    # The figures count every rated request in scope: window counts, taken before the LIMIT, so that one
    # query serves both (each query over the view joins the whole events table again).
    figures = (
        func.count().over().label("ratings"),
        func.count(case((rating > 0, 1))).over().label("positive"),
        func.count(case((rating < 0, 1))).over().label("negative"),
    )
    stmt = (
        select(*_ITEM, *figures)
        .where(*scope.conditions(), rating.is_not(None))
        .order_by(desc(requests.c.rated_at), by_code_point(requests.c.request_id))
        .limit(limit)
    )
    rows = conn.execute(stmt).all()
    first = rows[0] if rows else None
    return FeedbackResponse(
        **scope.echo(),
        figures=feedback_figures_of(*((first.ratings, first.positive, first.negative) if first else (0, 0, 0))),
        items=[FeedbackItem(**{column.name: row._mapping[column.name] for column in _ITEM}) for row in rows],
    )
