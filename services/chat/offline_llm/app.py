"""OpenAI-compatible `POST /v1/chat/completions` and `GET /v1/models` for the extractive generator."""
from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from fastapi import APIRouter, FastAPI
from pydantic import BaseModel, ConfigDict, Field

from services.chat.context_format import parse_context
from services.chat.offline_llm import extractive
from services.chat.offline_llm.settings import OfflineSettings
from shared.errors import BadRequest
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


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    temperature: float | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stream: bool = False


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
    if request.stream:
        raise BadRequest("the offline generator does not stream", code="stream_unsupported")
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


def create_app(settings: OfflineSettings | None = None) -> FastAPI:
    settings = settings or OfflineSettings()
    router = APIRouter(prefix="/v1", tags=["openai-compatible"])

    @router.post("/chat/completions", response_model=Completion)
    async def chat_completions(request: CompletionRequest) -> Completion:
        return complete(request)

    @router.get("/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": settings.model, "object": "model", "created": 0, "owned_by": "cairn"}]}

    app = create_service_app(service="offline-llm", title="Cairn offline generator")
    app.include_router(router)
    return app
