"""The gateway's two stores, as interfaces. The Redis adapter implements both; tests use fakes."""
from __future__ import annotations

from typing import Protocol

from services.gateway.domain import Session, User


class UserStore(Protocol):
    async def get(self, username: str) -> User | None: ...

    async def save(self, user: User) -> None:
        """Create or replace the user under its username."""

    async def list(self) -> list[User]: ...


class SessionStore(Protocol):
    async def create(self, session: Session, *, ttl_s: int) -> None: ...

    async def get(self, session_id: str) -> Session | None: ...

    async def touch(self, session: Session, *, ttl_s: int) -> None:
        """Record activity and push the expiry `ttl_s` seconds further (sliding expiry)."""

    async def delete(self, session_id: str) -> None: ...

    async def ping(self) -> bool: ...
