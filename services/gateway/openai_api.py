"""`/v1`: the whole RAG pipeline as an OpenAI-compatible model, for a Cairn bearer token (user role)."""
from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple, TypeVar

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from httpx_sse import ServerSentEvent
from starlette.background import BackgroundTask

from services.gateway import openai_compat
from services.gateway.adapters.upstream import ConnectionLost, Upstream, UpstreamStream
from services.gateway.api import headers_for
from services.gateway.deps import AskingSession, ChatUpstream, OfferedModelsDep, SettingsDep, UserSession
from services.gateway.interruptions import note_query, publish_interrupted
from services.gateway.model_offer import ModelOffer
from services.gateway.openai_compat import STREAM_DESCRIPTION, ChunkWriter, Completion, CompletionRequest
from services.gateway.openai_errors import OpenAIRoute, in_openai_shape
from services.gateway.responses import forwarded
from services.gateway.routing import refuses, withdraw
from shared.context import request_id_var
from shared.errors import DependencyUnavailable, NotFound, ServiceError
from shared.metrics import count_stream_failure
from shared.sse import KEEPALIVE_COMMENT, with_keepalive

log = logging.getLogger(__name__)
T = TypeVar("T")

router = APIRouter(route_class=OpenAIRoute, prefix="/v1", tags=["openai-compatible"])

_INVALID = {400: "Malformed JSON, or an invalid request: no question, a field of the wrong type, n over 1, "
            "a tool call or JSON demanded (invalid_request_error)"}
_NO_MODEL = {404: "Chat offers no model of this name (not_found_error, model_not_found)"}
# Where a stream that ends without chat's `done` or `error` event stops: chat went away mid-answer.
_CUT_OFF = {"error": "chat_unavailable", "message": "the chat service stopped before the answer was complete"}
_COMPLETIONS = "/v1/chat/completions"
_CLIENT_CLOSED = 499  # nginx's "client closed request": nobody reads it, the request line and metrics say it


@router.get("/models", responses=in_openai_shape(forwarded("chat")))
async def models(request: Request, session: UserSession, settings: SettingsDep, chat: ChatUpstream) -> Response:
    """`cairn` (chat's default model) and every model chat lets a request choose."""
    answer = await chat.forward(method="GET", path="/models", headers=headers_for(request, session, settings))
    if answer.status_code != 200:
        return answer
    return JSONResponse(_models_list(answer))


@router.get("/models/{model:path}", responses=in_openai_shape(forwarded("chat", _NO_MODEL)))
async def one_model(
    model: str, request: Request, session: UserSession, settings: SettingsDep, chat: ChatUpstream
) -> Response:
    """One model of GET /v1/models."""
    answer = await chat.forward(method="GET", path="/models", headers=headers_for(request, session, settings))
    if answer.status_code != 200:
        return answer
    for listed in _models_list(answer)["data"]:
        if listed["id"] == model:
            return JSONResponse(listed)
    raise NotFound(f"there is no model {model!r}; GET /v1/models lists them", code="model_not_found")


@router.post(
    "/chat/completions",
    response_model=None,
    responses={
        200: {"model": Completion, "description": STREAM_DESCRIPTION, "content": {"text/event-stream": {}}},
        **in_openai_shape(forwarded("chat", _INVALID, asking=True)),
    },
)
async def chat_completions(
    body: CompletionRequest,
    request: Request,
    session: AskingSession,
    settings: SettingsDep,
    chat: ChatUpstream,
    offered: OfferedModelsDep,
) -> Response:
    """Answer the last user message with text from the documents; earlier messages are the conversation.
    A model chat does not offer means chat's default; the completion's `model` names the one used."""
    internal = headers_for(request, session, settings)
    headers = {**internal, "Content-Type": "application/json"}

    async def fetch_offer() -> ModelOffer:
        answer = await chat.forward(method="GET", path="/models", headers=internal)
        if answer.status_code != 200:
            raise DependencyUnavailable("chat", f"chat's model list answered {answer.status_code}")
        return _from_chat(
            answer.body, lambda offer: ModelOffer(default=offer["default"], models=tuple(offer["models"]))
        )

    offer = await offered.get(fetch_offer)
    model = offer.used(body.model)
    chat_body = openai_compat.chat_body(body, model_id=offer.pick(body.model))
    note_query(request, chat_body["query"])
    payload = json.dumps(chat_body).encode()
    if not body.stream:
        answer = await chat.forward(method="POST", path="/chat", headers=headers, body=payload)
        if answer.status_code != 200:
            return answer
        return JSONResponse(_from_chat(answer.body, lambda whole: openai_compat.completion(whole, model=model)))
    usage_apart = bool(body.stream_options and body.stream_options.include_usage)
    writer = ChunkWriter(model=model, request_id=request_id_var.get(), usage_apart=usage_apart)
    return await _streamed(
        chat, request, headers=headers, payload=payload, writer=writer, keepalive_s=settings.sse_keepalive_s
    )


