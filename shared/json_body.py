"""Request bodies parsed as I-JSON (RFC 7493): JSON whose strings are all valid Unicode.

Python's json module accepts an unpaired surrogate escape ("\\ud800") and returns a str that cannot be
encoded as UTF-8. Such a query passed validation and then broke wherever text is encoded: the tokenizer
(a 500 from retrieval, which chat reported as "retrieval unavailable" and counted against its circuit
breaker), the event outbox (the question's events were dropped). It is not text, so it is refused where
the body is parsed, as malformed JSON (400), by every route of every service.
"""
from __future__ import annotations

import email.message
import json
import re
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response, params
from fastapi.routing import APIRoute

from shared.errors import ServiceError

# A surrogate written as an escape, or as the bytes UTF-8 would give it (json decodes bytes with
# "surrogatepass"). Either is rare: only then is the parsed value checked.
_MAYBE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


def loads(body: bytes) -> Any:
    """json.loads, raising json.JSONDecodeError for a string that holds an unpaired surrogate."""
    value = json.loads(body)
    if _MAYBE_SURROGATE.search(body):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            found = json.dumps(exc.object[exc.start : exc.end]).strip('"')
            text = body.decode("utf-8", "replace")
            raise json.JSONDecodeError(f"unpaired surrogate {found} in a string", text, 0) from None
    return value


class StrictJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads(await self.body())
        return self._json


def is_json_type(content_type: str) -> bool:
    """application/json or application/*+json, parameters aside, as FastAPI tells a JSON body."""
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


class UnsupportedContentEncoding(ServiceError):
    """415 for a body under a content coding (gzip, br, ...): Cairn reads bodies as sent, and would otherwise
    take the compressed bytes for malformed JSON, or pass them on to a service that would. The header
    Accept-Encoding: identity says which coding would be taken (RFC 9110, 15.5.16)."""

    status_code = 415
    code = "unsupported_media_type"

    def __init__(self, coding: str) -> None:
        super().__init__(f"Content-Encoding {coding} is not supported: send the body uncompressed")

    def headers(self) -> dict[str, str] | None:
        return {"Accept-Encoding": "identity"}


def _content_coding(request: Request) -> str | None:
    """The request's Content-Encoding, unless it is identity (no coding) or absent."""
    codings = [c.strip() for value in request.headers.getlist("content-encoding") for c in value.split(",")]
    named = [c for c in codings if c and c.lower() != "identity"]
    return ", ".join(named) or None


class StrictJsonRoute(APIRoute):
    """The route class of every Cairn router: FastAPI reads JSON bodies through StrictJsonRequest.

    A body sent under another Content-Type or none (curl's -d without -H sends a form type) is refused with
    415: FastAPI would pass its bytes on unread, and the 422 that follows names no field and no cause.
    So is a body under a Content-Encoding (UnsupportedContentEncoding)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        takes_json = self.body_field is not None and not isinstance(self.body_field.field_info, params.Form)

        async def strict_json_handler(request: Request) -> Response:
            strict = StrictJsonRequest(request.scope, request.receive)
            if (coding := _content_coding(strict)) and await strict.body():
                raise UnsupportedContentEncoding(coding)
            content_type = strict.headers.get("content-type", "")
            if takes_json and not is_json_type(content_type) and await strict.body():
                raise ServiceError(
                    "the body must be JSON sent with Content-Type: application/json, "
                    + (f"not {content_type}" if content_type else "and it has no Content-Type"),
                    code="unsupported_media_type",
                    status_code=415,
                )
            return await handler(strict)

        return strict_json_handler
