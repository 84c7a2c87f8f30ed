"""OpenAI-compatible `POST /v1/chat/completions` and `GET /v1/models` for the extractive generator."""
from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, FastAPI
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from services.chat.context_format import parse_context
from services.chat.offline_llm import extractive
from services.chat.offline_llm.settings import OfflineSettings
from shared.json_body import StrictJsonRoute
from shared.web import create_service_app


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: str
    content: str | list[dict[str, Any]] | None = None

    @property
    def text(self) -> str:
        if isinstance(self.content, list):  # content parts: keep the text ones
            return " ".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")
        return self.content or ""


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    temperature: float | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None


class ResponseMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class Choice(BaseModel):
    index: int = 0
    message: ResponseMessage
    finish_reason: Literal["stop", "length"]
    logprobs: None = None


class CompletionUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class Completion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: CompletionUsage


def _words(text: str) -> int:
    return len(text.split())


def complete(request: CompletionRequest) -> Completion:
    """Answer the last user message from the context blocks of the system message(s)."""
    system = "\n".join(m.text for m in request.messages if m.role in ("system", "developer"))
    question = next((m.text for m in reversed(request.messages) if m.role == "user"), "")
    content = extractive.answer(question, parse_context(system))
    finish: Literal["stop", "length"] = "stop"
    limit = request.max_completion_tokens or request.max_tokens
    if limit is not None and _words(content) > limit:  # tokens approximated by words, as in usage
        content, finish = " ".join(content.split()[:limit]), "length"
    prompt_tokens = sum(_words(m.text) for m in request.messages)
    completion_tokens = _words(content)
    return Completion(
        id=f"chatcmpl-{uuid.uuid4().hex}",
        created=int(time.time()),
        model=request.model,
        choices=[Choice(message=ResponseMessage(content=content), finish_reason=finish)],
        usage=CompletionUsage(
            prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, total_tokens=prompt_tokens + completion_tokens
        ),
    )


def word_deltas(text: str) -> list[str]:
    """`text` cut before each word, whitespace kept, so the pieces join back into `text`."""
    return [piece for piece in re.split(r"(?<=\s)(?=\S)", text) if piece]


async def stream_events(completion: Completion, *, include_usage: bool) -> AsyncIterator[str]:
    """`completion` as OpenAI `chat.completion.chunk` server-sent events: the role, one word per delta, the
    finish_reason, the usage when asked for, then [DONE]."""
    head = {
        "id": completion.id, "object": "chat.completion.chunk", "created": completion.created, "model": completion.model
    }
    choice = completion.choices[0]

    def event(choices: list[dict[str, Any]], **extra: Any) -> str:
        return f"data: {json.dumps({**head, 'choices': choices, **extra})}\n\n"

    def delta(content: dict[str, str], finish_reason: str | None = None) -> list[dict[str, Any]]:
        return [{"index": 0, "delta": content, "finish_reason": finish_reason}]

    yield event(delta({"role": "assistant", "content": ""}))
    for word in word_deltas(choice.message.content):
        yield event(delta({"content": word}))
    yield event(delta({}, choice.finish_reason))
    if include_usage:
        yield event([], usage=completion.usage.model_dump())
    yield "data: [DONE]\n\n"


def model_list(settings: OfflineSettings) -> dict[str, object]:
    """The body of GET /v1/models: the one model the generator answers as."""
    return {"object": "list", "data": [{"id": settings.model, "object": "model", "created": 0, "owned_by": "cairn"}]}


def create_app(settings: OfflineSettings | None = None) -> FastAPI:
    """The generator served over HTTP; inside chat, transport.OfflineTransport answers the SDK instead."""
    settings = settings or OfflineSettings()
    router = APIRouter(route_class=StrictJsonRoute, prefix="/v1", tags=["openai-compatible"])

    @router.post(
        "/chat/completions",
        response_model=Completion,
        responses={200: {"content": {"text/event-stream": {}}, "description": "Its chunks when stream is true"}},
    )
    async def chat_completions(request: CompletionRequest) -> Completion | StreamingResponse:
        completion = complete(request)
        if not request.stream:
            return completion
        include_usage = bool(request.stream_options and request.stream_options.include_usage)
        events = stream_events(completion, include_usage=include_usage)
        return StreamingResponse(events, media_type="text/event-stream")

    @router.get("/models")
    async def models() -> dict:
        return model_list(settings)

    app = create_service_app(service="offline-llm", title="Cairn offline generator")
    app.include_router(router)
    return app
