"""What the gateway does to every request and response: a body size limit, CORS, security headers.

Pure ASGI, so streamed answers (SSE) pass through unbuffered.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.gateway.openai_errors import from_http_exception, is_v1

if TYPE_CHECKING:
    from services.gateway.settings import Settings

# Only the gateway's own scripts, styles, images and API: no inline script, no other origin, no framing.
PAGE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
# The /docs and /redoc pages run Swagger UI and ReDoc from the gateway itself (shared.web.DOCS_ASSETS) and
# start them with an inline script; ReDoc draws in a worker made from a blob.
DOCS_CSP = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; worker-src 'self' blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "frame-ancestors 'none'"
)
DOCS_PATHS = ("/docs", "/redoc")
UPLOAD_PATH = "/api/documents"
# The official OpenAI JavaScript client, in a page, sends these with every /v1 request: refused, its preflight fails.
OPENAI_CLIENT_HEADERS = [
    "X-Stainless-Arch", "X-Stainless-Helper-Method", "X-Stainless-Lang", "X-Stainless-OS",
    "X-Stainless-Package-Version", "X-Stainless-Retry-Count", "X-Stainless-Runtime", "X-Stainless-Runtime-Version",
    "X-Stainless-Timeout",
]
CORS_ALLOWED_HEADERS = ["Authorization", "Content-Type", "X-Request-ID", "traceparent", *OPENAI_CLIENT_HEADERS]
# X-Should-Retry: OpenAI clients obey it (services.gateway.openai_errors) only where the page may read it.
CORS_EXPOSED_HEADERS = ["X-Request-ID", "Retry-After", "X-Should-Retry"]


@dataclass(frozen=True)
class BodyLimit:
    bytes: int
    setting: str  # the variable that sets it, named in the 413 so the operator knows what to raise


class BodyTooLarge(HTTPException):
    """A Starlette HTTPException, so FastAPI's body parsing lets it through to the app's 413 handler."""

    def __init__(self, limit: BodyLimit) -> None:
        detail = f"the request body is over the limit of {limit.bytes} bytes ({limit.setting})"
        super().__init__(status_code=413, detail=detail)


class BodyLimitMiddleware:
    """413 payload_too_large for a body over the limit of its path (`per_path`, else `default`):
    at once when Content-Length says so, otherwise as soon as the bytes read pass it (chunked bodies)."""

    def __init__(self, app: ASGIApp, *, default: BodyLimit, per_path: Mapping[str, BodyLimit] | None = None) -> None:
        limits = [default.bytes, *(limit.bytes for limit in (per_path or {}).values())]
        if any(limit < 0 for limit in limits):
            raise ValueError(f"body limits must not be negative; got {limits}")
        self.app = app
        self.default = default
        self.per_path = {path.rstrip("/"): limit for path, limit in (per_path or {}).items()}

    def limit_for(self, path: str) -> BodyLimit:
        return self.per_path.get(path.rstrip("/"), self.default)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["path"])
        declared = _content_length(scope)
        if declared is not None and declared > limit.bytes:
            await _too_large(BodyTooLarge(limit), scope["path"])(scope, receive, send)
            return
        received = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit.bytes:
                    raise BodyTooLarge(limit)
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, watched_send)
        except BodyTooLarge as exc:  # read where no exception handler answers it (e.g. a background read)
            if started:
                raise
            await _too_large(exc, scope["path"])(scope, receive, send)


def _too_large(exc: BodyTooLarge, path: str) -> JSONResponse:
    if is_v1(path):  # an OpenAI client reads only OpenAI's error shape
        return from_http_exception(exc)
    return JSONResponse({"error": "payload_too_large", "message": exc.detail}, status_code=413)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class SecurityHeadersMiddleware:
    """nosniff, no-referrer and Cache-Control no-store on every response; on HTML pages also a
    Content-Security-Policy and X-Frame-Options DENY. A header the route set itself is left as it is (the
    pages and their assets say no-cache: kept, but checked again on each use)."""

    def __init__(self, app: ASGIApp, *, page_csp: str = PAGE_CSP, docs_csp: str = DOCS_CSP) -> None:
        self.app = app
        self.page_csp = page_csp
        self.docs_csp = docs_csp

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        is_docs = scope["path"].startswith(DOCS_PATHS)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                added = [
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"no-referrer"),
                    # Answers hold tokens (log-in), questions and analytics: no cache keeps them, shared or not.
                    (b"cache-control", b"no-store"),
                ]
                content_type = dict(headers).get(b"content-type", b"")
                if content_type.startswith(b"text/html"):
                    csp = self.docs_csp if is_docs else self.page_csp
                    added += [(b"content-security-policy", csp.encode()), (b"x-frame-options", b"DENY")]
                message["headers"] = headers + [(k, v) for k, v in added if k not in present]
            await send(message)

        await self.app(scope, receive, send_with_headers)


def cors_middleware(*, origins: Sequence[str], allow_credentials: bool) -> list[Middleware]:
    """CORSMiddleware for an allow-list of origins; none at all (no CORS headers) for an empty list."""
    if not origins:
        return []
    if allow_credentials and "*" in origins:
        raise ValueError("CORS_ORIGINS may not be '*' when CORS_ALLOW_CREDENTIALS is true")
    return [
        Middleware(
            CORSMiddleware,
            allow_origins=list(origins),
            allow_credentials=allow_credentials,
            allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
            allow_headers=CORS_ALLOWED_HEADERS,
            expose_headers=CORS_EXPOSED_HEADERS,
            max_age=600,
        )
    ]


def gateway_middleware(settings: Settings) -> list[Middleware]:
    """Outermost first: security headers (so every answer carries them, CORS preflights too, which CORSMiddleware
    answers itself), CORS (every answer, 413 included, carries its headers), body limit."""
    return [
        Middleware(SecurityHeadersMiddleware),
        *cors_middleware(origins=settings.cors_origins, allow_credentials=settings.cors_allow_credentials),
        Middleware(
            BodyLimitMiddleware,
            default=BodyLimit(settings.max_body_bytes, "MAX_BODY_BYTES"),
            per_path={UPLOAD_PATH: BodyLimit(settings.max_upload_bytes, "MAX_UPLOAD_BYTES")},
        ),
    ]
