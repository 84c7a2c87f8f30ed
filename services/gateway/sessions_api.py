"""`/auth/sessions`: a user sees and ends its own sessions (other devices, a forgotten login)."""
from __future__ import annotations

from fastapi import APIRouter, Response

from services.gateway import auth
from services.gateway.deps import CurrentSession, SessionsDep, SettingsDep
from services.gateway.models import SessionOut, SessionsResponse
from services.gateway.responses import OWN_SESSION, SIGNED_IN
from shared.json_body import StrictJsonRoute

sessions_router = APIRouter(route_class=StrictJsonRoute, prefix="/auth", tags=["auth"])

@sessions_router.get("/sessions", response_model=SessionsResponse, responses=SIGNED_IN)
async def list_sessions(session: CurrentSession, sessions: SessionsDep, settings: SettingsDep) -> SessionsResponse:
    """The caller's live sessions, oldest first; `current` marks the one making this request."""
    mine = await auth.list_sessions(sessions=sessions, caller=session, max_age_s=settings.session_max_age_seconds)
    return SessionsResponse(
        sessions=[
            SessionOut(
                id=s.public_id,
                created_at=s.created_at,
                last_seen=s.last_seen,
                expires_at=s.expires_at,
                current=s.id == session.id,
            )
            for s in mine
        ]
    )


@sessions_router.delete(
    "/sessions/{session_id}",
    status_code=204,
    responses=OWN_SESSION,
)
async def end_session(session_id: str, session: CurrentSession, sessions: SessionsDep) -> Response:
    """End one of the caller's own sessions (the current one too: that is a logout)."""
    await auth.end_session(sessions=sessions, caller=session, public_id=session_id)
    return Response(status_code=204)
