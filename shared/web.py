"""What every Cairn FastAPI app has: request context, per-request log line and metrics,
JSON errors, /healthz, /readyz, /metrics, and the internal service-token guard."""
from __future__ import annotations

import logging
import re
import secrets
import sys
import time
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import iter_route_contexts
from fastapi_offline import FastAPIOffline
from opentelemetry import trace
from opentelemetry.trace import Span
from pydantic import SecretStr
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared.context import RequestUser, new_request_id, request_id_var, request_user_var, set_user_id
from shared.errors import RETRY_AFTER_S, ErrorBody, ServiceError, StartRefused, Unauthorized
from shared.json_body import StrictJsonRoute
from shared.settings import CommonSettings
from shared.tracing import finish_server_span, inject, server_span
from shared.validation_errors import message_of, one_line

log = logging.getLogger("cairn.http")

REQUESTS = Counter("cairn_http_requests_total", "HTTP requests", ["service", "method", "route", "status"])
LATENCY = Histogram(
    "cairn_http_request_duration_seconds",
    "HTTP request latency",
    ["service", "method", "route", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)

_SAFE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
SERVICE_TOKEN_HEADER = "X-Service-Token"
# The field of /healthz that answers a caller presenting X-Service-Token, and its values.
TOKEN_FIELD, TOKEN_ACCEPTED, TOKEN_REFUSED = "service_token", "accepted", "refused"


class RequestContextMiddleware:
    """Sets request id, user and trace for the request (a SERVER span continuing the caller's `traceparent`),
    echoes X-Request-ID, logs one line for it and counts it.

    Pure ASGI so that streamed responses (SSE) pass through unbuffered.
    """

    def __init__(self, app: ASGIApp, service: str) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, _refusal_in_one_line(self.service, send))
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        incoming = headers.get("x-request-id", "")
        request_id = incoming if _SAFE_REQUEST_ID.fullmatch(incoming) else new_request_id()
        rid_token = request_id_var.set(request_id)
        user = RequestUser()
        user_token = request_user_var.set(user)
        started = time.perf_counter()
        status = 500
        responded = False
        completed = False  # the last of the body was sent
        failed = False
        body_read = not _declares_body(headers)  # the app has had the whole request body (none is had at once)
        left_before_answer = False

        async def receive_watching_body() -> Message:
            nonlocal body_read
            message = await receive()
            body_read = body_read or (message["type"] == "http.request" and not message.get("more_body"))
            return message

        async def send_with_request_id(message: Message) -> None:
            nonlocal status, responded, completed, left_before_answer
            if message["type"] == "http.response.start":
                status = message["status"]
                responded = True
                message.setdefault("headers", [])
                message["headers"].append((b"x-request-id", request_id.encode()))
                # The server drops the answer to a client that has left without a word to the app: only
                # asking the server now tells its request line apart from one that was answered.
                if body_read:
                    left_before_answer = _client_gone(receive)
            await send(message)
            completed = completed or (message["type"] == "http.response.body" and not message.get("more_body"))

        method = scope["method"]
        with server_span(self.service, headers, method=method) as span:
            try:
                await self.app(scope, receive_watching_body, send_with_request_id)
            except Exception as exc:  # raised after the response began, or by a middleware outside UnhandledError's
                failed = True
                # Answered here rather than by the app's Exception handler, which runs outside this middleware:
                # there the log line would have no request id, trace or traceback, and the 500 no X-Request-ID.
                log.exception("unhandled error")
                if span.is_recording():
                    span.record_exception(exc)
                if responded:  # a body was under way: the server can only cut the connection
                    raise
                await _internal_error_response()(scope, receive, send_with_request_id)
            finally:
                # A response begun, not finished, and no error: Starlette stopped the stream as the client left.
                left = left_before_answer or (responded and not completed and not failed)
                self._finish(scope, span, method, request_id, user, status, started, client_disconnected=left)
                request_id_var.reset(rid_token)
                request_user_var.reset(user_token)

    def _finish(
        self, scope: Scope, span: Span, method: str, request_id: str, user: RequestUser, status: int, started: float,
        *, client_disconnected: bool,
    ) -> None:
        elapsed = time.perf_counter() - started
        matched = _template(scope.get("route")) or _route_before_routing(scope)
        route = matched or "unmatched"
        finish_server_span(span, method=method, route=matched, status=status, request_id=request_id)
        REQUESTS.labels(self.service, method, route, str(status)).inc()
        LATENCY.labels(self.service, method, route, str(status)).observe(elapsed)
        if route not in ("/healthz", "/readyz", "/metrics"):
            fields = {
                "method": method,
                "route": route,
                "status": status,
                "latency_ms": round(elapsed * 1000, 1),
                "user_id": user.id,
                "service": self.service,
            }
            if client_disconnected:
                fields["client_disconnected"] = True
            log.info("request", extra=fields)


