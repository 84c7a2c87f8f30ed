"""What the gateway knows about people and their sessions."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True)
class User:
    id: str
    username: str
    password_hash: str
    roles: tuple[str, ...]
    disabled: bool = False
    created_at: datetime | None = None


@dataclass(frozen=True)
class Session:
    """A live login. `id` is the SHA-256 of the bearer token; the token itself is never stored."""

    id: str
    user_id: str
    username: str
    roles: tuple[str, ...]
    created_at: datetime
    expires_at: datetime
    last_seen: datetime = field(default=None)  # type: ignore[assignment]

    @property
    def public_id(self) -> str:
        """Names the session to other services and in events without revealing the stored digest."""
        return self.id[:16]
