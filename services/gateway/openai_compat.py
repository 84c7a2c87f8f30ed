"""Cairn as an OpenAI-compatible chat model: OpenAI requests in, chat service requests out, and
chat's answers (plain or streamed) back as chat.completion objects and chunks.

The question is the last user message with text (not blank); messages after it (an assistant's or a
tool's) are ignored, and the user/assistant pairs before it are the conversation, which chat uses to
resolve follow-ups; an assistant message without text (one that only calls tools) pairs with nothing.
System messages are ignored: Cairn's own prompt decides how the documents are used.
Model "cairn", none, or a name chat does not offer means chat's default model; the completion names
the model that answered. Citations stay in the text as [n] and come in full in the extra `citations`
field (and, for a stream, in the chunk with its finish_reason).
"""
from __future__ import annotations

import json
import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    field_validator,
)

from services.gateway.model_offer import CAIRN_MODEL
from shared.json_types import NO_NUL_SCHEMA, VISIBLE_TEXT_PATTERN, JsonBool, JsonInt, is_blank, without_nul

# What chat takes (services/chat/models.py): a longer question keeps its end, longer history turns their start.
MAX_QUESTION_CHARS = 1000
MAX_PAST_QUESTION_CHARS = 4000
MAX_PAST_ANSWER_CHARS = 20_000
MAX_HISTORY = 10


class ContentPart(BaseModel):
    """One part of a message's content; only `text` parts are read."""

    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = Field(None, json_schema_extra=NO_NUL_SCHEMA)  # checked by Message


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: str
    content: str | list[ContentPart] | None = Field(None, json_schema_extra=NO_NUL_SCHEMA)

    @field_validator("content", mode="wrap")
    @classmethod
    def _text_or_parts(cls, content: Any, handler: ValidatorFunctionWrapHandler) -> str | list[ContentPart] | None:
        # Said for the field as a whole: pydantic's own errors name a member of the union (content.str), no field.
        try:
            return handler(content)
        except ValidationError:
            raise ValueError(
                'must be a string or a list of content parts, objects with a "type", as {"type": "text", "text": "..."}'
            ) from None

    @field_validator("content")
    @classmethod
    def _without_nul(cls, content: str | list[ContentPart] | None) -> str | list[ContentPart] | None:
        # Refused here, naming the message: chat would refuse it in the question or a past turn, naming its fields.
        texts = [part.text for part in content] if isinstance(content, list) else [content]
        for text in texts:
            without_nul(text)
        return content

    @property
    def text(self) -> str:
        if isinstance(self.content, list):  # content parts: keep the text ones
            return " ".join(p.text for p in self.content if p.type == "text" and p.text is not None)
        return self.content or ""

    @property
    def asks(self) -> bool:
        """A user message whose text is not blank, only whitespace and invisible characters (chat refuses such a
        query): a question."""
        return self.role == "user" and not is_blank(self.text)


# The schema's spelling of Message.asks, so that clients and schema-driven tests know what is accepted.
_ASKS = {
    "type": "object",
    "required": ["role", "content"],
    "properties": {
        "role": {"const": "user"},
        "content": {
            "anyOf": [
                {"type": "string", "pattern": VISIBLE_TEXT_PATTERN},
                {
                    "type": "array",
                    "contains": {
                        "type": "object",
                        "required": ["type", "text"],
                        "properties": {
                            "type": {"const": "text"},
                            "text": {"type": "string", "pattern": VISIBLE_TEXT_PATTERN},
                        },
                    },
                },
            ]
        },
    },
}


_NO_TOOL_CALL = {"anyOf": [{"enum": ["auto", "none"]}, {"type": "null"}]}
_TEXT_FORMAT = {
    "anyOf": [{"type": "object", "required": ["type"], "properties": {"type": {"const": "text"}}}, {"type": "null"}]
}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: JsonBool | None = Field(
        False, description="true: usage comes in a last chunk of its own, with no choices, as OpenAI sends it."
    )