class UnhandledErrorMiddleware:
    """Answers an error no handler foresaw with 500 internal_error from the innermost place, so that the answer
    passes out through every middleware as any other does (the gateway's security and CORS headers with it).
    One raised after the response began goes on to RequestContextMiddleware: only the connection can be cut."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched_send)
        except Exception as exc:
            # An HTTP error that escaped its handler (the gateway's 413, read in the background) has its own answer.
            if started or isinstance(exc, StarletteHTTPException):
                raise
            log.exception("unhandled error")
            if (span := trace.get_current_span()).is_recording():  # the request's SERVER span
                span.record_exception(exc)
            await _internal_error_response()(scope, receive, send)


def _refusal_in_one_line(service: str, send: Send) -> Send:
    """The lifespan's `send`, saying a StartRefused in one line on stderr (the line `cairn up` shows) in place of
    the traceback Starlette hands the server, which would log it after the line."""

    async def send_refusal(message: Message) -> None:
        # Starlette reports a failed start from within its `except`: the error is the one being handled.
        if message["type"] == "lifespan.startup.failed" and isinstance(refusal := sys.exception(), StartRefused):
            print(f"{service}: cannot start: {refusal}", file=sys.stderr)
            message = {**message, "message": ""}
        await send(message)

    return send_refusal


def _declares_body(headers: dict[str, str]) -> bool:
    return headers.get("content-length", "0") != "0" or "transfer-encoding" in headers


def _client_gone(receive: Receive) -> bool:
    """Whether the server has seen the client close the connection, without waiting. Asked only once the app
    has had the whole request body: a body message still pending would be taken from the app.

    The server's `receive` is run up to its first wait and no further: it answers at once only when the client
    has gone, and otherwise its wait is abandoned. A cancelled wait (an anyio cancel scope) did the same with
    a cancellation delivered on a later turn of the event loop: in the three services a one-client /api/chat
    crosses, that cost 1.6-2.2 ms of its median (docs/benchmarks.md, "End to end")."""
    waiting = receive()
    try:
        waiting.send(None)
    except StopIteration as answered:
        message: Message = answered.value
        return message.get("type") == "http.disconnect"
    waiting.close()
    return False


def _template(route: object) -> str | None:
    """A route's path as the guide writes it, `/documents/{doc_id}`: without the converter its path may name
    (`{doc_id:path}`), which would make the label differ from route to route for no reader's benefit."""
    return getattr(route, "path_format", None) or getattr(route, "path", None)


def _route_before_routing(scope: Scope) -> str | None:
    """The template of the route a request was for when no route named itself in the scope: a middleware
    answered it before the router ran (the gateway's 413 for a declared body over its limit), or a mount
    served it (the API pages' assets), so that it counts under its route, not "unmatched"."""
    router = getattr(scope.get("app"), "router", None)
    # A mount moved the request's root_path on by its prefix: match from the app's own, as the router did.
    at = {**scope, "root_path": scope.get("app_root_path", scope.get("root_path", ""))}
    # A router the app includes is one entry of its routes, with no path of its own: list the routes within.
    for route in iter_route_contexts(getattr(router, "routes", ())):
        if route.matches(at)[0] is Match.FULL:
            return _template(route)
    return None


def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    if invalid := [e for e in errors if e.get("type") == "json_invalid"]:
        reason = (invalid[0].get("ctx") or {}).get("error")
        message = f"request body is not valid JSON: {reason}" if reason else "request body is not valid JSON"
        return JSONResponse({"error": "malformed_json", "message": message}, status_code=400)
    # An unknown field first: a misspelt required field is also missing, and the misspelling is the cause.
    errors = sorted(errors, key=lambda e: e.get("type") != "extra_forbidden")
    detail = [{"loc": list(e.get("loc", ())), "msg": message_of(e)} for e in errors]
    message = one_line(errors[0]) if errors else "invalid request"
    return JSONResponse({"error": "invalid_request", "message": message, "detail": detail}, status_code=422)


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _allowed_methods(routes: list[BaseRoute], scope: Scope) -> str:
    """The methods some route serves at this request's path. Starlette's own 405 names only those of
    the first route whose path matched, though several may serve the path."""
    at = {"type": "http", "path": scope["path"], "root_path": scope.get("root_path", ""), "headers": scope["headers"]}
    allowed = [m for m in _METHODS if any(route.matches({**at, "method": m})[0] is Match.FULL for route in routes)]
    return ", ".join(allowed)


