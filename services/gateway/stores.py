"""The gateway's two stores, as interfaces. The Redis adapter implements both; tests use fakes.

Every method may raise `shared.errors.DependencyUnavailable` when the store does not answer in time:
callers let it through, so the gateway answers 503 and never lets a request in unchecked.
"""
from __future__ import annotations

from datetime import datetime
from typing import Protocol

from services.gateway.domain import Session, User


class UserStore(Protocol):
    async def get(self, username: str) -> User | None: ...

    async def save(self, user: User) -> None:
        """Create or replace the user under its username."""

    async def list(self) -> list[User]: ...


class SessionStore(Protocol):
    """Sessions keyed by token digest, each also listed under its user so that a user's sessions
    can be found without scanning the whole store."""

    async def create(self, session: Session, *, ttl_s: int) -> None:
        """Store the session to expire in `ttl_s` seconds, and list it under its user."""

    async def get(self, session_id: str) -> Session | None:
        """The session with this token digest, or None when it is unknown, expired or ended."""

    async def touch(self, session: Session, *, seen_at: datetime, ttl_s: int) -> None:
        """Record activity at `seen_at` and expire the session `ttl_s` seconds from now (sliding expiry).
        A session ended meanwhile stays ended."""

    async def delete(self, session: Session) -> None: ...

    async def list_for_user(self, user_id: str) -> list[Session]:
        """The user's live sessions, oldest first; forgets the ones that have expired."""

    async def delete_all_for_user(self, user_id: str) -> int:
        """End every session of the user at once; returns how many there were."""

    async def ping(self) -> bool: ...
