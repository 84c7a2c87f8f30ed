"""Public routes: authentication, and the /api/* routes forwarded to internal services under a role."""
from __future__ import annotations

import json
from urllib.parse import quote

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from services.gateway import auth, rate_limits
from services.gateway.adapters.upstream import Upstream
from services.gateway.deps import (
    AdminSession,
    AnalystSession,
    AnalyticsUpstream,
    AskingSession,
    ChatUpstream,
    ClientAddress,
    CurrentSession,
    LoginLimitsDep,
    RateLimiterDep,
    RetrievalUpstream,
    SessionsDep,
    SettingsDep,
    UserSession,
    UsersDep,
)
from services.gateway.domain import Session
from services.gateway.interruptions import publish_interrupted
from services.gateway.models import LoginRequest, LoginResponse, MeResponse, UserOut
from services.gateway.responses import LOGIN, SIGNED_IN, forwarded
from services.gateway.routing import QuestionRoute, withdrawing_refusal
from services.gateway.settings import Settings
from shared.context import set_user_id
from shared.errors import DependencyUnavailable, Unauthorized, UpstreamTimeout
from shared.json_body import StrictJsonRoute
from shared.web import internal_headers

auth_router = APIRouter(route_class=StrictJsonRoute, prefix="/auth", tags=["auth"])
api_router = APIRouter(route_class=QuestionRoute, prefix="/api", tags=["api"])


@auth_router.post("/login", response_model=LoginResponse, responses=LOGIN)
async def login(
    body: LoginRequest,
    users: UsersDep,
    sessions: SessionsDep,
    settings: SettingsDep,
    limiter: RateLimiterDep,
    limits: LoginLimitsDep,
    address: ClientAddress,
) -> LoginResponse:
    attempt = await rate_limits.start_login(limiter=limiter, limits=limits, username=body.username, address=address)
    try:
        token, session, user = await auth.login(
            users=users,
            sessions=sessions,
            username=body.username,
            password=body.password,
            ttl_s=settings.session_ttl_seconds,
            max_age_s=settings.session_max_age_seconds,
        )
    except DependencyUnavailable:  # no session is left behind (see auth.login), and no failure counted
        await rate_limits.login_cut_short(limiter=limiter, attempt=attempt)
        raise
    except Unauthorized:
        await rate_limits.login_failed(limiter=limiter, attempt=attempt)
        raise
    try:
        await rate_limits.login_succeeded(limiter=limiter, attempt=attempt)  # only failures use up the limits
    except DependencyUnavailable:  # the user gets no token: the session must not stay
        await auth.abandon_session(sessions=sessions, session=session)
        raise
    set_user_id(user.id)  # the request's log line names who logged in
    return LoginResponse(
        token=token, expires_at=session.expires_at, user=UserOut(id=user.id, username=user.username, roles=list(user.roles))
    )


@auth_router.post("/logout", status_code=204, responses=SIGNED_IN)
async def logout(session: CurrentSession, sessions: SessionsDep) -> Response:
    await auth.logout(sessions=sessions, session=session)
    return Response(status_code=204)


@auth_router.get("/me", response_model=MeResponse, responses=SIGNED_IN)
async def me(session: CurrentSession) -> MeResponse:
    return MeResponse(
        user=UserOut(id=session.user_id, username=session.username, roles=list(session.roles)),
        session_created_at=session.created_at,
        expires_at=session.expires_at,
    )


def headers_for(request: Request, session: Session, settings: Settings) -> dict[str, str]:
    headers = internal_headers(
        settings, user_id=session.user_id, user_roles=",".join(session.roles), session_id=session.public_id
    )
    if content_type := request.headers.get("content-type"):
        headers["Content-Type"] = content_type
    return headers


async def _forward(
    upstream: Upstream,
    request: Request,
    session: Session,
    settings: Settings,
    *,
    path: str,
    stream: bool = False,
    timeout_s: float | None = None,
    repeatable: bool | None = None,
) -> Response:
    """The request passed on with its query string; `stream` relays the answer as it arrives instead of whole.
    `timeout_s` replaces UPSTREAM_TIMEOUT_S for a whole answer; `repeatable` (Upstream.forward): it changes nothing."""
    headers = headers_for(request, session, settings)
    body = await request.body() if request.method in ("POST", "PUT", "PATCH") else None
    params = list(request.query_params.multi_items())
    if stream:
        route = request.scope["route"].path  # the gateway's route template, for the count of streams cut off
        return await upstream.forward_stream(
            route=route, method=request.method, path=path, headers=headers, body=body, params=params
        )
    return await upstream.forward(
        method=request.method, path=path, headers=headers, body=body, params=params, timeout_s=timeout_s,
        repeatable=repeatable,
    )


_CHAT = {404: "conversation_id names no conversation of the caller (conversation_not_found)"}
# Retrieval goes on ingesting after the gateway stops waiting: the document may yet be added.
_INGEST_GOES_ON = (
    "the ingest may still complete: GET /api/documents/{doc_id} answers 200 once the document is in; "
    "send it again only if that stays 404"
)
_UPLOAD = {
    415: "An unsupported file or content type",
    504: "The retrieval service did not answer within INGEST_UPSTREAM_TIMEOUT_S (retrieval_timeout), "
    f"but {_INGEST_GOES_ON}",
}
_DOCUMENT = {404: "No document has this id (not_found)"}
_REPORT = {
    404: "No such report (not_found)",
    429: "export.csv: ANALYTICS_MAX_EXPORTS exports are streaming already (too_many_exports, with Retry-After)",
}


