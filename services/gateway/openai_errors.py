"""The errors of the /v1 routes in OpenAI's shape, `{"error": {"message", "type", "code", "param"}}`, so
that OpenAI clients read them (the official one fills e.message, e.code and e.type from it). Cairn's
other routes keep `{"error": code, "message": ...}`.

`code` is Cairn's own error code (unauthorized, rate_limited, llm_unavailable, ...); `type` is OpenAI's
for the status. An invalid request is 400, as OpenAI answers it, where Cairn's other routes answer 422.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException

from services.gateway.routing import QuestionRoute
from shared.errors import ServiceError
from shared.validation_errors import location, one_line

log = logging.getLogger("cairn.gateway")

_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    503: "service_unavailable_error",
}
_HTTP_CODES = {401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}
# Headers of a relayed error worth keeping (Retry-After tells a client when to try again); the body is rewritten.
_REWRITTEN = {"content-type", "content-length"}
# OpenAI's header, which its official clients obey over their own rule (they retry 409, 429 and 5xx).
_SHOULD_RETRY = "x-should-retry"
# Errors the same request meets again however often it is sent: a taken request id, a prompt too long even cut down.
_FINAL_CODES = {"request_id_taken", "llm_context_exceeded"}


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str = Field(description="invalid_request_error, authentication_error, permission_error, not_found_error, "
                      "rate_limit_error, server_error or service_unavailable_error")
    code: str = Field(description="Cairn's error code, e.g. invalid_request, rate_limited, llm_unavailable")
    param: str | None = Field(description="The request field at fault, when one is")


class OpenAIError(BaseModel):
    """The body of every error answer of a /v1 route."""

    error: OpenAIErrorDetail


def error_type(status_code: int) -> str:
    if status_code in _TYPES:
        return _TYPES[status_code]
    return "server_error" if status_code >= 500 else "invalid_request_error"


def openai_error(
    status_code: int, *, code: str, message: str, param: str | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    status_code = 400 if status_code == 422 else status_code
    detail = {"message": message, "type": error_type(status_code), "code": code, "param": param}
    response = JSONResponse({"error": detail}, status_code=status_code, headers=headers)
    if code in _FINAL_CODES:
        response.headers[_SHOULD_RETRY] = "false"
    return response


def from_validation_error(exc: RequestValidationError) -> JSONResponse:
    first = exc.errors()[0] if exc.errors() else {}
    if first.get("type") == "json_invalid":
        reason = (first.get("ctx") or {}).get("error")
        return openai_error(400, code="malformed_json", message=f"request body is not valid JSON: {reason}")
    where = location(first)
    message = one_line(first) if first else "invalid request"
    return openai_error(400, code="invalid_request", message=message, param=where or None)


def from_service_error(exc: ServiceError) -> JSONResponse:
    if exc.status_code >= 500:
        log.warning("request failed", extra=exc.log_fields())
    return openai_error(exc.status_code, code=exc.code, message=exc.message, headers=exc.headers())


def from_http_exception(exc: HTTPException) -> JSONResponse:
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = exc.detail if isinstance(exc.detail, str) else code
    return openai_error(exc.status_code, code=code, message=message, headers=exc.headers)


def from_relayed(response: Response) -> JSONResponse:
    """An error answer passed on from chat (Cairn's shape, or anything else) in OpenAI's shape."""
    try:
        body = json.loads(response.body)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {}
    status = response.status_code
    code = body.get("error") if isinstance(body.get("error"), str) else _HTTP_CODES.get(status, "http_error")
    message = body.get("message") if isinstance(body.get("message"), str) else f"chat answered {status}"
    kept = {name: value for name, value in response.headers.items() if name.lower() not in _REWRITTEN}
    return openai_error(status, code=code, message=message, headers=kept)


def is_v1(path: str) -> bool:
    return path == "/v1" or path.startswith("/v1/")


def under_v1(handler: Callable[[Request, HTTPException], Response]) -> Callable[[Request, HTTPException], Response]:
    """The app's handler of router errors, answering in OpenAI's shape under /v1: a path no route matches
    (an unknown model path holding a newline, say) or a method a route does not take never reaches
    OpenAIRoute, yet an OpenAI client reads the answer."""

    def openai_or_cairn(request: Request, exc: HTTPException) -> Response:
        if is_v1(request.url.path):
            return from_http_exception(exc)
        return handler(request, exc)

    return openai_or_cairn


class OpenAIRoute(QuestionRoute):
    """A /v1 route: every error answer, raised by the gateway or relayed from chat, in OpenAI's shape.
    Unexpected exceptions are left to the app's handler (500, logged there)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def openai_handler(request: Request) -> Response:
            try:
                response = await handler(request)
            except RequestValidationError as exc:
                response = from_validation_error(exc)
            except ServiceError as exc:
                response = from_service_error(exc)
            except HTTPException as exc:
                response = from_http_exception(exc)
            else:
                if response.status_code >= 400:
                    response = from_relayed(response)
            if response.status_code >= 500 and _took_own_request_id(request):
                response.headers[_SHOULD_RETRY] = "false"  # sent again, it would only get 409 request_id_taken
            return response

        return openai_handler


def _took_own_request_id(request: Request) -> bool:
    """A question that took the X-Request-ID its client chose; one that failed keeps it (services.gateway.asking)."""
    question = getattr(request.state, "admitted_question", None)
    return question is not None and question.request_id == request.headers.get("x-request-id")


def in_openai_shape(responses: dict[int | str, dict[str, Any]]) -> dict[int | str, dict[str, Any]]:
    """A /v1 route's OpenAPI `responses=`: the same error statuses with OpenAI's body, and no 422 (it is 400)."""
    return {status: {**spec, "model": OpenAIError} for status, spec in responses.items() if status != 422}
