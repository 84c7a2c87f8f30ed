"""An OpenAI-compatible model endpoint for integration tests, whose behaviour a mutable Script selects.

Serve it with tests.support.serve_in_thread and point LLM_BASE_URL at `<url>/v1`. Answers follow the
request's own `stream` flag (JSON, or SSE chunks), as a real server's do.
"""
from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

ANSWER = "Run `cairn user add` [1]."
NO_CITATIONS = "Users are added from the command line."
Mode = Literal[
    "answer", "stream", "rate_limit", "error", "bad_request", "hang", "no_citations", "slow_stream", "broken_stream",
    "html", "wrong_json", "broken_json", "wrong_chunks", "small_context", "unauthorized", "content_filter",
    "prompt_filtered", "no_message", "overloaded", "error_in_200",
]
# What a misconfigured LLM_BASE_URL answers, streamed or not: 200 with a body that is no completion.
HTML_PAGE = "<!DOCTYPE html><html><head><title>Sign in</title></head><body>Open WebUI</body></html>"
NOT_A_COMPLETION = {
    "html": ("text/html", HTML_PAGE),
    "wrong_json": ("application/json", '{"foo": 1}'),
    "broken_json": ("application/json", '{"choices": [{"message": '),
}
# vLLM's answer to a prompt over --max-model-len (OpenAI's has "code": "context_length_exceeded" instead).
CONTEXT_OVERFLOW = {
    "object": "error",
    "message": "This model's maximum context length is 2048 tokens. However, you requested 4100 tokens "
    "(3588 in the messages, 512 in the completion). Please reduce the length of the messages or completion.",
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}

# An error some servers (LiteLLM, vLLM in a stream) answer with 200; the message quotes the API key.
ERROR_IN_200 = {
    "message": "upstream model overloaded for key sk-test-secret-key; " + "try later " * 40,
    "type": "server_error", "param": None, "code": 503,
}

# Azure OpenAI's answer to a prompt its content filter refuses.
PROMPT_FILTERED = {
    "error": {
        "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy.",
        "type": None, "param": "prompt", "code": "content_filter", "status": 400,
        "innererror": {"code": "ResponsibleAIPolicyViolation", "content_filter_result": {"hate": {"filtered": True}}},
    }
}


@dataclass
class Call:
    body: dict[str, Any]
    at: float  # time.monotonic() on arrival: the same clock as the test's, the server runs in a thread


@dataclass
class Script:
    """What POST /v1/chat/completions does next; tests change it between (or during) calls.

    answer        `text` as one completion (or streamed without delay when the request asks to stream)
    stream        `text` streamed in word-sized chunks, `chunk_delay_s` apart, the first after `first_delay_s`
                  (a model still reading a long prompt)
    rate_limit    429 with `Retry-After: retry_after` `failures` times, then answers
    error         500 `failures` times, then answers
    overloaded    503 with `Retry-After: retry_after` `failures` times, then answers (a server shedding load)
    bad_request   400
    hang          answers nothing for `hang_s` (longer than the client's timeout), or until the client leaves
    no_citations  an answer without any [n] marker
    slow_stream   `slow_chunks` chunks `slow_delay_s` apart; sets `disconnected` if the client leaves first
    broken_stream the first three words of `text`, then a chunk that is not JSON
    html          200 text/html (a web UI's page), to plain and streamed requests alike
    wrong_json    200 application/json `{"foo": 1}`, to both
    broken_json   200 application/json cut off part way through, to both
    wrong_chunks  an event stream whose events are JSON but not chat completion chunks
    small_context 400 `overflow` when the messages hold more than `context_chars` characters, else answers
                  (or streams) as `answer` does
    unauthorized  401, as to a wrong API key, from /v1/models too
    content_filter an answer the content filter withheld: content null and finish_reason "content_filter"
                  (streamed: no text, then that finish_reason)
    prompt_filtered Azure OpenAI's 400 "content_filter", to a prompt its filter refused
    no_message    200 with a choice whose message is null
    error_in_200  200 with `{"error": answered_error}` (ERROR_IN_200 unless told), as the whole body or as a
                  stream's only event, `failures` times, then answers
    """

    mode: Mode = "answer"
    text: str = ANSWER
    finish_reason: str = "stop"  # answer/stream: why the model stopped, such as "length" for a cut-off answer
    replies: list[str] = field(default_factory=list)  # answer/stream: the texts of the next calls, before `text`
    failures: int = 1_000_000  # "always" until a test says how many
    retry_after: str = "1"
    chunk_delay_s: float = 0.02
    first_delay_s: float = 0.0
    hang_s: float = 5.0
    context_chars: int = 4000
    overflow: dict[str, Any] = field(default_factory=lambda: CONTEXT_OVERFLOW)
    answered_error: dict[str, Any] = field(default_factory=lambda: ERROR_IN_200)
    slow_chunks: int = 200
    slow_delay_s: float = 0.05
    calls: list[Call] = field(default_factory=list)
    disconnected: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)  # a slow_stream sent its [DONE]

    def reset(self, **changes: Any) -> Script:
        """Back to the defaults with `changes`, calls and flags cleared: one server serves many tests."""
        self.__dict__.update(Script(**changes).__dict__)
        return self