@api_router.post(
    "/chat",
    summary="Ask a question; see the chat service's /docs for the body",
    responses=forwarded("chat", _CHAT, asking=True),
)
async def chat(request: Request, session: AskingSession, settings: SettingsDep, chat: ChatUpstream) -> Response:
    return await _forward(chat, request, session, settings, path="/chat")


@api_router.post(
    "/chat/stream",
    summary="Ask a question and receive the answer as Server-Sent Events (sources, token..., done | error)",
    response_class=StreamingResponse,  # so the schema's 200 is the stream alone, not JSON as well
    responses={200: {"description": "The events of chat's POST /chat/stream", "content": {"text/event-stream": {}}},
               **forwarded("chat", _CHAT, asking=True)},
)
async def chat_stream(request: Request, session: AskingSession, settings: SettingsDep, chat: ChatUpstream) -> Response:
    headers = headers_for(request, session, settings)
    response = await chat.forward_stream(
        route="/api/chat/stream", method="POST", path="/chat/stream", headers=headers, body=await request.body(),
        on_lost=lambda: publish_interrupted(request),
    )
    if isinstance(response, StreamingResponse):
        response.body_iterator = withdrawing_refusal(response.body_iterator, request)
    return response


@api_router.post(
    "/search",
    summary="Search the collection; see the retrieval service's /docs for the body",
    responses=forwarded("retrieval"),
)
async def search(request: Request, session: UserSession, settings: SettingsDep, retrieval: RetrievalUpstream) -> Response:
    return await _forward(retrieval, request, session, settings, path="/search", repeatable=True)  # reads only


@api_router.get(
    "/documents",
    summary="List the documents (admin)",
    description="In pages, with the query string passed on to retrieval: `limit` (1..1000, default 100) and `cursor` "
    "(the `next_cursor` of the page before). The response holds `documents`, `total` and `next_cursor`.",
    responses=forwarded("retrieval"),
)
async def list_documents(
    request: Request, session: AdminSession, settings: SettingsDep, retrieval: RetrievalUpstream
) -> Response:
    return await _forward(retrieval, request, session, settings, path="/documents")


@api_router.post("/documents", summary="Add a document (admin)", responses=forwarded("retrieval", _UPLOAD))
async def add_document(
    request: Request, session: AdminSession, settings: SettingsDep, retrieval: RetrievalUpstream
) -> Response:
    try:
        return await _forward(
            retrieval, request, session, settings, path="/documents", timeout_s=settings.ingest_upstream_timeout_s
        )
    except UpstreamTimeout as exc:
        waited = f"{exc.dependency} did not answer within {settings.ingest_upstream_timeout_s:g} s"
        raise UpstreamTimeout(exc.dependency, f"{waited}, but {_INGEST_GOES_ON}") from exc


# GET covers /documents/{id}/similar too: the suffix travels inside the path parameter.
@api_router.get(
    "/documents/{doc_id:path}",
    summary="Read a document, or find documents similar to one (admin)",
    responses=forwarded("retrieval", _DOCUMENT),
)
async def read_document(
    doc_id: str, request: Request, session: AdminSession, settings: SettingsDep, retrieval: RetrievalUpstream
) -> Response:
    return await _forward(retrieval, request, session, settings, path=f"/documents/{quote(doc_id)}")


@api_router.delete(
    "/documents/{doc_id:path}", summary="Delete a document (admin)", responses=forwarded("retrieval", _DOCUMENT)
)
async def delete_document(
    doc_id: str, request: Request, session: AdminSession, settings: SettingsDep, retrieval: RetrievalUpstream
) -> Response:
    # Retrieval holds a delete until an ingest of the same document under way is done: as long as that may take.
    return await _forward(
        retrieval, request, session, settings, path=f"/documents/{quote(doc_id)}",
        timeout_s=settings.ingest_upstream_timeout_s,
    )


@api_router.get(
    "/analytics/{report}",
    summary="Analytics reports (analyst)",
    description="The reports summary, timeseries, top-queries, gaps, documents, models, feedback and export.csv "
    "of the analytics service, with their query string (from, to, model, ...) passed on as sent.",
    responses=forwarded("analytics", _REPORT),
)
async def analytics(
    report: str, request: Request, session: AnalystSession, settings: SettingsDep, analytics: AnalyticsUpstream
) -> Response:
    # Streamed, so the CSV export starts at once however large it is, and is never held whole in memory.
    path = f"/analytics/{quote(report, safe='')}"
    response = await _forward(analytics, request, session, settings, path=path, stream=True)
    # "database_unavailable" alone would not say whose database; "retrieval_unavailable" (the documents
    # report's list) already names the service that is down.
    if response.status_code == 503 and _error_field(response.body, "error") not in _NAMES_A_SERVICE:
        reason = _error_field(response.body, "message") or "it answered 503"
        retry_after = response.headers.get("Retry-After")  # DatabaseBusy's, say
        raise DependencyUnavailable("analytics", f"analytics is unavailable: {reason}", retry_after=retry_after)
    return response


_NAMES_A_SERVICE = frozenset(f"{service}_unavailable" for service in ("chat", "retrieval", "analytics"))


def _error_field(body: bytes, name: str) -> str:
    try:
        value = json.loads(body).get(name)
    except (ValueError, AttributeError):
        value = None
    return value if isinstance(value, str) else ""