class CompletionRequest(BaseModel):
    """The part of OpenAI's chat-completions request that Cairn uses; other fields are accepted and ignored.
    A demand Cairn cannot meet (a tool call, JSON) is refused rather than answered with prose the client
    would fail to parse."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = Field(
        CAIRN_MODEL,
        description='"cairn" or a model of GET /v1/models; any other name, or null, means chat\'s default model.',
    )
    messages: list[Message] = Field(
        # No count limit: a client sends the whole conversation each turn, which only grows, and only its end
        # is read; MAX_BODY_BYTES bounds the request.
        min_length=1,
        description="At least one user message with text (not blank: not only whitespace and invisible characters); "
        "the last such is the question.",
        json_schema_extra={"contains": _ASKS},
    )
    stream: JsonBool | None = Field(False, description="true for Server-Sent Events; false or null for one answer.")
    stream_options: StreamOptions | None = None
    # Bounds as JSON Schema reads them (they apply to a number only, so null stays valid); the validator
    # says why in its own words.
    n: JsonInt | None = Field(
        None, description="Cairn gives one choice: 1 or null.", json_schema_extra={"minimum": 1, "maximum": 1}
    )

    # Typed loosely so that the validators below explain a refusal; the schema says exactly what is taken.
    tool_choice: Annotated[str | dict[str, Any] | None, WithJsonSchema(_NO_TOOL_CALL)] = Field(
        None, description='Cairn calls no tools: "auto", "none" or null; `tools` are accepted and ignored.'
    )
    # tool_choice's older spelling, which clients written for `functions` still send.
    function_call: Annotated[str | dict[str, Any] | None, WithJsonSchema(_NO_TOOL_CALL)] = Field(
        None, description='Cairn calls no functions: "auto", "none" or null; `functions` are accepted and ignored.'
    )
    response_format: Annotated[dict[str, Any] | None, WithJsonSchema(_TEXT_FORMAT)] = Field(
        None, description='Cairn answers in text: {"type": "text"} or null.'
    )

    @field_validator("tool_choice", "function_call")
    @classmethod
    def _no_tool_call_demanded(
        cls, choice: str | dict[str, Any] | None, info: ValidationInfo
    ) -> str | dict[str, Any] | None:
        if choice not in (None, "auto", "none"):
            raise ValueError(
                f'Cairn answers in text and calls no tools; {info.field_name} may only be "auto" or "none"'
            )
        return choice

    @field_validator("response_format")
    @classmethod
    def _text_format(cls, response_format: dict[str, Any] | None) -> dict[str, Any] | None:
        if response_format is not None and response_format.get("type") != "text":
            raise ValueError('Cairn answers in text with citations; response_format may only be {"type": "text"}')
        return response_format

    @field_validator("n")
    @classmethod
    def _one_choice(cls, n: int | None) -> int | None:
        if n is not None and n != 1:
            raise ValueError("Cairn answers with one choice; n must be 1 or left out")
        return n

    @field_validator("messages")
    @classmethod
    def _asks_something(cls, messages: list[Message]) -> list[Message]:
        if not any(message.asks for message in messages):
            raise ValueError("at least one user message must have text that is not blank")
        return messages


class CompletionChoice(BaseModel):
    index: int
    message: dict[str, Any] = Field(description='{"role": "assistant", "content": the answer}')
    finish_reason: str | None


class Completion(BaseModel):
    """A chat.completion object (stream false); Cairn adds `citations` and `cairn` (the full chat answer)."""

    model_config = ConfigDict(extra="allow")
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str = Field(description="The model that answered (chat's default for \"cairn\" or an unknown name).")
    choices: list[CompletionChoice]
    usage: dict[str, int]
    citations: list[dict[str, Any]]


STREAM_DESCRIPTION = (
    "A chat.completion object; with stream true, chat.completion.chunk objects as Server-Sent Events "
    "(`data: {...}` lines), the last with finish_reason, usage and citations, then `data: [DONE]`. With "
    "stream_options.include_usage, usage comes instead in one more chunk, whose choices are empty."
)


def chat_body(request: CompletionRequest, *, model_id: str | None = None) -> dict[str, Any]:
    """The chat service's request for an OpenAI one: the last user message with text, the turns before it."""
    last = max(i for i, m in enumerate(request.messages) if m.asks)  # one at least: CompletionRequest checks it
    history, question = [], None
    for message in request.messages[:last]:
        if message.asks:
            question = message.text.strip()
        # It answers the user message before it; one with no text (a tool call) does not, the one after it does.
        elif message.role == "assistant" and question is not None and message.text.strip():
            history.append(
                {"question": question[:MAX_PAST_QUESTION_CHARS], "answer": message.text[:MAX_PAST_ANSWER_CHARS]}
            )
            question = None
    query = request.messages[last].text.strip()[-MAX_QUESTION_CHARS:].strip()
    body: dict[str, Any] = {"query": query, "history": history[-MAX_HISTORY:]}
    if model_id is not None:
        body["model_id"] = model_id
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
            {
                "index": 0,
                "message": {"role": "assistant", "content": answer["answer"]},
                "finish_reason": _finish_reason(answer),
            }
        ],
        "usage": usage,
        **_extras(answer, answer["citations"]),
    }


