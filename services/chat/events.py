"""The events chat emits, built with the envelope of the request in hand."""
from __future__ import annotations

from typing import Any

from services.chat.models import ChatResponse
from shared.caller import Caller
from shared.context import current_trace_id, current_traceparent, request_id_var
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
        "trace_id": current_trace_id(),
        "traceparent": current_traceparent(),
        "user_id": caller.user_id,
        "session_id": caller.session_id,
    }


def query_submitted(
    *, caller: Caller, query: str, conversation_id: str | None, model: str, top_k: int
) -> QuerySubmitted:
    data = QuerySubmittedData(query=query, conversation_id=conversation_id, model=model, top_k=top_k)
    return QuerySubmitted(**_envelope(caller), data=data)


def response_generated(*, caller: Caller, response: ChatResponse, model: str) -> ResponseGenerated:
    """`model` is the model chat asked (from CHAT_MODELS), as QuerySubmitted names it: an endpoint answers with
    its own name for it (a dated snapshot), which the response shows but which would split the model's
    questions in the reports between two names."""
    meta = response.metadata
    supported = sum(1 for c in response.citations if c.support and c.support.verdict == "supported")
    data = ResponseGeneratedData(
        query=response.query,
        reformulated_query=meta.reformulated_query,
        answered=meta.kind != "no_information",
        no_answer=meta.kind == "no_information",
        kind=meta.kind,
        conversation_id=response.conversation_id,
        model=model if meta.model is not None else None,
        latency_ms=meta.timings_ms.total,
        confidence_level=response.confidence.level,
        confidence_score=response.confidence.score,
        citation_count=len(response.citations),
        supported_citations=supported,
        grounding_score=response.grounding.score if response.grounding else None,
        cited_doc_ids=[c.doc_id for c in response.citations],  # one per citation: analytics counts repeats
        chunks_retrieved=meta.chunks_retrieved,
        chunks_used=meta.chunks_used,
        timings_ms=meta.timings_ms.model_dump(),
        usage=Usage(**meta.usage.model_dump()),
        finish_reason=meta.finish_reason,
    )
    return ResponseGenerated(**_envelope(caller), data=data)


def query_failed(
    *, caller: Caller, query: str, stage: str, error: str, error_type: str | None, total_ms: float
) -> QueryFailed:
    data = QueryFailedData(query=query, stage=stage, error=error, error_type=error_type, total_ms=total_ms)
    return QueryFailed(**_envelope(caller), data=data)
