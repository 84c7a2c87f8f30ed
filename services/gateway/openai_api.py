"""`/v1`: the whole RAG pipeline as an OpenAI-compatible model, for a Cairn bearer token (user role)."""
from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from httpx_sse import EventSource
from starlette.background import BackgroundTask

from services.gateway import openai_compat
from services.gateway.adapters.upstream import Upstream
from services.gateway.api import headers_for
from services.gateway.deps import AskingSession, ChatUpstream, SettingsDep, UserSession
from services.gateway.openai_compat import ChunkWriter, CompletionRequest

router = APIRouter(prefix="/v1", tags=["openai-compatible"])

_ERRORS = {
    400: {"description": "No user message to answer (invalid_messages)"},
    401: {"description": "Missing or invalid bearer token"},
    403: {"description": "The user role is needed"},
    422: {"description": "Invalid request, or a model chat does not offer"},
    502: {"description": "The model behind chat failed (llm_unavailable)"},
    503: {"description": "A service is unavailable"},
    504: {"description": "The chat service did not answer in time"},
}
_ASKING_ERRORS = {
    409: {"description": "The X-Request-ID sent names another user's request (request_id_taken)"},
    429: {"description": "Over CHAT_REQUESTS_PER_MINUTE (rate_limited, with Retry-After)"},
}


@router.get("/models", responses=_ERRORS)
async def models(request: Request, session: UserSession, settings: SettingsDep, chat: ChatUpstream) -> Response:
    """`cairn` (chat's default model) and every model chat lets a request choose."""
    answer = await chat.forward(method="GET", path="/models", headers=headers_for(request, session, settings))
    if answer.status_code != 200:
        return answer
    return JSONResponse(openai_compat.models_list(json.loads(answer.body)["models"]))


@router.post("/chat/completions", responses={**_ERRORS, **_ASKING_ERRORS})
async def chat_completions(
    body: CompletionRequest, request: Request, session: AskingSession, settings: SettingsDep, chat: ChatUpstream
) -> Response:
    """Answer the last user message from the documents; earlier messages are the conversation."""
    headers = {**headers_for(request, session, settings), "Content-Type": "application/json"}
    payload = json.dumps(openai_compat.chat_body(body)).encode()
    if not body.stream:
        answer = await chat.forward(method="POST", path="/chat", headers=headers, body=payload)
        if answer.status_code != 200:
            return answer
        return JSONResponse(openai_compat.completion(json.loads(answer.body), model=body.model))
    return await _streamed(chat, headers=headers, payload=payload, model=body.model)


async def _streamed(chat: Upstream, *, headers: dict[str, str], payload: bytes, model: str) -> Response:
    upstream = await chat.open_stream(path="/chat/stream", headers=headers, body=payload)
    if upstream.status_code != 200:
        return await chat.read_error(upstream)
    return StreamingResponse(
        _chunks(upstream, ChunkWriter(model=model)),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        background=BackgroundTask(upstream.aclose),
    )


async def _chunks(upstream: httpx.Response, writer: ChunkWriter) -> AsyncIterator[str]:
    yield writer.first()
    try:
        async for event in EventSource(upstream).aiter_sse():
            data = json.loads(event.data)
            if event.event == "sources":
                writer.sources(data)
            elif event.event == "token":
                yield writer.token(data)
            elif event.event == "done":
                yield writer.done(data)
            elif event.event == "error":
                yield writer.error(data)
    except httpx.HTTPError:
        yield writer.error({"error": "chat_unavailable", "message": "the chat service stopped answering"})
    finally:
        await upstream.aclose()
    yield openai_compat.DONE
