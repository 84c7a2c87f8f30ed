from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from services.gateway.adapters.upstream import Upstream
from services.gateway.auth import authenticate
from services.gateway.domain import Session
from services.gateway.roles import grants
from services.gateway.settings import Settings
from services.gateway.stores import SessionStore, UserStore
from shared.errors import Forbidden

_bearer = HTTPBearer(auto_error=False, description="The token from POST /auth/login")


async def _settings(request: Request) -> Settings:
    return request.app.state.settings


async def _users(request: Request) -> UserStore:
    return request.app.state.users


async def _sessions(request: Request) -> SessionStore:
    return request.app.state.sessions


SettingsDep = Annotated[Settings, Depends(_settings)]
UsersDep = Annotated[UserStore, Depends(_users)]
SessionsDep = Annotated[SessionStore, Depends(_sessions)]


async def _current_session(
    sessions: SessionsDep,
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Session:
    token = credentials.credentials if credentials else None
    return await authenticate(sessions=sessions, token=token, ttl_s=settings.session_ttl_seconds)


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
