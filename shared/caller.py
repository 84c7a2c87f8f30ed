"""The end user on whose behalf the gateway calls an internal service (sent as X-User-* headers)."""
from __future__ import annotations

from fastapi import Request
from pydantic import BaseModel


class Caller(BaseModel):
    user_id: str | None = None
    roles: tuple[str, ...] = ()
    session_id: str | None = None


async def caller_from_headers(request: Request) -> Caller:
    roles = request.headers.get("X-User-Roles", "")
    return Caller(
        user_id=request.headers.get("X-User-Id") or None,
        roles=tuple(r for r in roles.split(",") if r),
        session_id=request.headers.get("X-Session-Id") or None,
    )
