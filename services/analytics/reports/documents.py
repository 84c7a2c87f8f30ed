"""The documents the answers cite most, and those of retrieval's library that no answer cites."""
from __future__ import annotations

from sqlalchemy import Connection, desc, distinct, func, select

from services.analytics.adapters.schema import cited_documents as cited
from services.analytics.adapters.schema import request_outcomes as requests
from services.analytics.models import CitedDocument, DocumentsResponse
from services.analytics.reports.ordering import by_code_point
from services.analytics.reports.scope import Scope


def documents(conn: Connection, *, scope: Scope, library: list[str], limit: int) -> DocumentsResponse:
    """`library`: every doc_id retrieval holds. Both lists hold at most `limit` documents; never-cited ones
    are in doc_id order, and never_cited_total counts them all."""
    # A request's citations are those of the response the view chose as its outcome.
    answers = cited.join(requests, cited.c.event_id == requests.c.outcome_event_id)
    citations, asked = func.sum(cited.c.count), func.count(distinct(cited.c.request_id))
    most_cited = (
        select(cited.c.doc_id, citations.label("citations"), asked.label("requests"))
        .select_from(answers)
        .where(*scope.conditions())
        .group_by(cited.c.doc_id)
        .order_by(desc(citations), desc(asked), by_code_point(cited.c.doc_id))
        .limit(limit)
    )
    every_cited = select(cited.c.doc_id).distinct().select_from(answers).where(*scope.conditions())
    never_cited = sorted(set(library) - set(conn.scalars(every_cited)))
    return DocumentsResponse(
        **scope.echo(),
        most_cited=[CitedDocument(**row._mapping) for row in conn.execute(most_cited)],
        never_cited=never_cited[:limit],
        never_cited_total=len(never_cited),
    )
