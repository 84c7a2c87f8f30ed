"""Chat routes (mounted behind the internal service-token guard)."""
from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import aclosing

from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from fastapi.sse import EventSourceResponse, format_sse_event
from pydantic import BaseModel

from services.chat.deps import CallerDep, PipelineDep, SettingsDep
from services.chat.models import ChatRequest, ChatResponse, ModelsOut
from services.chat.streaming import StreamEvent, open_stream
from shared.json_body import StrictJsonRoute
from shared.sse import KEEPALIVE_COMMENT, with_keepalive

router = APIRouter(route_class=StrictJsonRoute, tags=["chat"])

_ERRORS = {
    401: {"description": "Missing or wrong service token"},
    404: {"description": "conversation_id belongs to no conversation of this user (conversation_not_found)"},
    422: {
        "description": "Invalid request, unknown model, or a prompt the LLM's content filter refused "
        "(invalid_request, unknown_model, llm_content_filtered)"
    },
    500: {"description": "The prompt is over the LLM's context window even cut down (llm_context_exceeded)"},
    502: {"description": "The LLM failed (llm_unavailable)"},
    503: {
        "description": "Retrieval or the conversation store is unavailable, or the LLM is rate limiting chat "
        "or asks for a wait, or chat has paused its calls to a failing LLM (retrieval_unavailable, conversation_store_unavailable, llm_unavailable; with Retry-After)"
    },
}
_STREAM_DESCRIPTION = (
    "Server-Sent Events: `sources` ({sources: passages [n] given to the model}), then `token` ({text}) deltas "
    "as the model writes them, then `done` (the full response of POST /chat, citations renumbered; its answer "
    "replaces the tokens). A failure after the stream began is an `error` event ({error, message, status}, "
    "and retry_after when the plain endpoint would send Retry-After)."
)


@router.post("/chat", response_model=ChatResponse, responses=_ERRORS)
async def chat(body: ChatRequest, pipeline: PipelineDep, caller: CallerDep) -> ChatResponse:
    """Answer `query` from the document collection, with numbered citations."""
    return await pipeline.answer(request=body, caller=caller)


@router.get("/models", response_model=ModelsOut, responses={401: _ERRORS[401]})
async def models(pipeline: PipelineDep) -> ModelsOut:
    """The models a request may choose with model_id."""
    return ModelsOut(default=pipeline.config.default_model, models=list(pipeline.config.allowed_models))


@router.post(
    "/chat/stream",
    response_model=None,
    response_class=StreamingResponse,  # so the schema's 200 is the stream alone, not JSON as well
    responses={200: {"description": _STREAM_DESCRIPTION, "content": {"text/event-stream": {}}}, **_ERRORS},
)
async def chat_stream(
    body: ChatRequest, pipeline: PipelineDep, caller: CallerDep, settings: SettingsDep
) -> EventSourceResponse:
    """The answer to `query` as it is written; errors before the first event are plain JSON responses.
    A comment line (`: keep-alive`) is sent after each SSE_KEEPALIVE_S of silence."""
    events = await open_stream(pipeline, request=body, caller=caller)
    encoded = with_keepalive(_encoded(events), every_s=settings.sse_keepalive_s, comment=KEEPALIVE_COMMENT.encode())
    return EventSourceResponse(encoded, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _encoded(events: AsyncIterator[StreamEvent]) -> AsyncIterator[bytes]:
    async with aclosing(events):
        async for item in events:
            data = item.data.model_dump_json() if isinstance(item.data, BaseModel) else json.dumps(item.data)
            yield format_sse_event(event=item.event, data_str=data)

