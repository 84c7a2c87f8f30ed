"""The offline generator inside chat's process: an httpx2 transport that answers the OpenAI SDK's requests.

Chat asks the offline generator through the same SDK calls as any endpoint (DESIGN.md): the SDK builds the
request, sends it through its HTTP client and parses the answer, errors included. Only the server differs.
Served over HTTP (`python -m services.chat.offline_llm`), app.py answers; in process, this transport answers
with app.py's own functions and no web framework in between: 0.4 ms less of chat's CPU per answer, and
0.3-0.6 ms off the one-client /api/chat median (docs/benchmarks.md, "End to end").

It answers what the SDK asks of a generator: POST /v1/chat/completions, whole or streamed, and GET /v1/models;
anything else, or a body the generator cannot read, gets the OpenAI-shaped error the SDK turns into its
exception for the status. Its SERVER span continues the trace the SDK's request carries, as app.py's would.
"""
from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2
from pydantic import ValidationError

from services.chat.offline_llm.app import CompletionRequest, complete, model_list, stream_events
from services.chat.offline_llm.settings import OfflineSettings
from shared.context import request_id_var
from shared.tracing import finish_server_span, server_span
from shared.validation_errors import one_line

SERVICE = "offline-llm"
COMPLETIONS = "/v1/chat/completions"
MODELS = "/v1/models"


class OfflineTransport(httpx2.AsyncBaseTransport):
    def __init__(self, settings: OfflineSettings | None = None) -> None:
        self._settings = settings or OfflineSettings()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        method, path = request.method, request.url.path
        route = path if path in (COMPLETIONS, MODELS) else None
        with server_span(SERVICE, {k.lower(): v for k, v in request.headers.items()}, method=method) as span:
            response = await self._answer(method, path, request)
            finish_server_span(span, method=method, route=route, status=response.status_code,
                               request_id=request_id_var.get() or "")
        return response

    async def _answer(self, method: str, path: str, request: httpx2.Request) -> httpx2.Response:
        if (method, path) == ("GET", MODELS):
            return httpx2.Response(200, json=model_list(self._settings))
        if (method, path) != ("POST", COMPLETIONS):
            return _error(404, f"no route {method} {path}", kind="not_found_error")
        try:
            asked = CompletionRequest.model_validate_json(await request.aread())
        except ValidationError as exc:
            return _error(422, _first_problem(exc), kind="invalid_request_error")
        completion = complete(asked)
        if not asked.stream:
            return httpx2.Response(200, content=completion.model_dump_json(), headers=_JSON)
        include_usage = bool(asked.stream_options and asked.stream_options.include_usage)
        return httpx2.Response(200, content=_encoded(stream_events(completion, include_usage=include_usage)),
                               headers=_EVENT_STREAM)


_JSON = {"content-type": "application/json"}
_EVENT_STREAM = {"content-type": "text/event-stream; charset=utf-8"}


async def _encoded(events: AsyncIterator[str]) -> AsyncIterator[bytes]:
    async for event in events:
        yield event.encode()


def _first_problem(exc: ValidationError) -> str:
    return one_line(exc.errors(include_url=False)[0])


def _error(status: int, message: str, *, kind: str) -> httpx2.Response:
    return httpx2.Response(status, json={"error": {"message": message, "type": kind, "param": None, "code": None}})