def llm_stand_in(script: Script | None = None) -> tuple[FastAPI, Script]:
    """The app and the script it follows."""
    app, script = FastAPI(), script or Script()

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> Response:
        if script.mode == "unauthorized":
            return _unauthorized()
        models = [{"id": "test-model", "object": "model", "created": 0, "owned_by": "tests"}]
        return JSONResponse({"object": "list", "data": models})

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        body = await request.json()
        script.calls.append(Call(body=body, at=time.monotonic()))
        return await _respond(script, body, request)

    return app, script


async def _respond(script: Script, body: dict[str, Any], request: Request) -> Response:
    mode = script.mode
    if mode in ("rate_limit", "error", "overloaded") and script.failures > 0:
        script.failures -= 1
        if mode == "rate_limit":
            return _error(429, "rate limited", headers={"Retry-After": script.retry_after})
        if mode == "overloaded":
            return _error(503, "the server is overloaded", headers={"Retry-After": script.retry_after})
        return _error(500, "the model crashed")
    if mode == "bad_request":
        return _error(400, "max_tokens is too large")
    if mode == "unauthorized":
        return _unauthorized()
    if mode == "small_context" and sum(len(m["content"]) for m in body["messages"]) > script.context_chars:
        return JSONResponse(script.overflow, 400)
    if mode == "prompt_filtered":
        return JSONResponse(PROMPT_FILTERED, 400)
    if mode == "no_message":
        return JSONResponse(_completion(None, body, message=False))
    if mode == "content_filter":
        if body.get("stream"):
            return _sse(_withheld_events(body))
        return JSONResponse(_completion(None, body, finish_reason="content_filter"))
    if mode == "hang":
        await _wait_or_disconnect(request, script.hang_s)
        return _error(504, "hung")
    if mode in NOT_A_COMPLETION:
        media_type, content = NOT_A_COMPLETION[mode]
        return Response(content, media_type=media_type)
    if mode == "wrong_chunks":
        return _sse(_wrong_chunk_events())
    if mode == "error_in_200" and script.failures > 0:
        script.failures -= 1
        error = {"error": script.answered_error}
        return _sse(_error_events(error)) if body.get("stream") else JSONResponse(error)
    text = NO_CITATIONS if mode == "no_citations" else script.replies.pop(0) if script.replies else script.text
    if mode == "slow_stream":
        return _sse(_slow_events(script, body))
    if mode == "broken_stream":
        return _sse(_broken_events(text, body))
    if body.get("stream"):
        if mode == "stream":
            return _sse(_events(
                text, body, delay_s=script.chunk_delay_s, first_delay_s=script.first_delay_s,
                finish_reason=script.finish_reason,
            ))
        return _sse(_events(text, body, delay_s=0.0, finish_reason=script.finish_reason))
    return JSONResponse(_completion(text, body, finish_reason=script.finish_reason))