async def _client_left(request: Request) -> None:
    """Returns when the client has closed its connection: the request's body is read, so the server's next
    message is the disconnect (a wait the caller cancels when the answer comes first)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _models_list(answer: Response) -> dict[str, Any]:
    """GET /v1/models's answer from chat's GET /models."""
    return _from_chat(answer.body, lambda offer: openai_compat.models_list(offer["models"]))


def _from_chat(content: bytes | str, read: Callable[[Any], T]) -> T:
    """`read` applied to chat's JSON. A body chat answered with 200 that is not JSON, or not of the shape
    `read` expects, is chat failing (a proxy's page, a chat of another version): 503 chat_unavailable, which
    clients retry, not the gateway's own 500."""
    try:
        return read(json.loads(content))
    except (ValueError, LookupError, TypeError, AttributeError) as exc:
        log.warning("chat answered 200 with a body that could not be read",
                    extra={"upstream": "chat", "error": repr(exc), "body": str(content[:200])})
        raise DependencyUnavailable("chat", "chat is unavailable: its answer could not be read") from exc


async def _streamed(
    chat: Upstream,
    request: Request,
    *,
    headers: dict[str, str],
    payload: bytes,
    writer: ChunkWriter,
    keepalive_s: float,
) -> Response:
    """The answer as chunks. The status waits for the model's first word, for at most `keepalive_s` (the
    silence after which a keep-alive comment would be due): a model that fails in that time, or a chat
    that stops, gets its own status (503 with Retry-After, 502...), which OpenAI clients retry or raise by
    type, rather than a 200 stream holding an error. A client that leaves meanwhile ends chat's work at once,
    rather than when the wait is over."""
    upstream = await chat.open_stream(method="POST", path="/chat/stream", headers=headers, body=payload)
    if upstream.status_code != 200:
        return await chat.read_whole(upstream)
    events = upstream.events()
    first = asyncio.ensure_future(_first_answer_event(events, writer))
    left = asyncio.ensure_future(_client_left(request))
    try:
        await asyncio.wait({first, left}, timeout=keepalive_s, return_when=asyncio.FIRST_COMPLETED)
        if first.done():
            _raise_refusal(first)
        elif left.done():
            first.cancel()
            await upstream.aclose()  # chat sees its reader gone, stops the model and reports client_disconnected
            return Response(status_code=_CLIENT_CLOSED)
    except BaseException:  # refused, or the server cancelled the request
        first.cancel()
        await upstream.aclose()
        raise
    finally:
        left.cancel()
    return StreamingResponse(
        with_keepalive(
            _chunks(first, events, upstream, writer, request), every_s=keepalive_s, comment=KEEPALIVE_COMMENT
        ),
        media_type="text/event-stream",
        headers={"X-Accel-Buffering": "no"},  # and Cache-Control no-store, as every answer (gateway.middleware)
        background=BackgroundTask(upstream.aclose),
    )


class _Answering(NamedTuple):
    """Chat's first `token`, `done` or `error` event, read, and the chunk it makes."""

    event: str
    data: dict
    chunk: str


async def _first_answer_event(events: AsyncIterator[ServerSentEvent], writer: ChunkWriter) -> _Answering | None:
    """Chat's first `token`, `done` or `error` event (its `sources` go to `writer`); None if the stream ends first.
    Read here, so that an event chat garbled fails the request with its status before the stream has begun."""
    async for event in events:
        data, chunk = _read(event, writer)
        if chunk is not None:
            return _Answering(event.event, data, chunk)
    return None


def _raise_refusal(first: asyncio.Future[_Answering | None]) -> None:
    """Raise the error that came before the model's first word: chat's `error` event, chat going away
    (ServiceError) or chat ending its stream with nothing."""
    answering = first.result()  # raises the ServiceError of a chat that went away, went silent or garbled
    if answering is None:
        raise DependencyUnavailable("chat", _CUT_OFF["message"])
    if answering.event == "error":
        raise _RelayedError(answering.data)


class _RelayedError(ServiceError):
    """Chat's `error` event as the error its plain endpoint would have answered."""

    def __init__(self, data: dict) -> None:
        super().__init__(data.get("message"), code=data.get("error"), status_code=data.get("status") or 502)
        self.retry_after = data.get("retry_after")

    def headers(self) -> dict[str, str] | None:
        return {"Retry-After": str(self.retry_after)} if self.retry_after is not None else None


async def _chunks(
    first: asyncio.Future[_Answering | None],
    events: AsyncIterator[ServerSentEvent],
    upstream: UpstreamStream,
    writer: ChunkWriter,
    request: Request,
) -> AsyncIterator[str]:
    """Chat's events as chunks, from `first`. Chat counts the `error` events it sends; the gateway counts
    the streams chat cut. A refusal that comes once the stream began withdraws the question, as its status
    would have before (routing.QuestionRoute), and a question whose connection to chat broke is reported
    failed in chat's place (interruptions.py)."""
    ended = False  # by chat's `done` or `error` event
    try:
        yield writer.first()
        if (answering := await first) is not None:
            if refuses(answering.event, answering.data):
                await withdraw(request)
            yield answering.chunk
            ended = answering.event in ("done", "error")
            async for event in events:
                data, chunk = _read(event, writer)
                if refuses(event.event, data):
                    await withdraw(request)
                if chunk:
                    yield chunk
                ended = ended or event.event in ("done", "error")
    except ServiceError as exc:  # chat went away or garbled (chat_unavailable) or silent (chat_timeout) mid-stream
        count_stream_failure(service="gateway", route=_COMPLETIONS, reason=exc.code)
        if isinstance(exc, ConnectionLost):
            publish_interrupted(request)
        yield writer.error(exc.body())
        ended = True
    finally:
        await upstream.aclose()
    if not ended:
        count_stream_failure(service="gateway", route=_COMPLETIONS, reason=_CUT_OFF["error"])
        yield writer.error(_CUT_OFF)
    yield openai_compat.DONE


def _read(event: ServerSentEvent, writer: ChunkWriter) -> tuple[dict, str | None]:
    """A chat event's data and the chunk it makes, if any."""
    return _from_chat(event.data, lambda data: (data, _chunk_for(event.event, data, writer)))


def _chunk_for(event: str, data: dict, writer: ChunkWriter) -> str | None:
    if event == "sources":
        writer.sources(data)
    elif event == "token":
        return writer.token(data)
    elif event == "done":
        return writer.done(data)
    elif event == "error":
        return writer.error(data)
    return None
