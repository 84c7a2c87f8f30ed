"""Questions chat stopped answering: the QueryFailed the gateway publishes in chat's place.

Chat publishes the outcome of every question it receives (ResponseGenerated or QueryFailed). A chat process
that dies mid-question (killed, out of memory, its machine gone) publishes none, and the analytics would
count the question as pending for good: asked, never failed. So when the connection to chat breaks after
the question reached it (upstream.ConnectionLost), the gateway publishes the QueryFailed, with the stage
`interrupted` and the error `chat_unavailable` its caller got. Not after a timeout: chat is alive then,
and reports the outcome itself. Should chat have published an outcome all the same (the connection broke
while the answer was on its way), the later of the two counts, as for any request.
"""
from __future__ import annotations

import json
import time

from fastapi import Request

from services.gateway.domain import Session
from services.gateway.event_envelope import envelope
from shared.events import QueryFailed, QueryFailedData

ERROR = "chat_unavailable"


def note_question(request: Request, *, asker: Session, body: bytes) -> None:
    """Remember who asks, what and since when, for `publish_interrupted`."""
    request.state.asker = asker
    request.state.question_body = body
    request.state.asked_at = time.perf_counter()


def note_query(request: Request, query: str) -> None:
    """The question as chat gets it, when the route built chat's body itself (/v1)."""
    request.state.query = query


def publish_interrupted(request: Request) -> None:
    """Publish that chat stopped answering this request's question; nothing for a request that asked none."""
    asker: Session | None = getattr(request.state, "asker", None)
    if asker is None:
        return
    query = getattr(request.state, "query", None) or _query_in(request.state.question_body)
    event = QueryFailed(
        **envelope(asker),
        data=QueryFailedData(
            query=query,
            stage="interrupted",
            error=ERROR,
            error_type="ConnectionLost",
            total_ms=round((time.perf_counter() - request.state.asked_at) * 1000, 1),
        ),
    )
    request.app.state.publisher.submit(event)


def _query_in(body: bytes) -> str:
    """The `query` of chat's body as the caller sent it; "" when there is none to read (chat had refused it)."""
    try:
        query = json.loads(body).get("query")
    except (ValueError, AttributeError):
        return ""
    return query if isinstance(query, str) else ""
