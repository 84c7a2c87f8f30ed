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

    async def create(self, user: User) -> str | None:
        """Store a new user, in one step, unless a user's name equals its name in any case: then the name of
        that user, and nothing is stored (two adds at once never both succeed, nor overwrite each other)."""

    async def update(
        self,
        username: str,
        *,
        password_hash: str | None = None,
        roles: tuple[str, ...] | None = None,
        disabled: bool | None = None,
    ) -> User | None:
        """Set the fields given and no other, in one step, so that commands changing one user at once all
        keep their change; the user as it now is, or None when there is no such user (nothing stored). A damaged
        record that lacks its id or username gets them too: a new id, and the name it is stored under."""

    async def delete(self, user: User) -> bool:
        """Delete the user, in one step, if its name still belongs to this user (same id); whether it did."""

    async def drop_stray_name(self, username: str) -> bool:
        """Forget a name listed among the users without a record (one deleted by hand), in one step; whether
        there was such a name. A name with a record stays."""

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
