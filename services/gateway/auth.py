"""Logging in, checking a bearer token, logging out."""
from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime, timedelta

from services.gateway.domain import Session, User
from services.gateway.passwords import verify_password
from services.gateway.stores import SessionStore, UserStore
from shared.errors import Unauthorized


def new_token() -> str:
    """256 random bits, URL-safe."""
    return secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def login(
    *, users: UserStore, sessions: SessionStore, username: str, password: str, ttl_s: int
) -> tuple[str, Session, User]:
    user = await users.get(username)
    if not verify_password(user.password_hash if user else None, password) or user is None or user.disabled:
        raise Unauthorized("invalid username or password")
    token = new_token()
    now = datetime.now(UTC)
    session = Session(
        id=token_digest(token),
        user_id=user.id,
        username=user.username,
        roles=user.roles,
        created_at=now,
        last_seen=now,
        expires_at=now + timedelta(seconds=ttl_s),
    )
    await sessions.create(session, ttl_s=ttl_s)
    return token, session, user


async def authenticate(*, sessions: SessionStore, token: str | None, ttl_s: int) -> Session:
    if not token:
        raise Unauthorized("missing bearer token")
    session = await sessions.get(token_digest(token))
    if session is None:
        raise Unauthorized("invalid or expired token")
    await sessions.touch(session, ttl_s=ttl_s)
    now = datetime.now(UTC)
    return Session(**{**session.__dict__, "last_seen": now, "expires_at": now + timedelta(seconds=ttl_s)})


async def logout(*, sessions: SessionStore, session: Session) -> None:
    await sessions.delete(session.id)
