"""Cairn as an OpenAI-compatible chat model: OpenAI requests in, chat service requests out, and
chat's answers (plain or streamed) back as chat.completion objects and chunks.

The last user message is the question; earlier user/assistant pairs are the conversation, which
chat uses to resolve follow-ups. System messages are ignored: Cairn's own prompt decides how the
documents are used. Model "cairn" (or none) means chat's default model; any other name is passed on
as model_id, which chat checks against its allow-list. Citations stay in the text as [n] and come in
full in the extra `citations` field (and, for a stream, in its last chunk).
"""
from __future__ import annotations

import json
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.errors import BadRequest

CAIRN_MODEL = "cairn"


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
    """The part of OpenAI's chat-completions request that Cairn uses; other fields are accepted and ignored."""

    model_config = ConfigDict(extra="ignore")
    model: str = Field(CAIRN_MODEL, min_length=1, max_length=200)
    messages: list[Message] = Field(min_length=1, max_length=200)
    stream: bool = False


def chat_body(request: CompletionRequest) -> dict[str, Any]:
    """The chat service's request for an OpenAI one: the last user message, the turns before it."""
    turns = [m for m in request.messages if m.role in ("user", "assistant")]
    if not turns or turns[-1].role != "user" or not turns[-1].text.strip():
        raise BadRequest("the last message must be a user message with text", code="invalid_messages")
    history, question = [], None
    for message in turns[:-1]:
        if message.role == "user":
            question = message.text
        elif question is not None:  # an assistant message answers the user message before it
            history.append({"question": question, "answer": message.text})
            question = None
    body: dict[str, Any] = {"query": turns[-1].text, "history": history[-10:]}
    if request.model != CAIRN_MODEL:
        body["model_id"] = request.model
    return body


def completion(answer: dict[str, Any], *, model: str) -> dict[str, Any]:
    """A chat.completion object for chat's response."""
    usage = answer["metadata"]["usage"]
    return {
        "id": _completion_id(answer),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": answer["answer"]}, "finish_reason": "stop"}
        ],
        "usage": usage,
        **_extras(answer, answer["citations"]),
    }


class ChunkWriter:
    """The chunks of one streamed completion, as `data: ...` lines of Server-Sent Events."""

    def __init__(self, *, model: str) -> None:
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.model = model
        self.created = int(time.time())
        self.passages: dict[str, int] = {}  # chunk_id -> the number the streamed text cites it by

    def first(self) -> str:
        return self._chunk({"role": "assistant", "content": ""})

    def sources(self, data: dict[str, Any]) -> None:
        self.passages = {source["chunk_id"]: source["n"] for source in data["sources"]}

    def token(self, data: dict[str, Any]) -> str:
        return self._chunk({"content": data["text"]})

    def done(self, answer: dict[str, Any]) -> str:
        """The closing chunk: finish_reason, usage and the citations, numbered as the streamed text cites
        them (the streamed text is the model's own, before chat renumbers its markers)."""
        citations = [{**c, "n": self.passages.get(c["chunk_id"], c["n"])} for c in answer["citations"]]
        return self._chunk({}, finish_reason="stop", usage=answer["metadata"]["usage"], **_extras(answer, citations))

    def error(self, data: dict[str, Any]) -> str:
        return f"data: {json.dumps({'error': {'message': data.get('message'), 'code': data.get('error')}})}\n\n"

    def _chunk(self, delta: dict[str, Any], finish_reason: Literal["stop"] | None = None, **extra: Any) -> str:
        chunk = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            **extra,
        }
        return f"data: {json.dumps(chunk)}\n\n"


DONE = "data: [DONE]\n\n"


def models_list(models: list[str]) -> dict[str, Any]:
    names = [CAIRN_MODEL, *(m for m in models if m != CAIRN_MODEL)]
    return {"object": "list", "data": [{"id": m, "object": "model", "created": 0, "owned_by": "cairn"} for m in names]}


def _completion_id(answer: dict[str, Any]) -> str:
    return f"chatcmpl-{answer['metadata'].get('request_id') or uuid.uuid4().hex}"


def _extras(answer: dict[str, Any], citations: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "citations": citations,
        "cairn": {
            key: answer[key] for key in ("conversation_id", "sources", "related_docs", "confidence", "grounding")
        }
        | {"kind": answer["metadata"]["kind"], "answer": answer["answer"]},
    }
