from __future__ import annotations

from collections.abc import Callable, Coroutine
from functools import lru_cache
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from services.gateway.adapters.upstream import Upstream
from services.gateway.asking import admit_question
from services.gateway.auth import authenticate
from services.gateway.domain import Session
from services.gateway.feedback import RequestOwners
from services.gateway.interruptions import note_question
from services.gateway.model_offer import OfferedModels
from services.gateway.rate_limits import (
    IPNetwork,
    Limit,
    LoginLimits,
    RateLimiter,
    client_address,
    parse_networks,
)
from services.gateway.roles import grants
from services.gateway.settings import Settings
from services.gateway.stores import SessionStore, UserStore
from shared.broker import EventPublisher
from shared.context import request_id_var, set_user_id
from shared.errors import Forbidden

_bearer = HTTPBearer(auto_error=False, description="The token from POST /auth/login")


def from_app_state(name: str) -> Callable[[Request], Coroutine[Any, Any, Any]]:
    """A dependency giving what the app's lifespan (or create_app) put on `app.state` under `name`."""

    async def get(request: Request) -> Any:
        return getattr(request.app.state, name)

    return get


SettingsDep = Annotated[Settings, Depends(from_app_state("settings"))]
UsersDep = Annotated[UserStore, Depends(from_app_state("users"))]
SessionsDep = Annotated[SessionStore, Depends(from_app_state("sessions"))]


async def _current_session(
    sessions: SessionsDep,
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Session:
    token = credentials.credentials if credentials else None
    session = await authenticate(
        sessions=sessions, token=token, ttl_s=settings.session_ttl_seconds, max_age_s=settings.session_max_age_seconds
    )
    set_user_id(session.user_id)  # the request's log line names the user
    return session


CurrentSession = Annotated[Session, Depends(_current_session)]


def role(required: str) -> Callable[[Session], Coroutine[Any, Any, Session]]:
    """A dependency that yields the caller's session if one of its roles grants `required`: 403 otherwise."""

    async def check(session: CurrentSession) -> Session:
        if not grants(session.roles, required):
            raise Forbidden(f"this needs the {required} role")
        return session

    return check


UserSession = Annotated[Session, Depends(role("user"))]
AnalystSession = Annotated[Session, Depends(role("analyst"))]
AdminSession = Annotated[Session, Depends(role("admin"))]


def upstream(name: str) -> Callable[[Request], Coroutine[Any, Any, Upstream]]:
    async def get(request: Request) -> Upstream:
        return request.app.state.upstreams[name]

    return get


ChatUpstream = Annotated[Upstream, Depends(upstream("chat"))]
RetrievalUpstream = Annotated[Upstream, Depends(upstream("retrieval"))]
AnalyticsUpstream = Annotated[Upstream, Depends(upstream("analytics"))]


RateLimiterDep = Annotated[RateLimiter, Depends(from_app_state("rate_limiter"))]
RequestOwnersDep = Annotated[RequestOwners, Depends(from_app_state("request_owners"))]
PublisherDep = Annotated[EventPublisher, Depends(from_app_state("publisher"))]
OfferedModelsDep = Annotated[OfferedModels, Depends(from_app_state("offered_models"))]


async def _login_limits(settings: SettingsDep) -> LoginLimits:
    return LoginLimits(
        per_username=Limit(settings.login_attempts_per_username, settings.login_window_s),
        per_address=Limit(settings.login_attempts_per_ip, settings.login_window_s),
    )


LoginLimitsDep = Annotated[LoginLimits, Depends(_login_limits)]


@lru_cache(maxsize=8)
def _networks(entries: tuple[str, ...]) -> tuple[IPNetwork, ...]:
    return parse_networks(entries)


async def _client_address(request: Request, settings: SettingsDep) -> str:
    return client_address(
        peer=request.client.host if request.client else None,
        forwarded_for=",".join(request.headers.getlist("x-forwarded-for")) or None,
        trusted=_networks(settings.trusted_proxies),
    )


ClientAddress = Annotated[str, Depends(_client_address)]


async def _asking_session(
    request: Request, session: UserSession, limiter: RateLimiterDep, owners: RequestOwnersDep, settings: SettingsDep
) -> Session:
    """The caller of a question: counted against CHAT_REQUESTS_PER_MINUTE (429), then remembered as the
    one who asked this request id, so that only they may rate the answer (409 if the id was used before).
    The admitted question is left on the request for QuestionRoute, which withdraws it if it is refused."""
    request.state.admitted_question = await admit_question(
        limiter=limiter,
        owners=owners,
        limit=Limit(settings.chat_requests_per_minute, window_s=60),
        user_id=session.user_id,
        request_id=request_id_var.get(),
        ttl_s=settings.feedback_window_s,
    )
    note_question(request, asker=session, body=await request.body())  # read already: the route's JSON check
    return session


AskingSession = Annotated[Session, Depends(_asking_session)]
