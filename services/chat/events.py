"""The events chat emits, built with the envelope of the request in hand."""
from __future__ import annotations

from typing import Any

from services.chat.models import ChatResponse
from shared.caller import Caller
from shared.context import request_id_var, trace_id_of, traceparent_var
from shared.events import (
    QueryFailed,
    QueryFailedData,
    QuerySubmitted,
    QuerySubmittedData,
    ResponseGenerated,
    ResponseGeneratedData,
    Usage,
)

SOURCE = "chat"


def _envelope(caller: Caller) -> dict[str, Any]:
    return {
        "source_service": SOURCE,
        "request_id": request_id_var.get(),
        "trace_id": trace_id_of(traceparent_var.get()),
        "user_id": caller.user_id,
        "session_id": caller.session_id,
    }


def query_submitted(
    *, caller: Caller, query: str, conversation_id: str | None, model: str, top_k: int
) -> QuerySubmitted:
    data = QuerySubmittedData(query=query, conversation_id=conversation_id, model=model, top_k=top_k)
    return QuerySubmitted(**_envelope(caller), data=data)


def response_generated(*, caller: Caller, response: ChatResponse, answered: bool) -> ResponseGenerated:
    meta = response.metadata
    data = ResponseGeneratedData(
        query=response.query,
        reformulated_query=meta.reformulated_query,
        answered=answered,
        model=meta.model,
        confidence_level=response.confidence.level,
        confidence_score=response.confidence.score,
        citation_count=len(response.citations),
        cited_doc_ids=list(dict.fromkeys(c.doc_id for c in response.citations)),
        chunks_retrieved=meta.chunks_retrieved,
        chunks_used=meta.chunks_used,
        timings_ms=meta.timings_ms.model_dump(),
        usage=Usage(**meta.usage.model_dump()),
        finish_reason=meta.finish_reason,
    )
    return ResponseGenerated(**_envelope(caller), data=data)


def query_failed(*, caller: Caller, query: str, stage: str, error: str, total_ms: float) -> QueryFailed:
    data = QueryFailedData(query=query, stage=stage, error=error, total_ms=total_ms)
    return QueryFailed(**_envelope(caller), data=data)
