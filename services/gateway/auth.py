"""Logging in, checking a bearer token, listing and ending the caller's sessions, logging out, and a user
changing its own password."""
from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import secrets
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from services.gateway.domain import Session, SessionLifetime, User
from services.gateway.passwords import verify_password
from services.gateway.stores import SessionStore, UserStore
from services.gateway.users import set_password
from shared.errors import DependencyUnavailable, NotFound, ServiceError, Unauthorized

log = logging.getLogger(__name__)

_BAD_CREDENTIALS = "invalid username or password"
_BAD_TOKEN = "invalid or expired token"
# Sliding a session's expiry is a Redis write. Writing it at most once a minute (a tenth of the idle
# lifetime, if that is shorter) saves a round trip on nearly every request; an idle session then ends
# at most that much before a full idle lifetime has passed since its last use.
MAX_REFRESH_DELAY_S = 60.0


def new_token() -> str:
    """256 random bits, URL-safe."""
    return secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _seconds_until(moment: datetime, now: datetime) -> int:
    return max(1, math.ceil((moment - now).total_seconds()))


async def login(
    *, users: UserStore, sessions: SessionStore, username: str, password: str, ttl_s: int, max_age_s: int
) -> tuple[str, Session, User]:
    lifetime = SessionLifetime(idle_s=ttl_s, max_age_s=max_age_s)
    user = await users.get(username)
    # argon2 takes tens of milliseconds of CPU: off the event loop, so other requests go on meanwhile
    matches = await asyncio.to_thread(verify_password, user.password_hash if user else None, password)
    if not matches or user is None or not user.may_log_in:
        raise Unauthorized(_BAD_CREDENTIALS)
    token = new_token()
    now = datetime.now(UTC)
    session = Session(
        id=token_digest(token),
        public_id=secrets.token_hex(8),
        user_id=user.id,
        username=user.username,
        roles=user.roles,
        created_at=now,
        last_seen=now,
        expires_at=lifetime.expires_at(created_at=now, now=now),
    )
    try:
        await sessions.create(session, ttl_s=_seconds_until(session.expires_at, now))
        # `cairn user disable/set-role/reset-password` saves the user first, then ends its sessions. Reading
        # the user again after storing the session either sees that change or proves the command will
        # find this session and end it: a login racing the command never keeps stale rights.
        if await users.get(username) != user:
            await sessions.delete(session)
            raise Unauthorized(_BAD_CREDENTIALS)
    except DependencyUnavailable:
        await abandon_session(sessions=sessions, session=session)
        raise
    return token, session, user


async def abandon_session(*, sessions: SessionStore, session: Session) -> None:
    """End the session of a login that fails on the store: a write whose answer timed out may have reached
    Redis. Best effort: while the store still fails, the session (whose token nobody got) lives until it
    expires."""
    try:
        await sessions.delete(session)
    except DependencyUnavailable:
        log.warning("session of a failed login not ended: it expires by itself", extra={"session": session.public_id})


async def authenticate(*, sessions: SessionStore, token: str | None, ttl_s: int, max_age_s: int) -> Session:
    """The session the token opens, its expiry pushed back (stored at most once per refresh delay); 401 for
    a missing, unknown, ended or too old one."""
    lifetime = SessionLifetime(idle_s=ttl_s, max_age_s=max_age_s)
    if not token:
        raise Unauthorized("missing bearer token")
    session = await sessions.get(token_digest(token))
    if session is None:
        raise Unauthorized(_BAD_TOKEN)
    now = datetime.now(UTC)
    if lifetime.is_over(created_at=session.created_at, now=now):
        await sessions.delete(session)
        raise Unauthorized(_BAD_TOKEN)
    expires_at = lifetime.expires_at(created_at=session.created_at, now=now)
    if not _refresh_due(session, lifetime, expires_at):
        return replace(session, expires_at=lifetime.expires_at(created_at=session.created_at, now=session.last_seen))
    await sessions.touch(session, seen_at=now, ttl_s=_seconds_until(expires_at, now))
    return replace(session, last_seen=now, expires_at=expires_at)


def _refresh_due(session: Session, lifetime: SessionLifetime, expires_at: datetime) -> bool:
    """Whether to store `expires_at`: it moves the stored expiry (`session.expires_at`, read from the
    store) later by the refresh delay or more, or the stored one lies beyond it (a lowered maximum age)."""
    delay = timedelta(seconds=min(MAX_REFRESH_DELAY_S, lifetime.idle_s / 10))
    return expires_at - session.expires_at >= delay or session.expires_at - expires_at > timedelta(seconds=1)


async def logout(*, sessions: SessionStore, session: Session) -> None:
    await sessions.delete(session)


async def list_sessions(*, sessions: SessionStore, caller: Session, max_age_s: int) -> list[Session]:
    """The caller's own live sessions, oldest first (the caller's own one with its fresh expiry). One older
    than `max_age_s`, which was lowered since it began, is left out as its token would be refused, and none
    is said to expire after its login's `max_age_s` is up."""
    now = datetime.now(UTC)
    listed = []
    for session in await sessions.list_for_user(caller.user_id):
        if session.id == caller.id:
            listed.append(caller)
            continue
        hard_limit = session.created_at + timedelta(seconds=max_age_s)
        if now < hard_limit:
            listed.append(replace(session, expires_at=min(session.expires_at, hard_limit)))
    return listed


async def end_session(*, sessions: SessionStore, caller: Session, public_id: str) -> None:
    """End one of the caller's own sessions; someone else's is as unknown as one that never existed."""
    for session in await sessions.list_for_user(caller.user_id):
        if session.public_id == public_id:
            await sessions.delete(session)
            return
    raise NotFound("no such session")


class WrongPassword(ServiceError):
    """The caller's current password, asked for before a change, is not the one given. Not a 401: the token
    is fine, and a client that logs out on 401 would lose its session over a typo."""

    status_code = 403
    code = "wrong_password"


async def check_own_password(*, users: UserStore, caller: Session, password: str) -> None:
    """WrongPassword unless `password` is the caller's current password."""
    user = await users.get(caller.username)
    matches = await asyncio.to_thread(verify_password, user.password_hash if user else None, password)
    if not matches or user is None or user.id != caller.user_id:
        raise WrongPassword("the current password is wrong")


async def set_own_password(*, users: UserStore, sessions: SessionStore, caller: Session, password: str) -> int:
    """Set the caller's new password and end its other sessions, returning how many: whoever held one may have
    had the old password. The session making the change stays."""
    await set_password(users=users, username=caller.username, password=password)
    others = [s for s in await sessions.list_for_user(caller.user_id) if s.id != caller.id]
    for session in others:
        await sessions.delete(session)
    return len(others)