class ChunkWriter:
    """The chunks of one streamed completion, as `data: ...` lines of Server-Sent Events."""

    def __init__(self, *, model: str, request_id: str | None = None, usage_apart: bool = False) -> None:
        self.id = f"chatcmpl-{request_id or uuid.uuid4().hex}"  # as a completion's id, when the request has one
        self.model = model
        # stream_options.include_usage: usage in a chunk of its own. Never in two chunks: clients add them up.
        self.usage_apart = usage_apart
        self.created = int(time.time())
        self.passages: dict[str, dict[str, Any]] = {}  # chunk_id -> the passage, numbered as the streamed text cites it

    def first(self) -> str:
        return self._chunk({"role": "assistant", "content": ""})

    def sources(self, data: dict[str, Any]) -> None:
        self.passages = {source["chunk_id"]: source for source in data["sources"]}

    def token(self, data: dict[str, Any]) -> str:
        return self._chunk({"content": data["text"]})

    def done(self, answer: dict[str, Any]) -> str:
        """The closing chunk: finish_reason, usage and the citations, numbered as the streamed text cites
        them (the streamed text is the model's own, before chat renumbers its markers)."""
        citations = [entry for citation in answer["citations"] for entry in self._as_streamed(citation)]
        usage = answer["metadata"]["usage"]
        closing = self._chunk(
            {}, finish_reason=_finish_reason(answer), usage=None if self.usage_apart else usage,
            **_extras(answer, citations),
        )
        if not self.usage_apart:
            return closing
        return closing + self._frame({**self._head(), "choices": [], "usage": usage})

    def _as_streamed(self, citation: dict[str, Any]) -> list[dict[str, Any]]:
        """`citation` under the number the streamed text gave its passage. Chat gives the cited passages of
        one document page one number (`chunk_ids`); the streamed text cited each by its own, so each is
        listed under it, with the citation's support."""
        first, *others = citation.get("chunk_ids") or [citation["chunk_id"]]
        if first not in self.passages:
            return [citation]
        same_page = [self.passages[chunk_id] for chunk_id in others if chunk_id in self.passages]
        return [
            {**citation, "n": self.passages[first]["n"]},
            *({**passage, "support": citation.get("support")} for passage in same_page),
        ]

    def error(self, data: dict[str, Any]) -> str:
        """Chat's `error` event (`{"error": code, "message": ...}`) as OpenAI's error, which its clients raise."""
        error = {"message": data.get("message"), "type": "server_error", "code": data.get("error"), "param": None}
        return f"data: {json.dumps({'error': error})}\n\n"

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> str:
        if self.usage_apart:  # as OpenAI marks every chunk before the usage one
            extra = {"usage": None, **extra}
        choices = [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
        return self._frame({**self._head(), "choices": choices, **extra})

    def _head(self) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model}

    @staticmethod
    def _frame(chunk: dict[str, Any]) -> str:
        return f"data: {json.dumps(chunk)}\n\n"


DONE = "data: [DONE]\n\n"


def models_list(models: list[str]) -> dict[str, Any]:
    names = [CAIRN_MODEL, *(m for m in models if m != CAIRN_MODEL)]
    return {"object": "list", "data": [{"id": m, "object": "model", "created": 0, "owned_by": "cairn"} for m in names]}


def _completion_id(answer: dict[str, Any]) -> str:
    return f"chatcmpl-{answer['metadata'].get('request_id') or uuid.uuid4().hex}"


def _finish_reason(answer: dict[str, Any]) -> str:
    """The model's own ("length" when it ran out of tokens); "stop" when no model was asked."""
    return answer["metadata"].get("finish_reason") or "stop"


def _extras(answer: dict[str, Any], citations: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "citations": citations,
        "cairn": {
            key: answer[key] for key in ("conversation_id", "sources", "related_docs", "confidence", "grounding")
        }
        | {
            "kind": answer["metadata"]["kind"],
            "answer": answer["answer"],
            "request_id": answer["metadata"].get("request_id"),  # what POST /api/feedback rates
        },
    }
