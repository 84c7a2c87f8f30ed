"""Request bodies parsed as I-JSON (RFC 7493): JSON whose strings are all valid Unicode, whose objects name
each key once.

Python's json module accepts an unpaired surrogate escape ("\\ud800") and returns a str that cannot be
encoded as UTF-8. Such a query passed validation and then broke wherever text is encoded: the tokenizer
(a 500 from retrieval, which chat reported as "retrieval unavailable" and counted against its circuit
breaker), the event outbox (the question's events were dropped). It is not text, so it is refused where
the body is parsed, as malformed JSON (400), by every route of every service.

So is an object naming a key twice: json keeps the last value, so {"team": "ops", "team": "dev"} would be
taken for team dev, with nothing to tell the caller that "ops" was dropped.

And so are NaN, Infinity and -Infinity, which json reads as floats though JSON (RFC 8259) has no such
values: a client's JSON library cannot have meant them.
"""
from __future__ import annotations

import email.message
import functools
import inspect
import json
import re
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Depends, Request, Response, params
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.types import Message

from shared.errors import ServiceError

# A surrogate written as an escape, or as the bytes UTF-8 would give it (json decodes bytes with
# "surrogatepass"). Either is rare: only then is the parsed value checked.
_MAYBE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Some 2-3 us a body over json.loads alone (3.5 -> 6 us for a typical /chat body): against milliseconds.
    value = dict(pairs)
    if len(value) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return value


class _NotJson(ValueError):
    def __init__(self, literal: str) -> None:
        super().__init__(literal)
        self.literal = literal


def _no_constant(literal: str) -> Any:
    # Called by json only for NaN, Infinity and -Infinity: an ordinary body costs nothing.
    raise _NotJson(literal)


def loads(body: bytes) -> Any:
    """json.loads, raising json.JSONDecodeError for bytes that are not UTF-8, for a string that holds an unpaired
    surrogate, for an object that names a key twice, for NaN, Infinity or -Infinity, for a whole number of
    thousands of digits, or for nesting deeper than Python's recursion limit lets json read."""
    try:
        value = json.loads(body, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except UnicodeDecodeError as exc:  # JSON is UTF-8 text (RFC 8259): a Latin-1 "\xf6" is not JSON
        text = body.decode("utf-8", "replace")
        why = f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at position {exc.start})"
        raise json.JSONDecodeError(why, text, exc.start) from None
    except RecursionError:  # arrays or objects nested some thousand deep: malformed for Cairn, not a 500
        text = body.decode("utf-8", "replace")
        raise json.JSONDecodeError("arrays and objects nested too deeply", text, 0) from None
    except _DuplicateKey as exc:
        text = body.decode("utf-8", "replace")
        raise json.JSONDecodeError(f"duplicate key {json.dumps(exc.key)} in an object", text, 0) from None
    except _NotJson as exc:
        text = body.decode("utf-8", "replace")
        raise json.JSONDecodeError(f"{exc.literal} is not JSON (JSON numbers are finite)", text, 0) from None
    except ValueError as exc:
        if isinstance(exc, json.JSONDecodeError):
            raise
        # Python reads at most sys.get_int_max_str_digits() digits of a whole number (4,300 by default).
        text = body.decode("utf-8", "replace")
        raise json.JSONDecodeError("a whole number too long to read", text, 0) from None
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


# Where StrictJsonRoute leaves a refusal of the body, for the endpoint's last dependency to raise.
_BODY_REFUSAL = "cairn.body_refusal"
_NO_BODY = {"type": "http.request", "body": b"", "more_body": False}


async def _refuse_a_refused_body(request: Request) -> None:
    if (refusal := request.scope.get(_BODY_REFUSAL)) is not None:
        raise refusal


def _refusing_after_dependencies(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """`endpoint` with one more dependency, after all of its own: it raises the body's refusal, if any."""
    if not inspect.iscoroutinefunction(endpoint):
        return endpoint  # the refusal is raised at once (StrictJsonRoute)

    @functools.wraps(endpoint)
    async def refusing(*args: Any, cairn_body_checked: None = None, **kwargs: Any) -> Any:
        return await endpoint(*args, **kwargs)

    signature = inspect.signature(endpoint)
    checked = inspect.Parameter(
        "cairn_body_checked", inspect.Parameter.KEYWORD_ONLY, default=Depends(_refuse_a_refused_body)
    )
    refusing.__signature__ = signature.replace(parameters=[*signature.parameters.values(), checked])
    return refusing


class StrictJsonRoute(APIRoute):
    """The route class of every Cairn router: FastAPI reads JSON bodies through StrictJsonRequest.

    A body sent under another Content-Type or none (curl's -d without -H sends a form type) is refused with
    415: FastAPI would pass its bytes on unread, and the 422 that follows names no field and no cause.
    So is a body under a Content-Encoding (UnsupportedContentEncoding), and 400 a body that is not JSON.
    These refusals come after the route's dependencies: a caller without a valid token (or service token)
    gets its 401 (or 403) whatever it sent, as it does for a body of the wrong shape."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, _refusing_after_dependencies(endpoint), **kwargs)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        takes_json = self.body_field is not None and not isinstance(self.body_field.field_info, params.Form)
        deferred = inspect.iscoroutinefunction(self.endpoint)  # so wrapped by _refusing_after_dependencies

        async def strict_json_handler(request: Request) -> Response:
            strict = StrictJsonRequest(request.scope, request.receive)
            refusal = await _body_refusal(strict, takes_json=takes_json)
            if refusal is None:
                return await handler(strict)
            if not deferred:
                raise refusal
            # The body is not read: the dependencies (authentication first) run on none, then the last one refuses.
            strict.scope[_BODY_REFUSAL] = refusal
            return await handler(StrictJsonRequest(strict.scope, _no_body))

        return strict_json_handler


async def _no_body() -> Message:
    return _NO_BODY


async def _body_refusal(request: StrictJsonRequest, *, takes_json: bool) -> Exception | None:
    """Why the body is refused before it is validated: compressed, not sent as JSON, or not JSON. The body is
    read only to tell (a file upload is left to stream)."""
    if (coding := _content_coding(request)) and await request.body():
        return UnsupportedContentEncoding(coding)
    if not takes_json or not await request.body():
        return None
    content_type = request.headers.get("content-type", "")
    if not is_json_type(content_type):
        return ServiceError(
            "the body must be JSON sent with Content-Type: application/json, "
            + (f"not {content_type}" if content_type else "and it has no Content-Type"),
            code="unsupported_media_type",
            status_code=415,
        )
    try:
        await request.json()
    except json.JSONDecodeError as exc:
        return refusal_of_unreadable(exc)
    return None


def refusal_of_unreadable(exc: json.JSONDecodeError) -> RequestValidationError:
    """The 400 malformed_json for a body `loads` could not read, as FastAPI words it when it reads the body itself."""
    error = {"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error", "input": {},
             "ctx": {"error": exc.msg}}
    return RequestValidationError([error], body=exc.doc)