# The codes of the errors the framework raises by status (routing, auth), as every service answers them.
HTTP_ERROR_CODES = {401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}


def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    code = HTTP_ERROR_CODES.get(exc.status_code, "http_error")
    message = exc.detail if isinstance(exc.detail, str) else code
    headers = exc.headers
    if exc.status_code == 405 and (allowed := _allowed_methods(request.app.router.routes, request.scope)):
        headers = {**(headers or {}), "Allow": allowed}
    return JSONResponse({"error": code, "message": message}, status_code=exc.status_code, headers=headers)


def _service_error(request: Request, exc: ServiceError) -> JSONResponse:
    if exc.status_code >= 500:
        log.warning("request failed", extra=exc.log_fields())
    return JSONResponse(exc.body(), status_code=exc.status_code, headers=exc.headers())


def _internal_error_response() -> JSONResponse:
    return JSONResponse({"error": "internal_error", "message": "internal error"}, status_code=500)


def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    """An error raised outside the request middleware (it answers those raised within it)."""
    log.error("unhandled error", exc_info=exc)
    return _internal_error_response()


def error_responses(described: dict[int, str]) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for a route's error statuses, each with the shared error body."""
    return {status: {"model": ErrorBody, "description": text} for status, text in described.items()}


ReadinessCheck = Callable[[], Awaitable[dict[str, bool]]]