async def _wait_or_disconnect(request: Request, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not await request.is_disconnected():
        await asyncio.sleep(0.05)


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "stand_in", "code": None}}, status, headers=headers)


def _unauthorized() -> JSONResponse:
    body = {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}
    return JSONResponse({"error": body}, 401)


def _completion(
    text: str | None, body: dict[str, Any], *, finish_reason: str = "stop", message: bool = True
) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "test-model"),
        "choices": [{
            "index": 0, "message": {"role": "assistant", "content": text} if message else None,
            "finish_reason": finish_reason,
        }],
        "usage": _usage(text),
    }


def _usage(text: str | None) -> dict[str, int]:
    words = len((text or "").split())
    return {"prompt_tokens": 20, "completion_tokens": words, "total_tokens": 20 + words}


def _chunk(body: dict[str, Any], choices: list[dict[str, Any]], **extra: Any) -> str:
    head = {"id": "chatcmpl-stand-in", "object": "chat.completion.chunk", "created": int(time.time())}
    return f"data: {json.dumps({**head, 'model': body.get('model', 'test-model'), 'choices': choices, **extra})}\n\n"


def _delta(content: dict[str, str], finish_reason: str | None = None) -> list[dict[str, Any]]:
    return [{"index": 0, "delta": content, "finish_reason": finish_reason}]


def words_of(text: str) -> list[str]:
    """`text` in the pieces the stand-in streams: each word with the space before it."""
    first, *rest = text.split(" ")
    return [first, *(" " + word for word in rest)]


async def _events(
    text: str, body: dict[str, Any], *, delay_s: float, first_delay_s: float = 0.0, finish_reason: str = "stop"
) -> AsyncIterator[str]:
    await asyncio.sleep(first_delay_s)
    yield _chunk(body, _delta({"role": "assistant", "content": ""}))
    for word in words_of(text):
        await asyncio.sleep(delay_s)
        yield _chunk(body, _delta({"content": word}))
    yield _chunk(body, _delta({}, finish_reason))
    if (body.get("stream_options") or {}).get("include_usage"):
        yield _chunk(body, [], usage=_usage(text))
    yield "data: [DONE]\n\n"


async def _withheld_events(body: dict[str, Any]) -> AsyncIterator[str]:
    yield _chunk(body, _delta({"role": "assistant", "content": ""}))
    yield _chunk(body, _delta({}, "content_filter"))
    yield "data: [DONE]\n\n"


async def _slow_events(script: Script, body: dict[str, Any]) -> AsyncIterator[str]:
    try:
        yield _chunk(body, _delta({"role": "assistant", "content": ""}))
        for n in range(script.slow_chunks):
            yield _chunk(body, _delta({"content": f"word{n} "}))
            await asyncio.sleep(script.slow_delay_s)
        yield _chunk(body, _delta({}, "stop"))
        yield "data: [DONE]\n\n"
        script.finished.set()
    finally:  # cancelled, or closed, when the client went away
        if not script.finished.is_set():
            script.disconnected.set()


async def _broken_events(text: str, body: dict[str, Any]) -> AsyncIterator[str]:
    yield _chunk(body, _delta({"role": "assistant", "content": ""}))
    for word in words_of(text)[:3]:
        yield _chunk(body, _delta({"content": word}))
    yield "data: {this is not json\n\n"


async def _wrong_chunk_events() -> AsyncIterator[str]:
    for event in ({"foo": 1}, {"choices": "x"}):
        yield f"data: {json.dumps(event)}\n\n"
    yield "data: [DONE]\n\n"


async def _error_events(error: dict[str, Any]) -> AsyncIterator[str]:
    yield f"data: {json.dumps(error)}\n\n"


def _sse(events: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(events, media_type="text/event-stream")