def narrow_schema_field(app: FastAPI, *, model: str, field: str, any_of: list[dict[str, Any]]) -> None:
    """Say in the OpenAPI schema what this deployment accepts for one request field (an allow-list
    from settings, say), so clients and schema-driven tests see the values that will not be a 422."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            schema["components"]["schemas"][model]["properties"][field]["anyOf"] = any_of
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


DOCS_ASSETS = "/docs/assets"  # under /docs, so a proxy that routes /docs routes them too


def create_service_app(
    *,
    service: str,
    title: str,
    lifespan: Any = None,
    readiness: ReadinessCheck | None = None,
    needed: Collection[str] | None = None,
    service_token: SecretStr | None = None,
    **kwargs: Any,
) -> FastAPI:
    """`readiness` reports the dependencies; those in `needed` (default: all) make /readyz 503 when down.
    The others are reported only: a service that answers their failure with its own JSON error stays in
    its load balancer (in Kubernetes, a gateway leaving its Service because chat is down would take
    every route down with it). `service_token`, the token an internal service admits callers by: its
    /healthz then also tells a caller that presents one whether it matches (see `token_verdict`), so that
    the callers' /readyz can see a differing CAIRN_SERVICE_TOKEN without calling a route of the service."""
    # The API pages' scripts come from the service itself: they work on a machine without internet access,
    # and no other origin's script runs beside the gateway's pages and their session token.
    app = FastAPIOffline(
        static_url=DOCS_ASSETS,
        title=title,
        lifespan=lifespan,
        responses={400: {"description": "Malformed JSON"}, 422: {"description": "Invalid request"}},
        **kwargs,
    )
    app.router.route_class = StrictJsonRoute  # the routers of each service's api.py set it too
    app.add_middleware(RequestContextMiddleware, service=service)  # the outermost
    app.user_middleware.append(Middleware(UnhandledErrorMiddleware))  # the innermost, after the service's own
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(Exception, _unexpected_error)

    @app.get("/healthz", tags=["ops"])
    async def healthz(request: Request) -> dict:
        answer = {"status": "ok", "service": service}
        if service_token is not None and (given := request.headers.get(SERVICE_TOKEN_HEADER)) is not None:
            answer[TOKEN_FIELD] = TOKEN_ACCEPTED if _matches(given, service_token) else TOKEN_REFUSED
        return answer

    @app.get("/readyz", tags=["ops"])
    async def readyz() -> JSONResponse:
        checks = await readiness() if readiness else {}
        ready = all(up for name, up in checks.items() if needed is None or name in needed)
        if ready:
            return JSONResponse({"status": "ready", "checks": checks})
        # As every 503 of Cairn's: a client or balancer that retries knows when.
        return JSONResponse(
            {"status": "not_ready", "checks": checks}, status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)}
        )

    # HEAD too, as HTTP asks of every GET: uptime checks and `curl -I` ask without wanting the body.
    for path, endpoint in (("/healthz", healthz), ("/readyz", readyz)):
        app.add_api_route(path, endpoint, methods=["HEAD"], include_in_schema=False)

    @app.get("/metrics", tags=["ops"], include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return app


def _matches(given: str, expected: SecretStr) -> bool:
    return secrets.compare_digest(given.encode(), expected.get_secret_value().encode())


def token_verdict(healthz_body: Any) -> bool | None:
    """From a /healthz answer to a request that presented the service token: False when the service
    refused it, True when it accepted it, None when it did not say (a service that admits no token)."""
    verdict = healthz_body.get(TOKEN_FIELD) if isinstance(healthz_body, dict) else None
    return {TOKEN_ACCEPTED: True, TOKEN_REFUSED: False}.get(verdict)


def service_token_guard(settings: CommonSettings) -> Callable[[Request], Awaitable[None]]:
    """A dependency that admits only callers presenting the internal service token."""

    async def guard(request: Request) -> None:
        if not _matches(request.headers.get(SERVICE_TOKEN_HEADER, ""), settings.service_token):
            raise Unauthorized("missing or wrong service token")
        set_user_id(request.headers.get("X-User-Id") or None)  # identity headers count once the token checks out

    return guard


def internal_headers(settings: CommonSettings, **identity: str | None) -> dict[str, str]:
    """Headers for a call to another Cairn service: service token, request id, trace, caller identity.

    The `traceparent` names the current span; wrap the call in shared.tracing.client_span to give it its own."""
    headers = {SERVICE_TOKEN_HEADER: settings.service_token.get_secret_value()}
    if request_id := request_id_var.get():
        headers["X-Request-ID"] = request_id
    inject(headers)
    for name, value in identity.items():
        if value:
            headers[f"X-{name.replace('_', '-').title()}"] = value
    return headers


# Idle kept-alive connections, a pair: a service closes one after SERVER_KEEP_ALIVE_S (uvicorn's default), and
# Cairn's clients of each other (the gateway's proxying, chat's retrieval client) drop theirs sooner, after
# CLIENT_KEEP_ALIVE_S. The other way round, a request sent as the server closes the connection is lost
# (ServerDisconnectedError, a 503 from a healthy service), and a POST that may have reached the server
# cannot be sent again. The client starts counting when it has read the answer's last byte, after the server
# started, so any shorter time keeps the order; the second spare is for safety, not measured.
SERVER_KEEP_ALIVE_S = 5
CLIENT_KEEP_ALIVE_S = SERVER_KEEP_ALIVE_S - 1
# The gateway's public port keeps idle connections longer than the proxies in front of it usually do (nginx,
# ingress-nginx and AWS's load balancers: 60 s), so that the proxy, not the gateway, ends an idle one.
PUBLIC_KEEP_ALIVE_S = 75

# How every Cairn service is served, and every test's real HTTP server, so that tests see the same.
# uvicorn's own proxy-header handling is off: it would take any X-Forwarded-For sent from 127.0.0.1 as
# the client's address, where the gateway trusts only its TRUSTED_PROXIES (empty: nobody's header).
# One worker, stated: uvicorn would otherwise fork WEB_CONCURRENCY workers, a variable platforms set for
# their own purposes, and workers split the metrics and share one outbox file. Replicas scale a service.
# No `Server: uvicorn` header: the gateway's port is public, and naming the server only helps whoever looks
# for the flaws of a version.
SERVER_OPTIONS: dict[str, Any] = {
    "log_config": None, "access_log": False, "proxy_headers": False, "workers": 1,
    "timeout_keep_alive": SERVER_KEEP_ALIVE_S, "server_header": False,
}


def serve(app_path: str, settings: CommonSettings, *, keep_alive_s: int = SERVER_KEEP_ALIVE_S) -> None:
    import uvicorn

    from shared import server

    options = SERVER_OPTIONS | {"timeout_keep_alive": keep_alive_s}
    server.run(uvicorn.Config(app_path, factory=True, host=settings.host, port=settings.port, **options))
